package reconcile_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

const pausedMessage = "annotation opkit.dev/paused is set: no change is made to this object or its children; remove the annotation to resume"

func (f *fixture) setPaused(name string, paused bool) {
	f.t.Helper()
	w := f.get(name)
	if paused {
		metaSet(w, reconcile.AnnotationPaused, "")
	} else {
		delete(w.Annotations, reconcile.AnnotationPaused)
	}
	testkit.Must(f.t, env.Client.Update(f.t.Context(), w))
}

func metaSet(w *testv1.Widget, k, v string) {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
}

func (f *fixture) childReplicas(name string) string {
	f.t.Helper()
	var cm corev1.ConfigMap
	testkit.Must(f.t, env.Client.Get(f.t.Context(), types.NamespacedName{Namespace: f.ns, Name: name + "-child"}, &cm))
	return cm.Data["replicas"]
}

// TestPause: a paused object's hooks are not called and its children are
// not touched; Paused is recorded with one status write, later passes write
// nothing, and removing the annotation resumes with one pass.
func TestPause(t *testing.T) {
	f := newFixture(t)
	rec := events.NewFakeRecorder(100)
	hooks := &widgetHooks{children: f.children()}
	r := newReconciler(t, f, hooks, reconcile.WithEventRecorder(rec))
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")
	drainEvents(rec)

	f.setPaused("w", true)
	w := f.get("w")
	w.Spec.Replicas = 3
	testkit.Must(t, env.Client.Update(t.Context(), w))
	calls := hooks.reconcils.Load()
	f.mustPass(r, "w")
	f.wantWrites(1)
	w = f.get("w")
	if got := hooks.reconcils.Load(); got != calls {
		t.Errorf("Reconcile called %d times while paused", got-calls)
	}
	if got := f.childReplicas("w"); got != "1" {
		t.Errorf("child replicas = %s while paused, want 1", got)
	}
	wantConditions(t, w, []condition{
		{"Available", "True", "ChildCreated", "", 1},
		{reconcile.ConditionPaused, "True", reconcile.ReasonPaused, pausedMessage, 2},
		{statusutil.ConditionReady, "Unknown", reconcile.ReasonPaused, pausedMessage, 2},
		{statusutil.ConditionReconciling, "True", reconcile.ReasonPaused, pausedMessage, 2},
	})
	if w.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration = %d while paused, want 1 (the spec change is not acted on)", w.Status.ObservedGeneration)
	}
	if diff := cmp.Diff([]string{"Normal Paused"}, drainEvents(rec)); diff != "" {
		t.Errorf("events on pause (-want +got):\n%s", diff)
	}

	f.mustPass(r, "w")
	f.wantWrites(0)
	if got := drainEvents(rec); len(got) != 0 {
		t.Errorf("events of a pass while paused: %v", got)
	}

	f.setPaused("w", false)
	f.mustPass(r, "w")
	f.wantWrites(2) // the child and the status
	w = f.get("w")
	if got := f.childReplicas("w"); got != "3" {
		t.Errorf("child replicas = %s after resume, want 3", got)
	}
	wantConditions(t, w, []condition{
		{"Available", "True", "ChildCreated", "", 2},
		{statusutil.ConditionReady, "True", statusutil.ReasonSucceeded, "", 2},
	})
	if diff := cmp.Diff([]string{"Normal Resumed", "Normal Ready"}, drainEvents(rec)); diff != "" {
		t.Errorf("events on resume (-want +got):\n%s", diff)
	}
	f.mustPass(r, "w")
	f.wantWrites(0)
}

// TestPausedObjectIsStillFinalized: deletion is not paused; an object
// created paused gets no finalizer, since nothing was made for it.
func TestPausedObjectIsStillFinalized(t *testing.T) {
	tests := []struct {
		name          string
		pauseAfter    bool // pause after a first pass; else created paused
		wantFinalized int32
	}{
		{"paused after it was reconciled", true, 1},
		{"created paused", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			hooks := &finalizingHooks{widgetHooks: widgetHooks{children: f.children()}}
			r := newReconciler(t, f, hooks)
			f.createWidget("w", testv1.WidgetSpec{})
			if tt.pauseAfter {
				f.mustPass(r, "w")
				f.setPaused("w", true)
			} else {
				f.setPaused("w", true)
			}
			f.mustPass(r, "w")
			w := f.get("w")
			if got := controllerutil.ContainsFinalizer(w, r.FinalizerName()); got != tt.pauseAfter {
				t.Errorf("finalizer present = %v, want %v", got, tt.pauseAfter)
			}
			testkit.Must(t, env.Client.Delete(t.Context(), w))
			if !f.gone("w") {
				f.mustPass(r, "w")
			}
			if !f.gone("w") {
				t.Error("paused widget not deleted")
			}
			if got := hooks.finalized.Load(); got != tt.wantFinalized {
				t.Errorf("Finalize called %d times, want %d", got, tt.wantFinalized)
			}
		})
	}
}

func TestIsPaused(t *testing.T) {
	tests := []struct {
		annotations map[string]string
		want        bool
	}{
		{nil, false},
		{map[string]string{"other": "true"}, false},
		{map[string]string{reconcile.AnnotationPaused: ""}, true},
		{map[string]string{reconcile.AnnotationPaused: "false"}, true},
	}
	for _, tt := range tests {
		w := &testv1.Widget{}
		w.Annotations = tt.annotations
		if got := reconcile.IsPaused(w); got != tt.want {
			t.Errorf("IsPaused(%v) = %v, want %v", tt.annotations, got, tt.want)
		}
	}
}
