package reconcile_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
)

// A field the caller stops setting must be removed from the child even
// though the live object still "carries every desired field" in the subset
// sense: shorter lists, maps without a key, nil pointers.
func TestEnsureChildRemovesWhatIsNoLongerSet(t *testing.T) {
	full := func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Args = []string{"-a", "-b"}
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
			}}},
		}}
		// desiredDeployment shares one map between labels and selector.
		d.Labels = map[string]string{"app": "web", "tier": "cache"}
	}
	tests := []struct {
		name   string
		remove func(*appsv1.Deployment)
		got    func(*appsv1.Deployment) any
		want   any
	}{
		{"trailing list item", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Args = []string{"-a"} },
			func(d *appsv1.Deployment) any { return d.Spec.Template.Spec.Containers[0].Args }, []string{"-a"}},
		{"map key", func(d *appsv1.Deployment) {
			delete(d.Spec.Template.Spec.Containers[0].Resources.Limits, corev1.ResourceCPU)
		},
			func(d *appsv1.Deployment) any {
				_, ok := d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]
				return ok
			}, false},
		{"pointer", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Affinity = nil },
			func(d *appsv1.Deployment) any { return d.Spec.Template.Spec.Affinity == nil }, true},
		{"label", func(d *appsv1.Deployment) { delete(d.Labels, "tier") },
			func(d *appsv1.Deployment) any { _, ok := d.Labels["tier"]; return ok }, false},
	}
	// How the child was created: applied (a Children without an uncached
	// reader), or POSTed (with one) and then read, as an operator's cache
	// does, without managedFields. A POSTed child's first update that sets
	// other fields (every removal here) also moves its fields to the field
	// owner's apply: one write more, once.
	creations := []struct {
		name        string
		children    func(f *fixture) *reconcile.Children
		firstWrites int
	}{
		{"applied", func(f *fixture) *reconcile.Children { return f.children() }, 1},
		{"posted", func(f *fixture) *reconcile.Children {
			ch, err := reconcile.NewChildren(strippingReader{f.c}, env.Scheme,
				reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(f.c))
			testkit.Must(f.t, err)
			return ch
		}, 2},
	}
	for _, cr := range creations {
		for _, tt := range tests {
			t.Run(cr.name+"/"+tt.name, func(t *testing.T) {
				removeFromChild(t, cr.children, cr.firstWrites, full, tt.remove, tt.got, tt.want)
			})
		}
	}
}

// removeFromChild creates the Deployment with full set, then ensures it
// without what remove unsets, twice: the first call updates it with
// firstWrites writes, the second sends none; got of the live Deployment
// must then be want.
func removeFromChild(t *testing.T, children func(*fixture) *reconcile.Children, firstWrites int,
	full, remove func(*appsv1.Deployment), got func(*appsv1.Deployment) any, want any) {
	t.Helper()
	f := newFixture(t)
	ch := children(f)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()

	d := desiredDeployment(f.ns, "web:1")
	full(d)
	if _, err := ch.EnsureChild(ctx, owner, d); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		want       reconcile.ChildWrite
		wantWrites int
	}{{reconcile.ChildUpdated, firstWrites}, {reconcile.ChildUnchanged, 0}} {
		d := desiredDeployment(f.ns, "web:1")
		full(d)
		remove(d)
		f.counter.Reset()
		op, err := ch.EnsureChild(ctx, owner, d)
		if err != nil {
			t.Fatal(err)
		}
		if op != step.want {
			t.Errorf("EnsureChild = %s, want %s", op, step.want)
		}
		f.wantWrites(step.wantWrites)
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if diff := cmp.Diff(want, got(live)); diff != "" {
		t.Errorf("live Deployment after the removal (-want +got):\n%s", diff)
	}
}

// TestEnsureChildUpdatesAPostedChildWithOneApply: a POSTed child updated
// with the same fields and other values (a Deployment's replicas) gets one
// apply, without the uncached read and the JSON patch that move the POST's
// fields to the apply; a later update that stops setting a field the POST
// set still removes it, moving them first. Once moved, no update reads the
// child again.
func TestEnsureChildUpdatesAPostedChildWithOneApply(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	// strippingReader stands in for the cache: each of its reads is one
	// GET here, which an operator's cache would serve from memory.
	ch, err := reconcile.NewChildren(strippingReader{f.c}, env.Scheme,
		reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(f.c))
	testkit.Must(t, err)
	desired := func(replicas int32, args ...string) *appsv1.Deployment {
		d := desiredDeployment(f.ns, "web:1")
		d.Spec.Replicas = &replicas
		d.Spec.Template.Spec.Containers[0].Args = args
		return d
	}
	if op, err := ch.EnsureChild(ctx, owner, desired(1, "-a", "-b")); err != nil || op != reconcile.ChildCreated {
		t.Fatalf("creating the child: %s, %v", op, err)
	}

	for _, step := range []struct {
		name     string
		desired  *appsv1.Deployment
		requests map[string]int
	}{
		{"replicas 1 -> 2: the cache read and one apply", desired(2, "-a", "-b"), map[string]int{"GET": 1, "PATCH": 1}},
		{"replicas 2 -> 3: the same", desired(3, "-a", "-b"), map[string]int{"GET": 1, "PATCH": 1}},
		{"-b removed: the cache read, the uncached read, the move and the apply", desired(3, "-a"), map[string]int{"GET": 2, "PATCH": 2}},
		{"replicas 3 -> 4 once moved: the cache read and one apply", desired(4, "-a"), map[string]int{"GET": 1, "PATCH": 1}},
		{"-a removed once moved: the same", desired(4), map[string]int{"GET": 1, "PATCH": 1}},
	} {
		f.counter.Reset()
		if op, err := ch.EnsureChild(ctx, owner, step.desired); err != nil || op != reconcile.ChildUpdated {
			t.Fatalf("%s: EnsureChild = %s, %v; want %s", step.name, op, err, reconcile.ChildUpdated)
		}
		if diff := cmp.Diff(step.requests, f.counter.Counts()); diff != "" {
			t.Errorf("%s: requests (-want +got):\n%s", step.name, diff)
		}
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if diff := cmp.Diff([]string(nil), live.Spec.Template.Spec.Containers[0].Args); diff != "" || *live.Spec.Replicas != 4 {
		t.Errorf("live Deployment: replicas %d, args (-want +got):\n%s", *live.Spec.Replicas, diff)
	}
}

// TestEnsureChildChangesAPostedDeploymentsStrategy: the API server
// defaults a RollingUpdate Deployment's rollingUpdate, and the POST owns
// what it defaulted. An update to Recreate must take that over and remove
// it (the server refuses rollingUpdate with Recreate), although it sets no
// field the POST did not.
func TestEnsureChildChangesAPostedDeploymentsStrategy(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ch, err := reconcile.NewChildren(strippingReader{f.c}, env.Scheme,
		reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(f.c))
	testkit.Must(t, err)
	desired := func(strategy appsv1.DeploymentStrategyType) *appsv1.Deployment {
		d := desiredDeployment(f.ns, "web:1")
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: strategy}
		return d
	}
	if op, err := ch.EnsureChild(t.Context(), owner, desired(appsv1.RollingUpdateDeploymentStrategyType)); err != nil || op != reconcile.ChildCreated {
		t.Fatalf("creating the child: %s, %v", op, err)
	}
	if op, err := ch.EnsureChild(t.Context(), owner, desired(appsv1.RecreateDeploymentStrategyType)); err != nil || op != reconcile.ChildUpdated {
		t.Fatalf("EnsureChild with Recreate = %s, %v; want %s", op, err, reconcile.ChildUpdated)
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if live.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || live.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("live strategy %+v, want Recreate without rollingUpdate", live.Spec.Strategy)
	}
}
