package statusutil_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/statusutil"
)

// newWidget creates a Widget in a fresh namespace and returns it as stored.
func newWidget(t *testing.T) *testv1.Widget {
	t.Helper()
	if env == nil {
		t.Fatal("envtest is not running: run the tests without -fuzz in a fuzz worker, with `make envtest-assets` done")
	}
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "statusutil-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "w"}, Spec: testv1.WidgetSpec{Replicas: 1}}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	return w
}

func fetch(t *testing.T, key client.ObjectKey) *testv1.Widget {
	t.Helper()
	w := &testv1.Widget{}
	if err := env.Client.Get(t.Context(), key, w); err != nil {
		t.Fatalf("getting widget %s: %v", key, err)
	}
	return w
}

// TestRoundTrip proves that what Set stores in memory is exactly what the API
// server gives back, so a controller comparing the two sees no difference and
// does not write again.
func TestRoundTrip(t *testing.T) {
	w := newWidget(t)
	statusutil.MarkReconciling(w, "Progressing", "creating children")
	statusutil.MarkTrue(w, "Available", "Up", "héllo wörld")
	// Dynamic data: an invalid reason and a message over the bound, made of
	// multi-byte characters. The API server must accept both as stored.
	statusutil.MarkFalse(w, "Synced", "sync failed: 503", strings.Repeat("ü", 5000))
	statusutil.SetSummary(w, statusutil.WithConditions("Available", "Synced"))
	statusutil.SetObservedGeneration(w)
	// Update overwrites w with the server's answer: keep what we sent.
	written := w.DeepCopy()
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatalf("status update: %v", err)
	}

	got := fetch(t, client.ObjectKeyFromObject(w))
	if diff := cmp.Diff(written.Status, got.Status); diff != "" {
		t.Errorf("status after round trip (-written +read):\n%s", diff)
	}
	if !reflect.DeepEqual(written.Status.Conditions, got.Status.Conditions) {
		t.Errorf("conditions are not deeply equal after round trip:\nwritten %#v\nread    %#v", written.Status.Conditions, got.Status.Conditions)
	}
	if !statusutil.IsObservedGenerationCurrent(got) {
		t.Errorf("observedGeneration %d, generation %d: want current", got.Status.ObservedGeneration, got.Generation)
	}

	// Re-applying the same conditions on the fresh object changes nothing.
	changed := statusutil.MarkReconciling(got, "Progressing", "creating children")
	changed = statusutil.MarkTrue(got, "Available", "Up", "héllo wörld") || changed
	changed = statusutil.MarkFalse(got, "Synced", "sync failed: 503", strings.Repeat("ü", 5000)) || changed
	changed = statusutil.SetSummary(got, statusutil.WithConditions("Available", "Synced")) || changed
	changed = statusutil.SetObservedGeneration(got) || changed
	if changed {
		t.Error("re-applying the same status to the read-back object reported a change")
	}
	if err := statusutil.ValidateConditions(got); err != nil {
		t.Errorf("ValidateConditions() = %v", err)
	}
}

// TestRoundTripUntruncatedTimeDiffers shows what the truncation avoids: a
// sub-second transition time written by hand does not survive a round trip.
func TestRoundTripUntruncatedTimeDiffers(t *testing.T) {
	w := newWidget(t)
	ltt := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 500_000_000, time.UTC))
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: "Up", LastTransitionTime: ltt})
	written := w.DeepCopy()
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatalf("status update: %v", err)
	}
	got := fetch(t, client.ObjectKeyFromObject(w))
	if cmp.Diff(written.Status.Conditions, got.Status.Conditions) == "" {
		t.Error("an untruncated time round-tripped without a diff; the truncation in Set would be pointless")
	}
}

// TestStaleUpdateConflicts shows that a status update from a stale copy
// fails instead of dropping another writer's condition, and how the caller
// re-applies its conditions on a fresh read.
func TestStaleUpdateConflicts(t *testing.T) {
	w := newWidget(t)
	key := client.ObjectKeyFromObject(w)
	ours, theirs := fetch(t, key), fetch(t, key)

	statusutil.MarkTrue(theirs, "External", "Probed", "set by another controller")
	if err := env.Client.Status().Update(t.Context(), theirs); err != nil {
		t.Fatalf("other writer's status update: %v", err)
	}

	statusutil.MarkTrue(ours, "Available", "Up", "")
	err := env.Client.Status().Update(t.Context(), ours)
	if !apierrors.IsConflict(err) {
		t.Fatalf("status update from a stale copy: err = %v, want a Conflict", err)
	}

	// The fix: re-read, re-apply our conditions, write again.
	attempts := 0
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		attempts++
		fresh := &testv1.Widget{}
		if err := env.Client.Get(t.Context(), key, fresh); err != nil {
			return err
		}
		if !statusutil.MarkTrue(fresh, "Available", "Up", "") {
			return nil
		}
		return env.Client.Status().Update(t.Context(), fresh)
	})
	if err != nil {
		t.Fatalf("retried status update: %v", err)
	}
	if attempts != 1 {
		t.Errorf("attempts = %d, want 1", attempts)
	}
	got := fetch(t, key)
	for _, typ := range []string{"External", "Available"} {
		if !statusutil.IsTrue(got, typ) {
			t.Errorf("condition %s is not True after the retry: %v", typ, got.Status.Conditions)
		}
	}
}

// TestOtherWritersConditionSurvives: another controller, not using
// statusutil, appends its condition (unsorted, sub-second time). When we
// re-read and set ours, its condition is kept exactly.
func TestOtherWritersConditionSurvives(t *testing.T) {
	w := newWidget(t)
	key := client.ObjectKeyFromObject(w)
	statusutil.MarkTrue(w, "Zeta", "Ours", "")
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatalf("status update: %v", err)
	}

	other := fetch(t, key)
	meta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: "Alpha", Status: metav1.ConditionFalse, Reason: "Theirs", Message: "from another controller"})
	if err := env.Client.Status().Update(t.Context(), other); err != nil {
		t.Fatalf("other writer's status update: %v", err)
	}
	theirs := statusutil.Get(fetch(t, key), "Alpha")

	fresh := fetch(t, key)
	if statusutil.MarkTrue(fresh, "Zeta", "Ours", "") {
		t.Error("re-setting our unchanged condition reported a change")
	}
	if !statusutil.MarkFalse(fresh, "Zeta", "OursChanged", "") {
		t.Fatal("changing our condition reported no change")
	}
	if err := env.Client.Status().Update(t.Context(), fresh); err != nil {
		t.Fatalf("status update: %v", err)
	}
	got := fetch(t, key)
	if diff := cmp.Diff(theirs, statusutil.Get(got, "Alpha")); diff != "" {
		t.Errorf("other writer's condition (-before +after):\n%s", diff)
	}
	if !statusutil.IsFalse(got, "Zeta") {
		t.Errorf("our condition: %v, want Zeta=False", statusutil.Get(got, "Zeta"))
	}
	if got.Status.Conditions[0].Type != "Alpha" {
		t.Errorf("conditions not sorted after our write: %v", got.Status.Conditions)
	}
}

// TestSpecChangeMakesConditionsStale shows observedGeneration tracking across
// a spec update.
func TestSpecChangeMakesConditionsStale(t *testing.T) {
	w := newWidget(t)
	key := client.ObjectKeyFromObject(w)
	statusutil.MarkTrue(w, statusutil.ConditionReady, "Up", "")
	statusutil.SetObservedGeneration(w)
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatalf("status update: %v", err)
	}
	got := fetch(t, key)
	got.Spec.Replicas = 2
	if err := env.Client.Update(t.Context(), got); err != nil {
		t.Fatalf("spec update: %v", err)
	}
	got = fetch(t, key)
	if statusutil.IsObservedGenerationCurrent(got) || statusutil.IsCurrent(got, statusutil.ConditionReady) {
		t.Errorf("after a spec change (generation %d): observedGeneration current = %v, Ready current = %v; want both false",
			got.Generation, statusutil.IsObservedGenerationCurrent(got), statusutil.IsCurrent(got, statusutil.ConditionReady))
	}
	statusutil.MarkTrue(got, statusutil.ConditionReady, "Up", "")
	statusutil.SetObservedGeneration(got)
	if !statusutil.IsObservedGenerationCurrent(got) || !statusutil.IsCurrent(got, statusutil.ConditionReady) {
		t.Error("after re-setting: want observedGeneration and Ready current")
	}
}
