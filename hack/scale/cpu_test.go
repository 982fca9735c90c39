package main

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/localcluster"
)

// TestCPUSnapshotCountsEveryReplica: a sharded step's operator CPU is
// that of all its replicas, not of the first alone.
func TestCPUSnapshotCountsEveryReplica(t *testing.T) {
	var replicas []*operator
	var want float64
	for _, name := range []string{"r0", "r1"} {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		op := &operator{name: name, cmd: cmd}
		replicas = append(replicas, op)
		// Stopped once it spent some CPU, so that its time holds still.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			s, err := cpuSeconds(op.pid())
			if err != nil {
				t.Fatal(err)
			}
			if s >= 0.05 || time.Now().After(deadline) {
				break
			}
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		s, err := cpuSeconds(op.pid())
		if err != nil {
			t.Fatal(err)
		}
		want += s
	}
	e := &env{cluster: &localcluster.Cluster{Name: "no-such-cluster"}, replicas: replicas}
	b := &bench{e: e, cur: &contender{op: replicas[0]}}
	if got := b.cpuSnapshot()["operator"]; got != want {
		t.Errorf("operator CPU %.3f s, want both replicas' %.3f s", got, want)
	}
}
