package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opkit-dev/opkit/internal/testkit"
)

// pinnedModules are the versions a kubebuilder scaffold pins that adding
// opkit must not change.
var pinnedModules = []string{"sigs.k8s.io/controller-runtime", "k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"}

// TestKubebuilderGuidePortsTheScaffold does what kubebuilder.md tells a
// user to do, to the scaffold-shaped project in testdata/kubebuilder: it
// runs the project's own envtest test before the port, adds opkit (and
// checks that no version the scaffold pins moved), writes the guide's files
// over the scaffold's, regenerates with controller-gen, and runs the same
// unchanged test again. The guide's alternative SetupWithManager must
// compile too.
func TestKubebuilderGuidePortsTheScaffold(t *testing.T) {
	t.Parallel() // each compiles a module of its own: minutes on two cores
	repo, controllerGen := repoTools(t)
	assets := envtestAssets(t, repo)

	guide, err := os.ReadFile("kubebuilder.md")
	if err != nil {
		t.Fatal(err)
	}
	files, altSetup := guideFiles(t, string(guide))

	dir := t.TempDir()
	copyTree(t, filepath.Join("testdata", "kubebuilder"), dir)
	copyGoSum(t, repo, dir)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(testkit.GoEnv("-mod=mod"), "GOWORK=off", "KUBEBUILDER_ASSETS="+assets)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	generate := func() {
		t.Helper()
		// One run, as the scaffold's make manifests generate would take
		// two: each run loads the packages anew.
		run(controllerGen, "object", "crd", "rbac:roleName=manager-role", "webhook", "paths=./...",
			"output:crd:artifacts:config=config/crd/bases", "output:rbac:artifacts:config=config/rbac")
	}
	versions := func() string {
		t.Helper()
		return run(append([]string{"go", "list", "-m", "-f", "{{.Path}} {{.Version}}"}, pinnedModules...)...)
	}

	// The scaffold as it is: its test passes.
	generate()
	run("go", "mod", "tidy")
	before := versions()
	run("go", "test", "-count=1", "./...")

	// Step 1: add opkit (from this checkout). Steps 2 to 4: the guide's files.
	run("go", "mod", "edit", "-require=github.com/opkit-dev/opkit@v0.0.0", "-replace=github.com/opkit-dev/opkit="+repo)
	for name, code := range files {
		write(t, filepath.Join(dir, name), code)
	}
	run("go", "mod", "tidy")
	if diff := cmp.Diff(before, versions()); diff != "" {
		t.Errorf("adding opkit changed versions the scaffold pins (-before +after):\n%s", diff)
	}
	generate()
	crd, err := os.ReadFile(filepath.Join(dir, "config", "crd", "bases", "cache.example.com_memcacheds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(crd), "observedGeneration: -1") {
		t.Errorf("the regenerated CRD does not default status.observedGeneration to -1:\n%s", crd)
	}
	role, err := os.ReadFile(filepath.Join(dir, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"memcacheds/status", "events.k8s.io", "deployments"} {
		if !strings.Contains(string(role), want) {
			t.Errorf("the port's role grants nothing on %s:\n%s", want, role)
		}
	}
	run("go", "vet", "./...")
	// Step 5: the scaffold's tests (the controller's unchanged) against
	// the port.
	run("go", "test", "-count=1", "./...")

	// The alternative SetupWithManager compiles in place of the first.
	controller := files["internal/controller/memcached_controller.go"]
	setup := regexp.MustCompile(`(?s)// SetupWithManager sets up.*?\n}\n`)
	if !setup.MatchString(controller) {
		t.Fatal("the guide's controller has no SetupWithManager to replace")
	}
	alt := setup.ReplaceAllLiteralString(controller, altSetup)
	alt = strings.Replace(alt, "\t\"sigs.k8s.io/controller-runtime/pkg/builder\"\n", "", 1)
	write(t, filepath.Join(dir, "internal/controller/memcached_controller.go"), alt)
	run("go", "vet", "./...")
}

// guideFiles returns the complete Go files of kubebuilder.md, by path in the
// project, and its alternative SetupWithManager.
func guideFiles(t *testing.T, guide string) (map[string]string, string) {
	t.Helper()
	files := map[string]string{}
	var altSetup string
	for _, b := range goBlock.FindAllStringSubmatch(guide, -1) {
		code := b[1]
		switch {
		case strings.HasPrefix(code, "package v1alpha1") && strings.Contains(code, "type MemcachedSpec struct"):
			files["api/v1alpha1/memcached_types.go"] = code
		case strings.HasPrefix(code, "// Package controller"):
			files["internal/controller/memcached_controller.go"] = code
		case strings.HasPrefix(code, "package controller") && strings.Contains(code, "func AdmissionHooks"):
			files["internal/controller/memcached_checks.go"] = code
		case strings.HasPrefix(code, "// Package v1alpha1 serves"):
			files["internal/webhook/v1alpha1/memcached_webhook.go"] = code
		case strings.HasPrefix(code, "package v1alpha1") && strings.Contains(code, `Describe("Memcached Webhook"`):
			files["internal/webhook/v1alpha1/memcached_webhook_test.go"] = code
		case strings.HasPrefix(code, "func (r *MemcachedReconciler) SetupWithManager"):
			altSetup = code
		}
	}
	if len(files) != 5 || altSetup == "" {
		t.Fatalf("found %d of the guide's 5 complete Go files and alternative SetupWithManager %t", len(files), altSetup != "")
	}
	return files, altSetup
}
