package testkit

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGoEnv(t *testing.T) {
	race := ""
	if raceEnabled {
		race = " -race"
	}
	for _, tc := range []struct {
		name    string
		env     string
		goflags []string
		want    string
	}{
		{name: "nothing set", want: strings.TrimPrefix(race, " ")},
		{name: "the caller's flags", goflags: []string{"-mod=mod"}, want: "-mod=mod" + race},
		{name: "the environment's flags first", env: "-count=1  -v", goflags: []string{"-mod=mod"}, want: "-count=1 -v -mod=mod" + race},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOFLAGS", tc.env)
			env := GoEnv(tc.goflags...)
			// exec.Cmd uses the last of duplicate keys: that must be ours.
			var got string
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
					got = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GOFLAGS (-want +got):\n%s", diff)
			}
		})
	}
}
