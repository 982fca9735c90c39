package harness

import (
	"flag"
	"testing"
)

// TestDefaultParallel: WithParallelTests sets go test's -parallel, unless
// the command line gave it, and only once.
func TestDefaultParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag: the testing package has changed")
	}
	before := f.Value.String()
	t.Cleanup(func() { _ = flag.Set("test.parallel", before) })
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })

	if err := defaultParallel(0); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != before {
		t.Errorf("defaultParallel(0) set -parallel to %s, want it left at %s", got, before)
	}
	want := "7"
	if given {
		want = before // go test -parallel N: the command line wins
	}
	if err := defaultParallel(7); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != want {
		t.Errorf("after defaultParallel(7): -parallel %s, want %s", got, want)
	}
	// Set now, as if given: a second call changes nothing.
	if err := defaultParallel(9); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != want {
		t.Errorf("after defaultParallel(9): -parallel %s, want %s (set already)", got, want)
	}
}
