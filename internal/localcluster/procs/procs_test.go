package procs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestWithFindsAProcessByItsArguments: a child started with a marker in
// its arguments is found, by pid and name; this process never is.
func TestWithFindsAProcessByItsArguments(t *testing.T) {
	// The marker is in the executable's path: a link to sleep in a
	// directory named for this test, as the daemons carry their state
	// directory in their arguments.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "procs-test-marker")
	if err := os.Mkdir(marker, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, filepath.Join(marker, "sleep")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(marker, "sleep"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Start returns once the child is forked; until it has exec'd, its
	// command line is still this test's: wait for the exec.
	var got []int
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got = With(marker)
		return len(got) > 0, nil
	})
	if err != nil || !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("With(marker) = %v (%v), want [%d]", got, err, cmd.Process.Pid)
	}
	if name := Name(cmd.Process.Pid); name != "sleep" {
		t.Errorf("Name = %q, want sleep", name)
	}
	if slices.Contains(With(os.Args[0]), os.Getpid()) {
		t.Error("With returned this process")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := With(marker); len(got) != 0 {
		t.Errorf("With(marker) after exit = %v, want none", got)
	}
	if name := Name(cmd.Process.Pid); name != "" {
		t.Errorf("Name of an exited process = %q, want empty", name)
	}
}
