package testkit

import (
	"os"
	"strings"
)

// GoEnv returns the environment for a go command a test runs, such as go
// vet, build or test in a scratch module: the test's own environment with
// GOFLAGS made of the environment's GOFLAGS, then goflags, then -race when
// the test binary itself was built with -race.
//
// The go command shares a package's build in the Go build cache only
// between identical build configurations. A go command started without the
// test's -race compiles every dependency a second time, which on a machine
// with an empty cache costs minutes for a Kubernetes client stack; started
// with GoEnv, it reuses what go test (and make vet) already built.
//
// GoEnv passes on only -race. A test binary built otherwise (CGO_ENABLED=0,
// -trimpath from the command line rather than GOFLAGS) starts go commands
// that build differently from it.
func GoEnv(goflags ...string) []string {
	flags := strings.Fields(os.Getenv("GOFLAGS"))
	flags = append(flags, goflags...)
	if raceEnabled {
		flags = append(flags, "-race")
	}
	return append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
}
