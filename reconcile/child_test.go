package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
)

func desiredDeployment(ns, image string, env ...corev1.EnvVar) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: image, Env: env,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
}

func TestEnsureChild(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()

	ensure := func(d client.Object, want reconcile.ChildWrite, wantWrites int) {
		t.Helper()
		f.counter.Reset()
		op, err := ch.EnsureChild(ctx, owner, d)
		if err != nil {
			t.Fatalf("EnsureChild: %v", err)
		}
		if op != want {
			t.Errorf("EnsureChild = %s, want %s", op, want)
		}
		f.wantWrites(wantWrites)
	}

	ensure(desiredDeployment(f.ns, "web:1", corev1.EnvVar{Name: "A", Value: "1"}), reconcile.ChildCreated, 1)

	// The API server defaulted strategy, revisionHistoryLimit,
	// imagePullPolicy, protocol, terminationMessagePath, ...: none of that is
	// a difference.
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if live.Spec.RevisionHistoryLimit == nil || live.Spec.Template.Spec.Containers[0].ImagePullPolicy == "" {
		t.Fatalf("expected server defaults on the live Deployment, got %+v", live.Spec)
	}
	ensure(desiredDeployment(f.ns, "web:1", corev1.EnvVar{Name: "A", Value: "1"}), reconcile.ChildUnchanged, 0)

	// Someone else labels it; that is not ours to undo, and no write.
	live.Labels["team"] = "payments"
	testkit.Must(t, env.Client.Update(ctx, live))
	ensure(desiredDeployment(f.ns, "web:1", corev1.EnvVar{Name: "A", Value: "1"}), reconcile.ChildUnchanged, 0)

	// A real change is applied; others' fields and server defaults stay;
	// a field we stop setting (the env var) is removed.
	ensure(desiredDeployment(f.ns, "web:2"), reconcile.ChildUpdated, 1)
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	c := live.Spec.Template.Spec.Containers[0]
	if c.Image != "web:2" || len(c.Env) != 0 || live.Labels["team"] != "payments" || live.Spec.RevisionHistoryLimit == nil {
		t.Errorf("after update: image %q env %v labels %v revisionHistoryLimit %v", c.Image, c.Env, live.Labels, live.Spec.RevisionHistoryLimit)
	}
	if ctl := metav1.GetControllerOf(live); ctl == nil || ctl.UID != owner.UID {
		t.Errorf("controller = %v, want owner", ctl)
	}
	// The digest is a label: the Deployment controller copies a
	// Deployment's annotations to its ReplicaSets, and a digest annotation
	// would cost a ReplicaSet write on every change.
	if live.Labels[reconcile.LabelAppliedDigest] == "" {
		t.Errorf("labels %v have no %s", live.Labels, reconcile.LabelAppliedDigest)
	}
	if len(live.Annotations) != 0 {
		t.Errorf("annotations = %v, want none: EnsureChild adds none of its own", live.Annotations)
	}
	ensure(desiredDeployment(f.ns, "web:2"), reconcile.ChildUnchanged, 0)

	// A child written by an older opkit, which recorded the digest in an
	// annotation of the same name, is applied once more; that removes the
	// annotation (our field manager owned it).
	old := desiredDeployment(f.ns, "web:2")
	old.Annotations = map[string]string{reconcile.LabelAppliedDigest: "0123456789abcdef01234567"}
	testkit.Must(t, ownership.SetControllerReference(owner, old, env.Scheme))
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	testkit.Must(t, err)
	oldApply := &unstructured.Unstructured{Object: u}
	oldApply.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	unstructured.RemoveNestedField(oldApply.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(oldApply.Object, "spec", "template", "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(oldApply.Object, "status")
	testkit.Must(t, env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(oldApply), client.FieldOwner("opkit-widget"), client.ForceOwnership))
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if _, ok := live.Labels[reconcile.LabelAppliedDigest]; ok {
		t.Fatalf("the old-style apply left the digest label: %v", live.Labels)
	}
	ensure(desiredDeployment(f.ns, "web:2"), reconcile.ChildUpdated, 1)
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if _, ok := live.Annotations[reconcile.LabelAppliedDigest]; ok || live.Labels[reconcile.LabelAppliedDigest] == "" {
		t.Errorf("after re-apply: annotations %v, labels %v; want the digest in the labels only", live.Annotations, live.Labels)
	}
	ensure(desiredDeployment(f.ns, "web:2"), reconcile.ChildUnchanged, 0)
}

// TestEnsureChildRestoresOwnerReferences: an owner reference the desired
// child carries besides its controller (a second owner that keeps it from
// the garbage collector) is put back when someone removes it, although
// the child's digest and every other field are unchanged.
func TestEnsureChildRestoresOwnerReferences(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	holder := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: f.ns}}
	testkit.Must(t, env.Client.Create(ctx, holder))
	desired := func() *appsv1.Deployment {
		d := desiredDeployment(f.ns, "web:1")
		d.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: holder.Name, UID: holder.UID}}
		return d
	}
	if _, err := ch.EnsureChild(ctx, owner, desired()); err != nil {
		t.Fatal(err)
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	live.OwnerReferences = []metav1.OwnerReference{*metav1.GetControllerOf(live)}
	testkit.Must(t, env.Client.Update(ctx, live))

	f.counter.Reset()
	op, err := ch.EnsureChild(ctx, owner, desired())
	if err != nil || op != reconcile.ChildUpdated {
		t.Errorf("EnsureChild after the holder's reference was removed = %s, %v; want %s", op, err, reconcile.ChildUpdated)
	}
	f.wantWrites(1)
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	var uids []string
	for _, r := range live.OwnerReferences {
		uids = append(uids, string(r.UID))
	}
	if diff := cmp.Diff([]string{string(owner.UID), string(holder.UID)}, uids, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("owner UIDs (-want +got):\n%s", diff)
	}
}

// TestEnsureChildAdoptsOnlyWhenAsked: an existing object with the child's
// name and no controller may be someone else's (or hold an old owner's
// data): EnsureChild refuses it, without a write, unless the call says
// WithOrphanAdoption.
func TestEnsureChildAdoptsOnlyWhenAsked(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	other := f.createWidget("other", testv1.WidgetSpec{})
	ctx := t.Context()

	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: f.ns}, Data: map[string]string{"k": "v"}}
	testkit.Must(t, env.Client.Create(ctx, orphan))
	f.counter.Reset()
	_, err := ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: f.ns}, Data: map[string]string{"k": "x"}})
	var nce *ownership.NotControlledError
	if !errors.As(err, &nce) || nce.Object.GetName() != "orphan" {
		t.Fatalf("EnsureChild on an orphan: err = %v, want *ownership.NotControlledError naming it", err)
	}
	f.wantWrites(0)

	// Asked to, it adopts the orphan.
	op, err := ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: f.ns}, Data: map[string]string{"k": "v"}}, reconcile.WithOrphanAdoption())
	if err != nil || op != reconcile.ChildUpdated {
		t.Fatalf("adopting an orphan: %s, %v", op, err)
	}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), orphan))
	if !ownership.IsControlledBy(orphan, owner) {
		t.Errorf("orphan not adopted: ownerReferences %v", orphan.OwnerReferences)
	}

	// A child controlled by another owner is refused, without a write.
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: f.ns}}
	testkit.Must(t, ownership.SetControllerReference(other, theirs, env.Scheme))
	testkit.Must(t, env.Client.Create(ctx, theirs))
	f.counter.Reset()
	_, err = ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: f.ns}, Data: map[string]string{"x": "y"}})
	var ace *ownership.AlreadyControlledError
	if !errors.As(err, &ace) {
		t.Fatalf("EnsureChild on another's child: err = %v, want *ownership.AlreadyControlledError", err)
	}
	f.wantWrites(0)
	_, err = ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: f.ns}}, reconcile.WithOrphanAdoption())
	if !errors.As(err, &ace) {
		t.Fatalf("WithOrphanAdoption took another's child: err = %v", err)
	}

	// Bad input names the problem.
	if _, err := ch.EnsureChild(ctx, owner, &corev1.ConfigMap{}); err == nil {
		t.Error("EnsureChild without a name succeeded")
	}
}

func TestDeleteChild(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	other := f.createWidget("other", testv1.WidgetSpec{})
	ctx := t.Context()

	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: f.ns}}
	if _, err := ch.EnsureChild(ctx, owner, mine); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: f.ns}}
	if _, err := ch.EnsureChild(ctx, other, theirs); err != nil {
		t.Fatal(err)
	}
	unowned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unowned", Namespace: f.ns}}
	testkit.Must(t, env.Client.Create(ctx, unowned))

	tests := []struct {
		name       string
		obj        string
		wantOp     reconcile.ChildWrite
		wantErr    bool
		wantWrites int
	}{
		{"controlled child is deleted", "mine", reconcile.ChildDeleted, false, 1},
		{"absent child costs no request", "mine", reconcile.ChildUnchanged, false, 0},
		{"another's child is refused", "theirs", reconcile.ChildUnchanged, true, 0},
		{"an uncontrolled object is refused", "unowned", reconcile.ChildUnchanged, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.counter.Reset()
			op, err := ch.DeleteChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: tt.obj, Namespace: f.ns}})
			if (err != nil) != tt.wantErr || op != tt.wantOp {
				t.Errorf("DeleteChild(%s) = %s, %v; want %s, error %v", tt.obj, op, err, tt.wantOp, tt.wantErr)
			}
			// A refusal is a conflict callers can branch on, as
			// EnsureChild's are.
			if tt.wantErr && !ownership.IsConflict(err) {
				t.Errorf("DeleteChild(%s) error %v is not an ownership conflict (*ownership.AlreadyControlledError or *ownership.NotControlledError)", tt.obj, err)
			}
			f.wantWrites(tt.wantWrites)
		})
	}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "mine"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("deleted child still readable: %v", err)
	}
}

// TestDeleteChildDeletesTheObjectSeen: a UID on the object names the one
// the caller decided on. Before, DeleteChild read the object by name and
// deleted what it found: a pass that observed a failed pod, then read a
// cache that had caught up with its replacement, deleted the replacement.
func TestDeleteChildDeletesTheObjectSeen(t *testing.T) {
	f := newFixture(t)
	ch := f.children()
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	key := client.ObjectKey{Namespace: f.ns, Name: "replaced"}
	seen := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if _, err := ch.EnsureChild(ctx, owner, seen); err != nil {
		t.Fatal(err)
	}
	testkit.Must(t, env.Client.Delete(ctx, seen))
	replacement := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if _, err := ch.EnsureChild(ctx, owner, replacement); err != nil {
		t.Fatal(err)
	}

	f.counter.Reset()
	op, err := ch.DeleteChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, UID: seen.UID}})
	if !errors.Is(err, reconcile.ErrChildReplaced) || op != reconcile.ChildUnchanged {
		t.Errorf("DeleteChild(UID of the object seen, since replaced) = %s, %v; want %s, ErrChildReplaced", op, err, reconcile.ChildUnchanged)
	}
	f.wantWrites(0)
	var got corev1.ConfigMap
	testkit.Must(t, env.Client.Get(ctx, key, &got))
	if got.UID != replacement.UID || !got.DeletionTimestamp.IsZero() {
		t.Errorf("the replacement (UID %s) was deleted: read UID %s, deletionTimestamp %v", replacement.UID, got.UID, got.DeletionTimestamp)
	}

	op, err = ch.DeleteChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, UID: replacement.UID}})
	if err != nil || op != reconcile.ChildDeleted {
		t.Errorf("DeleteChild(UID of the replacement) = %s, %v; want %s", op, err, reconcile.ChildDeleted)
	}
}

// blindReader is a cache that cannot see anything, as a label-filtered
// cache cannot see an object without the label.
type blindReader struct{ client.Client }

func (blindReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: fmt.Sprintf("%T", obj)}, key.Name)
}

// blindPass returns the context of a pass of a Reconciler that watches
// kind if watched, the func its watch calls on each event, and Children
// over a blindReader that read uncached through the fixture's client.
func (f *fixture) blindPass(watched bool, kind schema.GroupVersionKind) (context.Context, func(schema.GroupVersionKind, types.NamespacedName), *reconcile.Children) {
	f.t.Helper()
	var kinds []schema.GroupVersionKind
	if watched {
		kinds = append(kinds, kind)
	}
	ctx, observe := reconcile.WatchedPass(f.t.Context(), "opkit-widget", kinds...)
	ch, err := reconcile.NewChildren(blindReader{f.c}, env.Scheme, reconcile.WithUncachedReader(f.c))
	testkit.Must(f.t, err)
	return ctx, observe, ch
}

// TestEnsureChildConfirmsAbsenceUncached: when the cache does not see the
// child (a label-filtered cache and an object without the label), the
// child is created with a POST, which fails on an existing object, and the
// uncached reader is asked what it is: an object that exists there is
// refused, not taken over by a forced apply.
func TestEnsureChildConfirmsAbsenceUncached(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	ch, err := reconcile.NewChildren(blindReader{f.c}, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(env.Client))
	if err != nil {
		t.Fatal(err)
	}

	someones := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someones", Namespace: f.ns}, Data: map[string]string{"theirs": "data"}}
	testkit.Must(t, env.Client.Create(ctx, someones))
	f.counter.Reset()
	_, err = ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "someones", Namespace: f.ns}, Data: map[string]string{"ours": "x"}})
	var nce *ownership.NotControlledError
	if !errors.As(err, &nce) {
		t.Fatalf("EnsureChild over an object the cache cannot see: err = %v, want *ownership.NotControlledError", err)
	}
	// The create is a POST, which the API server refuses for an existing
	// object: nothing is written.
	if got := f.counter.Counts(); got[http.MethodPost] != 1 || f.counter.Writes() != 1 {
		t.Errorf("write requests: %s; want one POST", f.counter)
	}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(someones), someones))
	if diff := cmp.Diff(map[string]string{"theirs": "data"}, someones.Data); diff != "" || len(someones.OwnerReferences) != 0 {
		t.Errorf("the object was changed: data (-want +got):\n%s owners %v", diff, someones.OwnerReferences)
	}

	// A child that really does not exist is created.
	if op, err := ch.EnsureChild(ctx, owner, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: f.ns}}); err != nil || op != reconcile.ChildCreated {
		t.Errorf("creating a new child: %s, %v", op, err)
	}
}

// strippingReader reads like an operator's cache that drops managedFields
// (cache.TransformStripManagedFields).
type strippingReader struct{ client.Client }

func (r strippingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := r.Client.Get(ctx, key, obj, opts...)
	obj.SetManagedFields(nil)
	return err
}

// TestEnsureChildCreatesWithOnePost: with an uncached reader, a child the
// cache does not hold is created with one POST (protobuf for built-in
// kinds), not an uncached GET and a server-side apply, which costs the API
// server about twice the CPU. Its fields belong to the field owner's apply
// before the first update (TestEnsureChildRemovesWhatIsNoLongerSet).
func TestEnsureChildCreatesWithOnePost(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ch, err := reconcile.NewChildren(blindReader{f.c}, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(f.c))
	testkit.Must(t, err)

	// The client's first request of a kind discovers its API group.
	err = f.c.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "none"}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("reading a Deployment that does not exist: %v", err)
	}
	f.counter.Reset()
	d := desiredDeployment(f.ns, "web:1")
	op, err := ch.EnsureChild(t.Context(), owner, d)
	if err != nil || op != reconcile.ChildCreated {
		t.Fatalf("EnsureChild = %s, %v; want %s", op, err, reconcile.ChildCreated)
	}
	if diff := cmp.Diff(map[string]int{"POST": 1}, f.counter.Counts()); diff != "" {
		t.Errorf("requests to create a child (-want +got):\n%s", diff)
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), live))
	if d.UID == "" || d.UID != live.UID || d.ResourceVersion != live.ResourceVersion {
		t.Errorf("desired after the create: uid %q rv %q, want the live object's %q %q", d.UID, d.ResourceVersion, live.UID, live.ResourceVersion)
	}
	if !metav1.IsControlledBy(live, owner) || live.Labels[reconcile.LabelAppliedDigest] == "" {
		t.Errorf("created child: owners %v, labels %v; want controlled by the owner, with the digest label", live.OwnerReferences, live.Labels)
	}
}

// TestEnsureChildAfterItsCreateOnAStaleCache: a pass that runs before the
// cache has seen the child an earlier pass created must not POST it again
// (a 409 AlreadyExists, counted as a conflict): it reads the child instead.
// A child deleted since is created again.
func TestEnsureChildAfterItsCreateOnAStaleCache(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	ch, err := reconcile.NewChildren(blindReader{f.c}, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"), reconcile.WithUncachedReader(f.c))
	testkit.Must(t, err)
	if op, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:1")); err != nil || op != reconcile.ChildCreated {
		t.Fatalf("EnsureChild = %s, %v; want %s", op, err, reconcile.ChildCreated)
	}

	f.counter.Reset()
	d := desiredDeployment(f.ns, "web:1")
	if op, err := ch.EnsureChild(ctx, owner, d); err != nil || op != reconcile.ChildUnchanged {
		t.Errorf("EnsureChild again before the cache saw the create = %s, %v; want %s", op, err, reconcile.ChildUnchanged)
	}
	if got := f.counter.Writes(); got != 0 {
		t.Errorf("write requests = %d, want 0 (%s)", got, f.counter)
	}
	if d.UID == "" {
		t.Error("desired does not hold the live child")
	}

	testkit.Must(t, env.Client.Delete(ctx, d))
	f.counter.Reset()
	if op, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:1")); err != nil || op != reconcile.ChildCreated {
		t.Errorf("EnsureChild after the child was deleted = %s, %v; want %s", op, err, reconcile.ChildCreated)
	}
	if got := f.counter.Counts()[http.MethodPost]; got != 1 || f.counter.Writes() != 1 {
		t.Errorf("write requests: %s; want one POST", f.counter)
	}
}

// TestEnsureChildTrustsItsCreateUntilItsEvent: in a pass of a Reconciler
// that watches the child's kind, a child created by an earlier pass and not
// yet seen by the watch is the POST's response: no uncached GET. Once an
// event of it arrives (here its deletion), a cache miss is read again.
func TestEnsureChildTrustsItsCreateUntilItsEvent(t *testing.T) {
	deployments := appsv1.SchemeGroupVersion.WithKind("Deployment")
	deleted := func(t *testing.T, d *appsv1.Deployment, observe func(schema.GroupVersionKind, types.NamespacedName)) {
		testkit.Must(t, env.Client.Delete(t.Context(), d))
		observe(deployments, client.ObjectKeyFromObject(d))
	}
	for _, tc := range []struct {
		name    string
		watched bool
		between func(*testing.T, *appsv1.Deployment, func(schema.GroupVersionKind, types.NamespacedName))
		image   string
		wantOp  reconcile.ChildWrite
		want    map[string]int
	}{
		{name: "no event yet", watched: true, image: "web:1", wantOp: reconcile.ChildUnchanged, want: map[string]int{}},
		{name: "kind not watched", image: "web:1", wantOp: reconcile.ChildUnchanged, want: map[string]int{http.MethodGet: 1}},
		{name: "deleted, its event arrived", watched: true, between: deleted, image: "web:1", wantOp: reconcile.ChildCreated, want: map[string]int{http.MethodGet: 1, http.MethodPost: 1}},
		{name: "desired changed", watched: true, image: "web:2", wantOp: reconcile.ChildUpdated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			owner := f.createWidget("owner", testv1.WidgetSpec{})
			ctx, observe, ch := f.blindPass(tc.watched, deployments)
			d := desiredDeployment(f.ns, "web:1")
			if op, err := ch.EnsureChild(ctx, owner, d); err != nil || op != reconcile.ChildCreated {
				t.Fatalf("EnsureChild = %s, %v; want %s", op, err, reconcile.ChildCreated)
			}
			if tc.between != nil {
				tc.between(t, d, observe)
			}

			f.counter.Reset()
			again := desiredDeployment(f.ns, tc.image)
			op, err := ch.EnsureChild(ctx, owner, again)
			if err != nil || op != tc.wantOp {
				t.Fatalf("EnsureChild again = %s, %v; want %s", op, err, tc.wantOp)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, f.counter.Counts(), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("requests (-want +got):\n%s", diff)
				}
			} else if got := f.counter.Counts()[http.MethodGet]; got != 1 {
				t.Errorf("GETs = %d, want 1: an apply starts from the live child (%s)", got, f.counter)
			}
			live := &appsv1.Deployment{}
			testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(again), live))
			if again.UID != live.UID || live.Spec.Template.Spec.Containers[0].Image != tc.image {
				t.Errorf("desired after EnsureChild: uid %q, live uid %q image %s; want the live child with %s",
					again.UID, live.UID, live.Spec.Template.Spec.Containers[0].Image, tc.image)
			}
		})
	}
}

// TestEnsureChildOnAStaleCache: a cache that still serves a child's
// version from before the last apply (its watch event has not arrived)
// must not make EnsureChild apply the same content again. Seen in CI as a
// Service PATCHed twice until Ready. A change of the desired child is
// applied at once, stale cache or not.
func TestEnsureChildOnAStaleCache(t *testing.T) {
	f := newFixture(t)
	owner := f.createWidget("owner", testv1.WidgetSpec{})
	ctx := t.Context()
	var stale *appsv1.Deployment
	cfg, counter := env.CountingConfig()
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if d, ok := obj.(*appsv1.Deployment); ok && stale != nil {
				stale.DeepCopyInto(d)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	testkit.Must(t, err)
	if _, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:1")); err != nil {
		t.Fatal(err)
	}
	old := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, old))
	if _, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:2")); err != nil {
		t.Fatal(err)
	}
	stale = old // the cache has not seen the update to web:2 yet

	counter.Reset()
	for range 3 {
		op, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:2"))
		if err != nil || op != reconcile.ChildUnchanged {
			t.Errorf("EnsureChild(web:2) on the stale cache = %s, %v; want %s", op, err, reconcile.ChildUnchanged)
		}
	}
	if got := counter.Writes(); got != 0 {
		t.Errorf("write requests on the stale cache = %d, want 0 (%s)", got, counter)
	}

	counter.Reset()
	if op, err := ch.EnsureChild(ctx, owner, desiredDeployment(f.ns, "web:3")); err != nil || op != reconcile.ChildUpdated {
		t.Errorf("EnsureChild(web:3) on the stale cache = %s, %v; want %s", op, err, reconcile.ChildUpdated)
	}
	if got := counter.Writes(); got != 1 {
		t.Errorf("write requests for web:3 = %d, want 1 (%s)", got, counter)
	}
	live := &appsv1.Deployment{}
	testkit.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, live))
	if img := live.Spec.Template.Spec.Containers[0].Image; img != "web:3" {
		t.Errorf("image %s, want web:3", img)
	}
}
