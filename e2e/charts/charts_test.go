// Package charts keeps each example operator's Helm chart (dist/chart) in
// step with its config/: rendered with the defaults, the chart must
// install exactly what make deploy installs, and each value must do what
// values.yaml says. It renders charts with helm's Go SDK (client-only, as
// helm template does) and needs no cluster, only bin/kustomize.
package charts

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// TestChartInstallsWhatMakeDeployInstalls renders each chart with the
// defaults (plus the chart owning its namespace, the ServiceMonitor on,
// CRDs not kept) and compares every object with kustomize's render of
// config/default and config/prometheus: same objects, same specs, rules,
// and data; the chart may add labels but not change or drop one. With
// certManager.enable it compares with config/certmanager instead, where
// the example has one.
func TestChartInstallsWhatMakeDeployInstalls(t *testing.T) {
	root := root(t)
	for _, ex := range repo.Operators {
		for _, overlay := range []string{"default", "certmanager"} {
			dir := filepath.Join(root, "examples", ex.Dir)
			if _, err := os.Stat(filepath.Join(dir, "config", overlay)); err != nil {
				continue
			}
			t.Run(ex.Dir+"/"+overlay, func(t *testing.T) {
				want := byKey(testkit.KustomizeBuild(t, filepath.Join(dir, "config", overlay)))
				for k, o := range byKey(testkit.KustomizeBuild(t, filepath.Join(dir, "config", "prometheus"))) {
					want[k] = o
				}
				got := byKey(render(t, ex.Dir, ex.Name, "default", map[string]any{
					"namespace":   map[string]any{"create": true, "name": ex.Namespace},
					"prometheus":  map[string]any{"enable": true},
					"crd":         map[string]any{"keep": false},
					"certManager": map[string]any{"enable": overlay == "certmanager"},
				}))
				compareObjects(t, want, got)
			})
		}
	}
}

// compareObjects fails unless got holds want's objects, equal but for
// labels got may add.
func compareObjects(t *testing.T, want, got map[string]*unstructured.Unstructured) {
	t.Helper()
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
		t.Fatalf("objects (-make deploy +chart):\n%s", diff)
	}
	for k, w := range want {
		g := got[k]
		for name, value := range w.GetLabels() {
			if g.GetLabels()[name] != value {
				t.Errorf("%s: label %s = %q, want %q as config/ sets it", k, name, g.GetLabels()[name], value)
			}
		}
		w, g = w.DeepCopy(), g.DeepCopy()
		unstructured.RemoveNestedField(w.Object, "metadata", "labels")
		unstructured.RemoveNestedField(g.Object, "metadata", "labels")
		if diff := cmp.Diff(w.Object, g.Object); diff != "" {
			t.Errorf("%s (-make deploy +chart):\n%s", k, diff)
		}
	}
}

// TestChartValues renders each chart with one value changed at a time and
// checks what values.yaml promises of it.
func TestChartValues(t *testing.T) {
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			const ns = "ops"
			fullname := ex.Name
			tests := []struct {
				name   string
				values map[string]any
				check  func(t *testing.T, objs map[string]*unstructured.Unstructured)
			}{{
				name: "defaults: the release's namespace, CRDs kept, no ServiceMonitor",
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					for k, o := range objs {
						if o.GetKind() == "Namespace" || o.GetKind() == "ServiceMonitor" {
							t.Errorf("%s rendered by default", k)
						}
						if o.GetNamespace() != "" && o.GetNamespace() != ns {
							t.Errorf("%s is not in the release namespace %s", k, ns)
						}
						if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
							t.Errorf("%s: not kept on uninstall by default (crd.keep)", k)
						}
					}
					clusterBinding(t, objs, fullname+"-manager-rolebinding")
				},
			}, {
				name:   "watchNamespaces: the role bound in each, the metrics checks cluster-wide, --namespaces",
				values: map[string]any{"watchNamespaces": []any{"team-a", "team-b"}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					if o, ok := objs["ClusterRoleBinding//"+fullname+"-manager-rolebinding"]; ok {
						t.Errorf("the manager's role is still bound cluster-wide: %v", o.Object)
					}
					for _, team := range []string{"team-a", "team-b"} {
						b := mustGet(t, objs, "RoleBinding/"+team+"/"+fullname+"-manager-rolebinding")
						if ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name"); ref != fullname+"-manager-role" {
							t.Errorf("RoleBinding in %s binds %s", team, ref)
						}
					}
					clusterBinding(t, objs, fullname+"-metrics-auth-rolebinding")
					if args := managerArgs(t, objs); !slices.Contains(args, "--namespaces=team-a,team-b") {
						t.Errorf("args %v lack --namespaces=team-a,team-b", args)
					}
				},
			}, {
				name:   "metrics.enable false: no endpoint, Service or reader role",
				values: map[string]any{"metrics": map[string]any{"enable": false}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					if args := managerArgs(t, objs); !slices.Contains(args, "--metrics-bind-address=0") {
						t.Errorf("args %v do not disable metrics", args)
					}
					noneNamed(t, objs, "metrics")
				},
			}, {
				name:   "metrics.secure false: plain HTTP, said by the port's name",
				values: map[string]any{"metrics": map[string]any{"secure": false}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					if args := managerArgs(t, objs); !slices.Contains(args, "--metrics-secure=false") {
						t.Errorf("args %v lack --metrics-secure=false", args)
					}
					svc := mustGet(t, objs, "Service/"+ns+"/"+fullname+"-controller-manager-metrics-service")
					ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
					if name := ports[0].(map[string]any)["name"]; name != "http" {
						t.Errorf("metrics Service port %v, want http", name)
					}
				},
			}, {
				name:   "leaderElection.enable false with one replica: no --leader-elect, no Lease role",
				values: map[string]any{"leaderElection": map[string]any{"enable": false}, "manager": map[string]any{"replicas": 1}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					if args := managerArgs(t, objs); slices.Contains(args, "--leader-elect") {
						t.Errorf("args %v elect a leader", args)
					}
					noneNamed(t, objs, "leader-election")
				},
			}, {
				name:   "crd.enable false: no CRDs",
				values: map[string]any{"crd": map[string]any{"enable": false}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					for k, o := range objs {
						if o.GetKind() == "CustomResourceDefinition" {
							t.Errorf("%s rendered with crd.enable false", k)
						}
					}
				},
			}, {
				name: "manager.image and resources",
				values: map[string]any{"manager": map[string]any{
					"image":     map[string]any{"repository": "registry.example/team/op", "tag": "v9.9.9"},
					"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}},
				}},
				check: func(t *testing.T, objs map[string]*unstructured.Unstructured) {
					c := manager(t, objs)
					if c["image"] != "registry.example/team/op:v9.9.9" {
						t.Errorf("image %v", c["image"])
					}
					// Helm merges maps: the default requests stay.
					want := map[string]any{"limits": map[string]any{"memory": "1Gi"}, "requests": map[string]any{"cpu": "50m", "memory": "64Mi"}}
					if diff := cmp.Diff(want, c["resources"]); diff != "" {
						t.Errorf("resources (-want +got):\n%s", diff)
					}
					// The etcd operator's restore init containers run its own image.
					for _, e := range envOf(c) {
						if e["name"] == "RESTORE_IMAGE" && e["value"] != "registry.example/team/op:v9.9.9" {
							t.Errorf("RESTORE_IMAGE = %v, not the manager's image", e["value"])
						}
					}
				},
			}}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					tt.check(t, byKey(render(t, ex.Dir, ex.Name, ns, tt.values)))
				})
			}
		})
	}
}

// TestChartRefusesWhatCannotWork: values that would install a broken
// operator fail the render, naming the value to fix.
func TestChartRefusesWhatCannotWork(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"two replicas without leader election", map[string]any{"leaderElection": map[string]any{"enable": false}}, "leaderElection.enable"},
		{"a created namespace without a name", map[string]any{"namespace": map[string]any{"create": true, "name": ""}}, "namespace.name"},
	}
	dir := filepath.Join(root(t), "examples", "memcached", "dist", "chart")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := harness.RenderChart(t.Context(), dir, "memcached-operator", "ops", tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func root(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// render renders examples/<example>/dist/chart with values.
func render(t *testing.T, example, release, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	out, err := harness.RenderChart(t.Context(), filepath.Join(root(t), "examples", example, "dist", "chart"), release, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.DecodeObjects(t, []byte(out))
}

// byKey indexes objects by kind/namespace/name.
func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		m[fmt.Sprintf("%s/%s/%s", o.GetKind(), o.GetNamespace(), o.GetName())] = o
	}
	return m
}

func mustGet(t *testing.T, objs map[string]*unstructured.Unstructured, key string) *unstructured.Unstructured {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s among %v", key, slices.Sorted(maps.Keys(objs)))
	}
	return o
}

// noneNamed fails for each object whose kind/namespace/name has part.
func noneNamed(t *testing.T, objs map[string]*unstructured.Unstructured, part string) {
	t.Helper()
	for k := range objs {
		if strings.Contains(k, part) {
			t.Errorf("%s rendered", k)
		}
	}
}

// clusterBinding fails unless the ClusterRoleBinding name is rendered.
func clusterBinding(t *testing.T, objs map[string]*unstructured.Unstructured, name string) {
	t.Helper()
	mustGet(t, objs, "ClusterRoleBinding//"+name)
}

// manager is the manager container of the one Deployment.
func manager(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			return containers[0].(map[string]any)
		}
	}
	t.Fatal("no Deployment rendered")
	return nil
}

func managerArgs(t *testing.T, objs map[string]*unstructured.Unstructured) []string {
	t.Helper()
	var args []string
	for _, a := range manager(t, objs)["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

func envOf(container map[string]any) []map[string]any {
	var env []map[string]any
	list, _ := container["env"].([]any)
	for _, e := range list {
		env = append(env, e.(map[string]any))
	}
	return env
}

// TestChartNotes renders NOTES.txt as helm install prints it: what was
// installed, and the commands that check it, for the values that change it.
func TestChartNotes(t *testing.T) {
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			deploy := ex.Name + "-controller-manager"
			tests := []struct {
				name          string
				values        map[string]any
				want, wantNot []string
			}{{
				name: "defaults",
				want: []string{
					"is installed as release " + ex.Name,
					"the Deployment ops/" + deploy,
					"which helm uninstall keeps, with every custom resource",
					"kubectl -n ops rollout status deployment/" + deploy,
					"kubectl -n ops logs deployment/" + deploy,
					"the Service ops/" + deploy + "-metrics-service on port 8443 (HTTPS",
				},
			}, {
				name:    "CRDs not kept, plain metrics",
				values:  map[string]any{"crd": map[string]any{"keep": false}, "metrics": map[string]any{"secure": false}},
				want:    []string{"which helm uninstall deletes, with every custom resource"},
				wantNot: []string{"HTTPS"},
			}, {
				name:    "no CRDs, no metrics",
				values:  map[string]any{"crd": map[string]any{"enable": false}, "metrics": map[string]any{"enable": false}},
				want:    []string{"the CRDs are not the chart's"},
				wantNot: []string{"Metrics:", "helm uninstall"},
			}, {
				name:   "the chart's namespace",
				values: map[string]any{"namespace": map[string]any{"create": true, "name": ex.Namespace}},
				want:   []string{"the Deployment " + ex.Namespace + "/" + deploy, "kubectl -n " + ex.Namespace + " logs"},
			}}
			crds := crdNames(t, ex.Dir)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					notes, err := harness.RenderChartNotes(t.Context(), filepath.Join(root(t), "examples", ex.Dir, "dist", "chart"), ex.Name, "ops", tt.values)
					if err != nil {
						t.Fatal(err)
					}
					want := tt.want
					for _, crd := range crds {
						plural, _, _ := strings.Cut(crd, ".")
						want = append(want, "kubectl get "+plural+" -A")
						if tt.values["crd"] == nil || tt.values["crd"].(map[string]any)["enable"] != false {
							want = append(want, "  "+crd+"\n")
						}
					}
					for _, w := range want {
						if !strings.Contains(notes, w) {
							t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
						}
					}
					for _, w := range tt.wantNot {
						if strings.Contains(notes, w) {
							t.Errorf("NOTES.txt has %q:\n%s", w, notes)
						}
					}
				})
			}
		})
	}
}

// crdNames returns the names of the example's CRDs, from config/crd/bases.
func crdNames(t *testing.T, example string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), "examples", example, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("CRDs of %s: %v, %v", example, files, err)
	}
	var names []string
	for _, f := range files {
		// controller-gen names the file <group>_<plural>.yaml.
		group, plural, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		names = append(names, plural+"."+group)
	}
	return names
}

// TestChartSharding: sharding.enable runs the memcached operator's
// replicas as shards: --shard and no --leader-elect, a Role for the shard
// Leases instead of leader election's, and with the webhook the one that
// labels new Memcacheds with their slot. With leader election on as well,
// the render fails naming both values.
func TestChartSharding(t *testing.T) {
	const ns, fullname = "ops", "memcached-operator"
	objs := byKey(render(t, "memcached", fullname, ns, map[string]any{
		"sharding":       map[string]any{"enable": true},
		"leaderElection": map[string]any{"enable": false},
		"manager":        map[string]any{"replicas": 3},
	}))
	if args := managerArgs(t, objs); !slices.Contains(args, "--shard") || slices.Contains(args, "--leader-elect") {
		t.Errorf("args %v: want --shard and no --leader-elect", args)
	}
	noneNamed(t, objs, "leader-election")
	role := mustGet(t, objs, "Role/"+ns+"/"+fullname+"-shard-role")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	want := []any{map[string]any{
		"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"},
		"verbs": []any{"get", "list", "watch", "create", "patch", "delete"},
	}}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("shard Role rules (-want +got):\n%s", diff)
	}
	b := mustGet(t, objs, "RoleBinding/"+ns+"/"+fullname+"-shard-rolebinding")
	if ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name"); ref != role.GetName() {
		t.Errorf("the shard RoleBinding binds %s", ref)
	}

	// The webhook that labels a new Memcached with its slot, and the
	// right to write its caBundle into that configuration only.
	cfgName := fullname + "-shard-webhook-configuration"
	if args := managerArgs(t, objs); !slices.Contains(args, "--mutating-webhook-configuration="+cfgName) {
		t.Errorf("args %v: want --mutating-webhook-configuration=%s", args, cfgName)
	}
	hooks, _, _ := unstructured.NestedSlice(mustGet(t, objs, "MutatingWebhookConfiguration//"+cfgName).Object, "webhooks")
	wantHooks := []any{map[string]any{
		"admissionReviewVersions": []any{"v1"},
		"clientConfig": map[string]any{"service": map[string]any{
			"name": fullname + "-webhook-service", "namespace": ns, "path": "/label-slot-memcached",
		}},
		"failurePolicy": "Ignore",
		"name":          "slot.shard.opkit.dev",
		"objectSelector": map[string]any{"matchExpressions": []any{map[string]any{
			"key": "slot.shard.opkit.dev/memcached", "operator": "DoesNotExist",
		}}},
		"rules": []any{map[string]any{
			"apiGroups": []any{"cache.opkit.dev"}, "apiVersions": []any{"*"},
			"operations": []any{"CREATE"}, "resources": []any{"memcacheds"},
		}},
		"sideEffects":    "None",
		"timeoutSeconds": float64(5),
	}}
	if diff := cmp.Diff(wantHooks, hooks); diff != "" {
		t.Errorf("shard webhook (-want +got):\n%s", diff)
	}
	clusterBinding(t, objs, fullname+"-shard-webhook-rolebinding")
	hookRules, _, _ := unstructured.NestedSlice(mustGet(t, objs, "ClusterRole//"+fullname+"-shard-webhook-role").Object, "rules")
	if got := hookRules[len(hookRules)-1].(map[string]any); !cmp.Equal(got["resourceNames"], []any{cfgName}) || !cmp.Equal(got["verbs"], []any{"update"}) {
		t.Errorf("shard webhook ClusterRole: last rule %v, want update of %s only", got, cfgName)
	}
	noHook := byKey(render(t, "memcached", fullname, ns, map[string]any{
		"sharding":       map[string]any{"enable": true},
		"leaderElection": map[string]any{"enable": false},
		"webhook":        map[string]any{"enable": false},
	}))
	noneNamed(t, noHook, "shard-webhook")

	_, err := harness.RenderChart(t.Context(), filepath.Join(root(t), "examples", "memcached", "dist", "chart"), fullname, ns,
		map[string]any{"sharding": map[string]any{"enable": true}})
	if err == nil || !strings.Contains(err.Error(), "sharding.enable") || !strings.Contains(err.Error(), "leaderElection.enable") {
		t.Errorf("sharding with leader election: render error = %v, want one naming both values", err)
	}
}
