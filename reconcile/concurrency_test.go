package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// patientRetry is the backoff of the test's other writers: they contend
// with each other and with the Reconciler, so give them room.
var patientRetry = wait.Backoff{Steps: 100, Duration: 5 * time.Millisecond, Factor: 1.3, Jitter: 0.5, Cap: 200 * time.Millisecond}

// setExternal is another controller's write of its own condition: a
// server-side apply of that one condition under its own field manager, as
// a controller of this era writes, so it never conflicts with the other
// writers (an Update with a resourceVersion, retried on conflict, ran out
// of retries under the contention of TestConcurrentWriters).
func setExternal(ctx context.Context, name, ns string, status metav1.ConditionStatus, msg string) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "External", "status": string(status), "reason": "OtherController", "message": msg,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}},
	}}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	u.SetNamespace(ns)
	u.SetName(name)
	return env.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("other-controller"), client.ForceOwnership)
}

// TestStaleReadKeepsForeignCondition proves that a pass working from a stale
// copy (as from a lagging cache) neither conflicts nor removes a condition
// another controller wrote in the meantime.
func TestStaleReadKeepsForeignCondition(t *testing.T) {
	f := newFixture(t)
	r := newReconciler(t, f, &widgetHooks{children: f.children()})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")
	stale := f.get("w")

	// Meanwhile: another controller's condition, a label, a spec change.
	testkit.Must(t, setExternal(t.Context(), "w", f.ns, metav1.ConditionTrue, "from elsewhere"))
	w := f.get("w")
	w.Labels = map[string]string{"team": "a"}
	w.Spec.Replicas = 3
	testkit.Must(t, env.Client.Update(t.Context(), w))

	// A reconciler whose reads return the stale copy.
	staleClient := interceptor.NewClient(withWatch(t, f), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if sw, ok := obj.(*testv1.Widget); ok {
				stale.DeepCopyInto(sw)
				sw.Spec.Replicas = 2 // the stale copy's own (older) intent
				sw.Generation = 2
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	sr, err := reconcile.New[*testv1.Widget](staleClient, env.Scheme, &widgetHooks{children: f.children()})
	testkit.Must(t, err)
	f.mustPass(sr, "w")

	got := f.get("w")
	ext := statusutil.Get(got, "External")
	if ext == nil || ext.Status != metav1.ConditionTrue || ext.Message != "from elsewhere" {
		t.Errorf("External condition after a stale pass = %+v, want the other controller's True", ext)
	}
	if got.Labels["team"] != "a" || got.Spec.Replicas != 3 {
		t.Errorf("labels/spec changed by a status write: labels %v, replicas %d", got.Labels, got.Spec.Replicas)
	}
	if !statusutil.IsTrue(got, "Available") {
		t.Errorf("our Available condition missing: %+v", conditionsOf(got))
	}
}

func withWatch(t *testing.T, f *fixture) client.WithWatch {
	t.Helper()
	cfg, _ := env.CountingConfig()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	testkit.Must(t, err)
	_ = f
	return c
}

// TestConcurrentWriters runs passes while another controller flips its own
// condition and a user edits labels and spec, all at once. No pass may fail,
// and at the end both controllers' conditions and the latest spec are
// reflected.
func TestConcurrentWriters(t *testing.T) {
	f := newFixture(t)
	r := newReconciler(t, f, &widgetHooks{children: f.children()})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")

	const rounds = 30
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	wg.Add(2)
	go func() { // another controller
		defer wg.Done()
		for i := range rounds {
			status := metav1.ConditionTrue
			if i%2 == 1 {
				status = metav1.ConditionFalse
			}
			if err := setExternal(t.Context(), "w", f.ns, status, fmt.Sprintf("round %d", i)); err != nil {
				errs <- fmt.Errorf("other controller: %w", err)
			}
		}
	}()
	go func() { // a user
		defer wg.Done()
		for i := range rounds {
			err := retry.RetryOnConflict(patientRetry, func() error {
				w := &testv1.Widget{}
				if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "w"}, w); err != nil {
					return err
				}
				w.Labels = map[string]string{"round": fmt.Sprint(i)}
				w.Spec.Replicas = int32(i%5 + 1)
				return env.Client.Update(t.Context(), w)
			})
			if err != nil {
				errs <- fmt.Errorf("user: %w", err)
			}
		}
	}()
	failures := 0
	for range rounds {
		if _, err := f.pass(r, "w"); err != nil {
			failures++
			t.Errorf("pass failed during concurrent writes: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	f.mustPass(r, "w") // settle on the final spec
	got := f.get("w")
	ext := statusutil.Get(got, "External")
	if ext == nil || ext.Message != fmt.Sprintf("round %d", rounds-1) {
		t.Errorf("External = %+v, want the other controller's last write (round %d)", ext, rounds-1)
	}
	if got.Status.ObservedGeneration != got.Generation || got.Status.Replicas != got.Spec.Replicas {
		t.Errorf("status %+v does not reflect generation %d / replicas %d", got.Status, got.Generation, got.Spec.Replicas)
	}
	if !statusutil.IsTrue(got, statusutil.ConditionReady) {
		t.Errorf("Ready not True at the end: %+v", conditionsOf(got))
	}
}

// TestReadYourWrites: a pass that reads the version from before the previous
// pass's own writes (the cache has not caught up yet) must not repeat them.
// Without read-your-writes it would patch the finalizer again with a stale
// resourceVersion, a 409 conflict, and re-apply the status.
func TestReadYourWrites(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	cfg, counter := env.CountingConfig()
	c, serveStale := staleWidgetClient(t, cfg, created)
	ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	testkit.Must(t, err)
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, &finalizingHooks{widgetHooks: widgetHooks{children: ch}})
	testkit.Must(t, err)
	req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}

	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := counter.Writes(); got != 3 {
		t.Fatalf("first pass: %d writes, want 3 (%s)", got, counter)
	}

	*serveStale = true // the cache still serves the version before those writes
	counter.Reset()
	for range 2 {
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatalf("pass on a stale read: %v", err)
		}
	}
	if got := counter.Writes(); got != 0 {
		t.Errorf("passes on a stale read sent %d writes, want 0 (%s)", got, counter)
	}

	// Once the cache serves a newer version, the real object is used again:
	// a spec change made meanwhile is acted on.
	*serveStale = false
	w := f.get("w")
	w.Spec.Replicas = 5
	testkit.Must(t, env.Client.Update(t.Context(), w))
	counter.Reset()
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := f.get("w").Status.Replicas; got != 5 {
		t.Errorf("status.replicas = %d after the cache caught up, want 5", got)
	}
	if got := counter.Writes(); got != 2 {
		t.Errorf("spec change after catching up: %d writes, want 2 (%s)", got, counter)
	}
}

// TestStaleReadKeepsOwnConditions: a pass that reads the version from
// before the previous pass's status write (the cache has not caught up)
// and changes one condition must not lose the others this controller
// wrote. The status apply sends the conditions its field manager owns; it
// read them from the stale copy's managedFields, which predate the write
// that took them: only the changed condition was sent, and server-side
// apply deleted the rest.
func TestStaleReadKeepsOwnConditions(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	c, serveStale := staleWidgetClient(t, env.Config, created)
	ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	testkit.Must(t, err)
	pass := 0
	hooks := &widgetHooks{children: ch, onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		pass++
		if pass == 1 {
			statusutil.MarkTrue(w, "Extra", "Set", "set by the first pass")
			return reconcile.Result{}, false
		}
		w.Status.Replicas = w.Spec.Replicas
		statusutil.MarkTrue(w, "Available", "Changed", "changed by a pass on a stale read")
		return reconcile.Done(), true
	}}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
	testkit.Must(t, err)
	req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	want := conditionTypes(f.get("w"))
	if !want["Extra"] {
		t.Fatalf("first pass wrote no Extra condition: %+v", want)
	}

	*serveStale = true
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatalf("pass on a stale read: %v", err)
	}
	after := f.get("w")
	got := conditionTypes(after)
	for typ := range want {
		if !got[typ] {
			t.Errorf("condition %s disappeared after a pass on a stale read; conditions now %+v", typ, conditionsOf(after))
		}
	}
	if a := statusutil.Get(after, "Available"); a == nil || a.Reason != "Changed" {
		t.Errorf("Available = %+v, want reason Changed", a)
	}
}

// conditionTypes returns the set of w's condition types.
func conditionTypes(w *testv1.Widget) map[string]bool {
	out := map[string]bool{}
	for _, c := range w.Status.Conditions {
		out[c.Type] = true
	}
	return out
}

// setReplicasElsewhere is another writer's server-side apply of
// status.replicas alone.
func setReplicasElsewhere(t *testing.T, name, ns string, n int64) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"replicas": n}}}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	u.SetNamespace(ns)
	u.SetName(name)
	testkit.Must(t, env.Client.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("replica-writer"), client.ForceOwnership))
}

// TestStaleReadKeepsForeignStatusFields: a pass working from a stale copy
// does not send a status field another writer owns, so it neither takes
// the field over nor reverts it; only the fields this controller changed
// or owns are sent, as for conditions.
func TestStaleReadKeepsForeignStatusFields(t *testing.T) {
	f := newFixture(t)
	msg := "first"
	hooks := &widgetHooks{onReconc: func(_ context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		statusutil.MarkTrue(w, "Available", "Checked", msg)
		return reconcile.Done(), true
	}}
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	r := newReconciler(t, f, hooks)
	f.mustPass(r, "w")
	setReplicasElsewhere(t, "w", f.ns, 5)
	stale := f.get("w")
	setReplicasElsewhere(t, "w", f.ns, 7)

	staleClient := interceptor.NewClient(withWatch(t, f), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if sw, ok := obj.(*testv1.Widget); ok {
				stale.DeepCopyInto(sw)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	sr, err := reconcile.New[*testv1.Widget](staleClient, env.Scheme, hooks)
	testkit.Must(t, err)
	msg = "second"
	f.mustPass(sr, "w")

	got := f.get("w")
	if got.Status.Replicas != 7 {
		t.Errorf("status.replicas = %d after a stale pass, want the other writer's 7", got.Status.Replicas)
	}
	if c := statusutil.Get(got, "Available"); c == nil || c.Message != "second" {
		t.Errorf("Available = %+v, want this pass's message", c)
	}
	for _, e := range got.ManagedFields {
		if e.Manager == r.FieldOwner() && strings.Contains(string(e.FieldsV1.GetRawBytes()), `"f:replicas"`) {
			t.Errorf("%s took over status.replicas: %s", e.Manager, e.FieldsV1.GetRawBytes())
		}
	}
}

// TestFinalizerConflictLeavesForeignCondition: another controller writes
// its condition between a pass's read and its finalizer patch, which
// conflicts and is retried on a fresh read carrying that condition; then
// it writes the condition again while the pass runs. The pass must not
// count the condition as its own change: the other controller's newer
// value stays, and the pass's field manager never owns it. Before, the
// pass compared its status to the copy read before the re-read and
// applied the condition with force, reverting the other controller.
func TestFinalizerConflictLeavesForeignCondition(t *testing.T) {
	f := newFixture(t)
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	var once sync.Once
	c := interceptor.NewClient(withWatch(t, f), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*testv1.Widget); ok {
				once.Do(func() { testkit.Must(t, setExternal(ctx, "w", f.ns, metav1.ConditionTrue, "first")) })
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	hooks := &finalizingHooks{widgetHooks: widgetHooks{children: f.children(), onReconc: func(ctx context.Context, _ *testv1.Widget) (reconcile.Result, bool) {
		testkit.Must(t, setExternal(ctx, "w", f.ns, metav1.ConditionFalse, "second"))
		return reconcile.Result{}, false
	}}}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
	testkit.Must(t, err)
	f.mustPass(r, "w")

	got := f.get("w")
	if ext := statusutil.Get(got, "External"); ext == nil || ext.Status != metav1.ConditionFalse || ext.Message != "second" {
		t.Errorf("External after the pass = %+v, want the other controller's False \"second\"", ext)
	}
	for _, m := range got.ManagedFields {
		if m.Manager == r.FieldOwner() && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `\"type\":\"External\"`) {
			t.Errorf("our field manager %s owns the External condition: %s", m.Manager, m.FieldsV1.GetRawString())
		}
	}
}

// TestStaleReadAfterAForeignWriteKeepsOwnStatus: another writer labels the
// object while a pass runs, between the pass's read and its status write.
// The cache then serves that labelled version, which predates the pass's
// write although the pass never read it: the next pass must still see the
// status the first one wrote (an operation's success, a once-set field).
// Before, any version the record did not list dropped it, and the next
// pass ran on the status from before the first pass's write.
func TestStaleReadAfterAForeignWriteKeepsOwnStatus(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	var labelled *testv1.Widget
	c, serveStale := staleWidgetClient(t, env.Config, created)
	pass := 0
	var sawDone bool
	hooks := &widgetHooks{children: f.children(), onReconc: func(ctx context.Context, w *testv1.Widget) (reconcile.Result, bool) {
		pass++
		if pass == 1 {
			cur := f.get("w")
			cur.Labels = map[string]string{"sharded": "yes"}
			testkit.Must(t, env.Client.Update(ctx, cur))
			labelled = cur.DeepCopy()
			statusutil.MarkTrue(w, "Migrated", "Done", "the one-time migration ran")
			return reconcile.Result{}, false
		}
		sawDone = statusutil.IsTrue(w, "Migrated")
		return reconcile.Result{}, false
	}}
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
	testkit.Must(t, err)
	req := crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	// The cache has the foreign write, not yet the pass's own.
	labelled.DeepCopyInto(created)
	*serveStale = true
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if !sawDone {
		t.Error("the pass after a foreign write saw the status from before the previous pass's write: Migrated not True")
	}
	if m := statusutil.Get(f.get("w"), "Migrated"); m == nil || m.Status != metav1.ConditionTrue {
		t.Errorf("Migrated on the server = %+v, want True", m)
	}
}

// TestFinalizerFoundOnReReadLeavesForeignCondition: a pass whose read
// lags both its own finalizer and another controller's condition finds,
// on the finalizer patch's conflict, a re-read that has both: that read is
// where the pass starts, so the other's condition is not a change of its
// own to apply. Before, only a re-read that added the finalizer replaced
// the pass's starting point; here the pass applied the condition with
// force, taking it over. Found by the library campaign (seed 1, schedule
// 5).
func TestFinalizerFoundOnReReadLeavesForeignCondition(t *testing.T) {
	f := newFixture(t)
	created := f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	hooks := &finalizingHooks{widgetHooks: widgetHooks{children: f.children()}}
	first := newReconciler(t, f, hooks)
	f.mustPass(first, "w") // the finalizer, and our conditions
	testkit.Must(t, setExternal(t.Context(), "w", f.ns, metav1.ConditionTrue, "live"))

	c, stale := staleWidgetClient(t, env.Config, created)
	*stale = true
	var reads atomic.Int32
	c = interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*testv1.Widget); ok && reads.Add(1) > 1 {
			*stale = false // the re-read after the conflict is current
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	r, err := reconcile.New[*testv1.Widget](c, env.Scheme, hooks)
	testkit.Must(t, err)
	if _, err := f.pass(r, "w"); err != nil {
		t.Fatal(err)
	}
	got := f.get("w")
	if ext := statusutil.Get(got, "External"); ext == nil || ext.Status != metav1.ConditionTrue || ext.Message != "live" {
		t.Errorf("External after the pass = %+v, want the other controller's True \"live\"", ext)
	}
	for _, m := range got.ManagedFields {
		if m.Manager == r.FieldOwner() && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `\"type\":\"External\"`) {
			t.Errorf("our field manager %s owns the External condition: %s", m.Manager, m.FieldsV1.GetRawString())
		}
	}
}
