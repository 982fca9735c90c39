package examples_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// TestOperatorsHoldNoRightTheyDoNotUse: what the operators never do must
// not be granted by config/default (the in-cluster e2e suites prove the
// other side: every right they use is granted). Secrets are read one at a
// time through the API reader, never listed or watched, but for the
// Role of the webhook certificate in the operator's own namespace
// (cert-controller caches that namespace's Secrets); children are
// server-side applied, never updated (a guard ConfigMap is patched, for
// its finalizer); a Lease is never deleted; and the
// port-forward right of an operator outside the cluster
// (--member-access=port-forward) is in config/portforward only.
func TestOperatorsHoldNoRightTheyDoNotUse(t *testing.T) {
	type right struct{ group, resource, verb string }
	never := []right{
		{"", "secrets", "list"}, {"", "secrets", "watch"},
		{"", "pods", "update"}, {"", "services", "update"}, {"", "persistentvolumeclaims", "update"},
		{"", "configmaps", "update"},
		{"apps", "deployments", "update"}, {"policy", "poddisruptionbudgets", "update"},
		{"", "pods/portforward", "create"},
		{"coordination.k8s.io", "leases", "delete"},
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range repo.Operators {
		t.Run(ex.Dir, func(t *testing.T) {
			for _, o := range testkit.KustomizeBuild(t, filepath.Join(root, "examples", ex.Dir, "config/default")) {
				if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
					continue
				}
				var role rbacv1.ClusterRole
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
					t.Fatal(err)
				}
				// The rotator of webhook.RotateCertificates.
				certRole := o.GetKind() == "Role" && o.GetName() == ex.Name+"-webhook-cert-role" && o.GetNamespace() == ex.Namespace
				for _, rule := range role.Rules {
					for _, r := range never {
						if certRole && r.resource == "secrets" {
							continue
						}
						if slices.Contains(rule.APIGroups, r.group) && slices.Contains(rule.Resources, r.resource) && slices.Contains(rule.Verbs, r.verb) {
							t.Errorf("%s %s grants %s on %s (group %q), which the operator never does", o.GetKind(), o.GetName(), r.verb, r.resource, r.group)
						}
					}
				}
			}
		})
	}
}

// TestPortForwardOverlayGrantsTheOperator: config/portforward grants
// create on pods/portforward to the ServiceAccount config/default runs
// the etcd operator as.
func TestPortForwardOverlayGrantsTheOperator(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "etcd", "config")
	dep := only(t, testkit.KustomizeBuild(t, filepath.Join(dir, "default")), "Deployment")
	sa, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
	objs := testkit.KustomizeBuild(t, filepath.Join(dir, "portforward"))
	var binding rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(only(t, objs, "ClusterRoleBinding").Object, &binding); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: dep.GetNamespace()}}
	if diff := cmp.Diff(want, binding.Subjects); diff != "" {
		t.Errorf("port-forward binding subjects (-config/default's operator +overlay):\n%s", diff)
	}
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(only(t, objs, "ClusterRole").Object, &role); err != nil {
		t.Fatal(err)
	}
	if binding.RoleRef.Name != role.Name || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"pods/portforward"}) {
		t.Errorf("the binding %s does not grant the role %s of pods/portforward: %+v", binding.RoleRef.Name, role.Name, role.Rules)
	}
}
