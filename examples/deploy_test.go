package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// TestBuildInstallerFollowsIMG renders each installer with an image of
// another registry and checks what a user relies on: the Deployment runs
// IMG (the etcd operator's --restore-image too), every namespaced object is
// in the operator's namespace with its prefix, and the service account the
// Deployment runs as is the one its bindings name.
func TestBuildInstallerFollowsIMG(t *testing.T) {
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			const img = "registry.example/team/op:v9.9.9"
			objs := buildInstaller(t, ex.Dir, img)
			dep := only(t, objs, "Deployment")
			containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 {
				t.Fatalf("containers: %v", containers)
			}
			manager := containers[0].(map[string]any)
			if got := manager["image"]; got != img {
				t.Errorf("image = %v, want %s", got, img)
			}
			if ex.Dir == "etcd" {
				env := map[string]any{}
				for _, e := range manager["env"].([]any) {
					env[e.(map[string]any)["name"].(string)] = e.(map[string]any)["value"]
				}
				args, _ := manager["args"].([]any)
				if env["RESTORE_IMAGE"] != img || !slices.Contains(args, any("--restore-image=$(RESTORE_IMAGE)")) {
					t.Errorf("restore image: env %v, args %v; want RESTORE_IMAGE=%s used by --restore-image", env, manager["args"], img)
				}
			}
			sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace" {
					continue
				}
				if !strings.HasPrefix(o.GetName(), ex.Name+"-") {
					t.Errorf("%s %s lacks the prefix %s-", o.GetKind(), o.GetName(), ex.Name)
				}
				clusterScoped := slices.Contains([]string{"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
					"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}, o.GetKind())
				if !clusterScoped && o.GetNamespace() != ex.Namespace {
					t.Errorf("%s %s in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), ex.Namespace)
				}
				if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
					subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
					want := []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": ex.Namespace}}
					if diff := cmp.Diff(want, subjects); diff != "" {
						t.Errorf("%s %s subjects (-want +got):\n%s", o.GetKind(), o.GetName(), diff)
					}
				}
			}
			if ns := only(t, objs, "Namespace"); ns.GetName() != ex.Namespace {
				t.Errorf("Namespace %s, want %s", ns.GetName(), ex.Namespace)
			}
		})
	}
}

// TestServiceMonitorMatchesMetricsService: config/prometheus is applied on
// its own, with its own namespace and prefix; its ServiceMonitor must be in
// the metrics Service's namespace, select it, and scrape its port over
// HTTPS with a token.
func TestServiceMonitorMatchesMetricsService(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			var svc *unstructured.Unstructured
			for _, o := range testkit.KustomizeBuild(t, filepath.Join(root, "examples", ex.Dir, "config/default")) {
				if o.GetKind() == "Service" && strings.HasSuffix(o.GetName(), "-metrics-service") {
					svc = o
				}
			}
			if svc == nil {
				t.Fatal("config/default has no Service named *-metrics-service")
			}
			mon := only(t, testkit.KustomizeBuild(t, filepath.Join(root, "examples", ex.Dir, "config/prometheus")), "ServiceMonitor")
			if mon.GetNamespace() != svc.GetNamespace() || !strings.HasPrefix(mon.GetName(), ex.Name+"-") {
				t.Errorf("ServiceMonitor %s/%s, want it in %s with the prefix %s-", mon.GetNamespace(), mon.GetName(), svc.GetNamespace(), ex.Name)
			}
			selector, _, _ := unstructured.NestedStringMap(mon.Object, "spec", "selector", "matchLabels")
			for k, v := range selector {
				if svc.GetLabels()[k] != v {
					t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, svc.GetLabels())
				}
			}
			endpoints, _, _ := unstructured.NestedSlice(mon.Object, "spec", "endpoints")
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			if len(endpoints) != 1 || len(ports) != 1 {
				t.Fatalf("endpoints %v, ports %v: want one each", endpoints, ports)
			}
			ep, port := endpoints[0].(map[string]any), ports[0].(map[string]any)
			if ep["port"] != port["name"] || ep["scheme"] != "https" || ep["bearerTokenFile"] == nil {
				t.Errorf("endpoint %v does not scrape the Service port %v over HTTPS with a token", ep, port)
			}
		})
	}
}

// TestInstallersUpToDate: the committed dist/install.yaml is what make
// build-installer writes for the default image.
func TestInstallersUpToDate(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(root, "examples", ex.Dir, "dist/install.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			got := runBuildInstaller(t, ex.Dir, "opkit.dev/"+ex.Name+":dev")
			if !bytes.Equal(got, want) {
				t.Errorf("examples/%s/dist/install.yaml is stale: run make installers and commit it", ex.Dir)
			}
		})
	}
}

// buildInstaller runs make build-installer IMG=img for the example and
// decodes the objects it wrote.
func buildInstaller(t *testing.T, dir, img string) []*unstructured.Unstructured {
	t.Helper()
	return testkit.DecodeObjects(t, runBuildInstaller(t, dir, img))
}

func runBuildInstaller(t *testing.T, dir, img string) []byte {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "install.yaml")
	cmd := exec.CommandContext(t.Context(), "make", "-s", "-C", filepath.Join(root, "examples", dir), "build-installer", "IMG="+img, "INSTALLER="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build-installer: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// only returns the one object of kind, failing unless there is exactly one.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// TestEtcdSamplesNameWhatTheyCreate keeps the etcd operator's samples
// working as written (kubectl apply -k config/samples): every Secret,
// EtcdBackup and EtcdCluster a sample names is one of the samples, and the
// S3 store's Secret points at the store's Service.
func TestEtcdSamplesNameWhatTheyCreate(t *testing.T) {
	objs := testkit.KustomizeBuild(t, filepath.Join("etcd", "config", "samples"))
	have := map[string]bool{}
	for _, o := range objs {
		have[o.GetKind()+"/"+o.GetName()] = true
	}
	var named []string
	for _, o := range objs {
		for _, ref := range [][]string{
			{"Secret", "spec", "storeRef", "s3SecretName"},
			{"Secret", "spec", "backup", "storeRef", "s3SecretName"},
			{"EtcdBackup", "spec", "restore", "backupName"},
			{"EtcdCluster", "spec", "clusterName"},
		} {
			if name, ok, _ := unstructured.NestedString(o.Object, ref[1:]...); ok {
				named = append(named, ref[0]+"/"+name)
				if !have[ref[0]+"/"+name] {
					t.Errorf("%s %s names %s %q, which no sample creates", o.GetKind(), o.GetName(), ref[0], name)
				}
			}
		}
	}
	if len(named) < 4 {
		t.Errorf("the samples name only %v; want a cluster with backups, an EtcdBackup and a restore", named)
	}
	endpoint, _, _ := unstructured.NestedString(only(t, objs, "Secret").Object, "stringData", "endpoint")
	svc := only(t, objs, "Service").GetName()
	if !strings.HasPrefix(endpoint, "http://"+svc+".") {
		t.Errorf("the S3 Secret's endpoint %q is not the store's Service %s", endpoint, svc)
	}
}
