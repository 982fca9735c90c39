// Package docs holds opkit's guides. Its test compiles the code in them, so
// that a guide cannot drift from the library.
package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/testkit"
)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestFirstOperatorGuideBuilds writes the Go files of first-operator.md into a
// scratch module that uses this checkout of opkit, generates its deepcopy
// code, CRD and webhook configuration with controller-gen as the guide
// says, builds it, and runs the guide's envtest tests.
func TestFirstOperatorGuideBuilds(t *testing.T) {
	t.Parallel() // each compiles a module of its own: minutes on two cores
	guide, err := os.ReadFile("first-operator.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllStringSubmatch(string(guide), -1)
	files := map[string]string{}
	for _, b := range blocks {
		code := b[1]
		switch {
		case strings.HasPrefix(code, "// Package v1alpha1"):
			files["api/v1alpha1/types.go"] = code
		case strings.HasPrefix(code, "package main") && strings.Contains(code, "func TestMain("):
			files["main_test.go"] = code
		case strings.HasPrefix(code, "package main") && strings.Contains(code, "testenv.WithWebhooks("):
			files["webhook_test.go"] = code
		case strings.HasPrefix(code, "package main") && strings.Contains(code, "+kubebuilder:webhook:"):
			files["webhook.go"] = code
		case strings.HasPrefix(code, "package main"):
			files["main.go"] = code
		}
	}
	if len(files) != 5 {
		t.Fatalf("found %d of the guide's 5 complete Go files (types.go, main.go, main_test.go, webhook.go, webhook_test.go)", len(files))
	}
	repo, controllerGen := repoTools(t)
	assets := envtestAssets(t, repo)
	dir := t.TempDir()
	files["go.mod"] = "module example.com/greeter\n\ngo 1.26.0\n\nrequire github.com/opkit-dev/opkit v0.0.0\n\nreplace github.com/opkit-dev/opkit => " + repo + "\n"
	for name, content := range files {
		write(t, filepath.Join(dir, name), content)
	}
	copyGoSum(t, repo, dir)
	for _, args := range [][]string{
		{"go", "mod", "tidy"},
		{controllerGen, "object", "crd", "rbac:roleName=manager-role", "paths=./...",
			"output:crd:artifacts:config=config/crd", "output:rbac:artifacts:config=config/rbac"},
		{controllerGen, "webhook", "paths=./...", "output:webhook:artifacts:config=config/webhook"},
		{"go", "vet", "./..."},
		{"go", "build", "-o", filepath.Join(dir, "greeter"), "."},
		{"go", "test", "-count=1", "./..."},
	} {
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(testkit.GoEnv("-mod=mod"), "KUBEBUILDER_ASSETS="+assets)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "config", "crd", "greeter.example.com_greetings.yaml")); err != nil {
		t.Errorf("controller-gen wrote no CRD: %v", err)
	}
	role, err := os.ReadFile(filepath.Join(dir, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatalf("controller-gen wrote no role: %v", err)
	}
	for _, want := range []string{"greetings/status", "greetings/finalizers", "events.k8s.io", "configmaps"} {
		if !strings.Contains(string(role), want) {
			t.Errorf("the guide's role grants nothing on %s:\n%s", want, role)
		}
	}
}

// TestGuideCodeIsTheExamples: the Go blocks of the README and of the
// guides that show a package's API are cut from the packages' runnable
// examples, which the test suite compiles and runs, so that the code a
// user reads cannot drift from the library.
func TestGuideCodeIsTheExamples(t *testing.T) {
	for _, tt := range []struct {
		doc      string
		examples []string
	}{
		{"../README.md", []string{"../reconcile/example_test.go"}},
		{"stateful.md", []string{"../guard/example_test.go", "../operation/example_test.go", "../backup/storetest/example_test.go", "../backup/example_operation_test.go"}},
		{"webhooks.md", []string{"../webhook/example_test.go"}},
		{"sharding.md", []string{"../reconcile/example_test.go"}},
	} {
		t.Run(filepath.Base(tt.doc), func(t *testing.T) {
			doc, err := os.ReadFile(tt.doc)
			if err != nil {
				t.Fatal(err)
			}
			var examples strings.Builder
			for _, f := range tt.examples {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				examples.WriteString(flatten(string(b)) + "\n")
			}
			blocks := goBlock.FindAllStringSubmatch(string(doc), -1)
			if len(blocks) == 0 {
				t.Fatalf("%s has no Go block", tt.doc)
			}
			for _, b := range blocks {
				if !strings.Contains(examples.String(), flatten(b[1])) {
					t.Errorf("this block of %s is in none of %v:\n%s", tt.doc, tt.examples, b[1])
				}
			}
		})
	}
}

// flatten drops indentation and blank lines.
func flatten(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
