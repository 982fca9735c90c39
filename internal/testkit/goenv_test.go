package testkit

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRaceEnabled checks the build tags of race.go and norace.go against
// the -race setting go test records in the binary.
func TestRaceEnabled(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	race := false
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			race = s.Value == "true"
		}
	}
	if raceEnabled != race {
		t.Errorf("raceEnabled = %v, but the binary's -race setting is %v", raceEnabled, race)
	}
}

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
