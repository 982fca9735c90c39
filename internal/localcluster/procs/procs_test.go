package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
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
	got := With(marker)
	if !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("With(marker) = %v, want [%d]", got, cmd.Process.Pid)
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
