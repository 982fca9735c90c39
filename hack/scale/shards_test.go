package main

import (
	"strings"
	"testing"
)

// TestRenderShards tables one replica against three: each replica's share
// of the objects and its resident set against the single replica's, the
// restart and the failover.
func TestRenderShards(t *testing.T) {
	member := func(name string, held int, rss int64) shardMember {
		return shardMember{Name: name, Held: held, RSSBeforeCreate: 40 << 20, RSSAfterCreate: rss << 20,
			Requests: requests{Reconciles: float64(2 * held), Total: float64(3 * held), Writes: float64(held)}}
	}
	res := &shardsResult{Command: "cd hack && go run ./scale -replicas 1,3", Runs: []*shardRun{
		{Replicas: 1, N: 1000, Create: phase{Seconds: 50}, Members: []shardMember{member("opkit", 1000, 100)},
			Restart: &restartResult{ListSeconds: 0.5, ListAllSeconds: 1.5, ReadySeconds: 1, LastPassSeconds: 0.75,
				Requests: requests{Reconciles: 1000, Total: 3}, ClusterWrites: map[string]float64{"leases": 4}}},
		{Replicas: 3, N: 1000, Create: phase{Seconds: 55}, Members: []shardMember{member("r0", 340, 45), member("r1", 330, 44), member("r2", 330, 44)},
			Failover: &failoverResult{Killed: "r1", Moved: 330, LeaseSeconds: 15, FirstMovedSeconds: 12.5, RelabelledSeconds: 14.2, PassedSeconds: 15.1}},
	}}
	got := renderShards(res)
	for _, want := range []string{
		"| 1 | 50.0 s | opkit | 1000 | 100.0 MB |  |",
		"| 3 | 55.0 s (1.10x) | r0 | 340 | 45.0 MB | 45% |",
		"| 3 |  | r1 | 330 | 44.0 MB | 44% |",
		"RSS growth per Memcached over the create step: 61.4 KB",
		"last pass after 0.8 s (1.5x one list of the Memcacheds, 0.50 s; 0.5x listing all the operator caches, 1.50 s); 1000 passes, 3 requests, **0 writes**",
		"r1 killed (SIGKILL) holding 330 Memcacheds: the first in a slot a survivor holds after 12.5 s, all after 14.2 s, and passed by the survivors after 15.1 s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("shards.md lacks %q:\n%s", want, got)
		}
	}
}
