package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOperatorProfileURLs(t *testing.T) {
	op := func(name, url string, killed bool) *operator {
		return &operator{name: name, pprofURL: url, killed: killed}
	}
	single := op("opkit", "http://127.0.0.1:1", false)
	r0, r1 := op("r0", "http://127.0.0.1:2", false), op("r1", "http://127.0.0.1:3", false)
	tests := []struct {
		name     string
		cur      *operator
		replicas []*operator
		want     map[string]string
	}{
		{name: "no operator", want: map[string]string{}},
		{name: "one replica", cur: single, replicas: []*operator{single},
			want: map[string]string{"opkit-operator": "http://127.0.0.1:1/debug/pprof/profile"}},
		{name: "every live replica", cur: r0, replicas: []*operator{r0, r1, op("r2", "http://127.0.0.1:4", true)},
			want: map[string]string{
				"r0-operator": "http://127.0.0.1:2/debug/pprof/profile",
				"r1-operator": "http://127.0.0.1:3/debug/pprof/profile",
			}},
		{name: "not profiled", cur: op("opkit", "", false), want: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bench{e: &env{replicas: tt.replicas}, cur: &contender{op: tt.cur}}
			if diff := cmp.Diff(tt.want, b.operatorProfileURLs()); diff != "" {
				t.Errorf("operatorProfileURLs (-want +got):\n%s", diff)
			}
		})
	}
}
