package docs

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// makeCall is `make [-C dir] target` where the project tells someone to run
// it: in a code span (also in messages naming the fix) or at the start of a
// command line. In Markdown, command lines are only those of fenced blocks:
// prose wraps onto lines starting with "make the ...".
var makeCall = regexp.MustCompile("(?m)(?:^[ \t]*(?:\\$ )?(?:cd (\\S+) && )?|`)make (?:-C (\\S+) )?([a-z][a-z0-9-]*)")

var (
	fence = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	span  = regexp.MustCompile("`[^`\n]*`")
)

// commands returns what in a file of the extension ext may be a command.
func commands(text, ext string) string {
	if ext != ".md" {
		return text
	}
	var b strings.Builder
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		b.WriteString(m[1])
	}
	for _, m := range span.FindAllString(fence.ReplaceAllString(text, ""), -1) {
		b.WriteString("\n" + m + "\n")
	}
	return b.String()
}

var placeholder = regexp.MustCompile(`<[^>]*>`)

// alsoIn names, per file, the other Makefiles its calls may run in:
// kubebuilder.md shows both this repository's targets and the scaffold's.
var alsoIn = map[string][]string{
	"docs/kubebuilder.md": {"docs/testdata/kubebuilder"},
}

// TestMakeTargetsExist fails when a document, a message or a script names a
// make target that the Makefile it runs in does not have (a user once met
// a target that was renamed).
func TestMakeTargetsExist(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string][]string{} // Makefile's directory -> its targets
	targetsOf := func(dir string) []string {
		if ts, ok := targets[dir]; ok {
			return ts
		}
		targets[dir] = makeTargets(t, filepath.Join(repo, dir))
		return targets[dir]
	}
	checked := 0
	err = filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".local", "bin", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".sh", ".mk", ".txt", ".tpl", ".yaml":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range makeCall.FindAllStringSubmatch(commands(string(b), filepath.Ext(path)), -1) {
			dir, target := m[1]+m[2], m[3]
			dirs := []string{dir}
			switch {
			case dir == "":
				// The docs run make at the root unless they say
				// otherwise; Makefiles and scripts beside theirs.
				dirs = append([]string{"."}, alsoIn[rel]...)
				if d := makefileDir(repo, rel); d != "." {
					dirs = append(dirs, d)
				}
			case strings.Contains(dir, "<"):
				// A placeholder: every directory it stands for.
				dirs, _ = filepath.Glob(filepath.Join(repo, placeholder.ReplaceAllString(dir, "*"), "Makefile"))
				for i := range dirs {
					dirs[i] = filepath.Dir(dirs[i])
				}
			}
			checked++
			found := false
			for _, d := range dirs {
				if r, err := filepath.Rel(repo, d); err == nil && filepath.IsAbs(d) {
					d = r
				}
				found = found || slices.Contains(targetsOf(filepath.Clean(d)), target)
			}
			if !found {
				t.Errorf("%s: `make %s` runs in %v, whose Makefile has no target %q", rel, target, dirs, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Errorf("checked %d calls of make; the pattern no longer finds them", checked)
	}
}

// makefileDir is the directory a bare `make` in the file rel runs in: the
// nearest directory above it with a Makefile.
func makefileDir(repo, rel string) string {
	for dir := filepath.Dir(rel); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(repo, dir, "Makefile")); err == nil || dir == "." {
			return dir
		}
	}
}

// makeTargets lists the explicit targets of the Makefile in dir, as make
// itself reads it.
func makeTargets(t *testing.T, dir string) []string {
	t.Helper()
	// -p prints the database, -q runs nothing; make exits 1 as the
	// target ":" is missing.
	cmd := exec.CommandContext(t.Context(), "make", "-C", dir, "-pRrq", ":")
	out, _ := cmd.Output()
	var ts []string
	for line := range strings.Lines(string(out)) {
		name, _, ok := strings.Cut(line, ":")
		if ok && name != "" && !strings.ContainsAny(name, " \t#%.=$/") {
			ts = append(ts, name)
		}
	}
	if len(ts) == 0 {
		t.Fatalf("make -C %s -pRrq printed no target", dir)
	}
	return ts
}
