package kstatustest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/kstatustest"
)

// resultHooks returns next from every pass and sets Available as told.
type resultHooks struct {
	next      reconcile.Result
	available metav1.ConditionStatus
}

func (h *resultHooks) Reconcile(_ context.Context, w *testv1.Widget) reconcile.Result {
	if h.available != "" {
		statusutil.Set(w, metav1.Condition{Type: "Available", Status: h.available, Reason: "Checked"})
	}
	return h.next
}

// TestReconcilerOutcomesAsKstatusSeesThem runs a Reconciler's passes with
// each kind of Result and asks kstatus itself what the written status means
// to Flux, kpt and kubectl-style waits: a new object is InProgress until a
// pass reports on its generation, Done is Current, a wait or a retry is
// InProgress, a Terminal result is Failed, a spec change is InProgress
// again until the next pass, and a paused object is InProgress.
func TestReconcilerOutcomesAsKstatusSeesThem(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kstatus-"}}
	testkit.Must(t, env.Client.Create(ctx, ns))
	hooks := &resultHooks{}
	r, err := reconcile.New[*testv1.Widget](env.Client, env.Scheme, hooks, reconcile.WithSummary(statusutil.WithConditions("Available")))
	testkit.Must(t, err)

	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns.Name}}
	testkit.Must(t, env.Client.Create(ctx, w))
	key := client.ObjectKeyFromObject(w)
	read := func() *testv1.Widget {
		t.Helper()
		got := &testv1.Widget{}
		testkit.Must(t, env.Client.Get(ctx, key, got))
		return got
	}
	kstatustest.AssertStatus(t, read(), status.InProgressStatus)

	steps := []struct {
		name      string
		next      reconcile.Result
		available metav1.ConditionStatus
		spec      string // a new spec.message before the pass, if set
		paused    *bool  // set or remove reconcile.AnnotationPaused before the pass
		want      status.Status
	}{
		{"done", reconcile.Done(), metav1.ConditionTrue, "", nil, status.CurrentStatus},
		{"spec changed, not yet reconciled", reconcile.Done(), metav1.ConditionTrue, "v2", nil, status.InProgressStatus},
		{"waiting", reconcile.Waiting("PodsStarting", "2 of 3 pods ready", 0), metav1.ConditionFalse, "", nil, status.InProgressStatus},
		{"retrying", reconcile.Retry(errors.New("the API was down")), metav1.ConditionUnknown, "", nil, status.InProgressStatus},
		{"done again", reconcile.Done(), metav1.ConditionTrue, "", nil, status.CurrentStatus},
		{"paused", reconcile.Done(), metav1.ConditionTrue, "", ptr.To(true), status.InProgressStatus},
		{"resumed", reconcile.Done(), metav1.ConditionTrue, "", ptr.To(false), status.CurrentStatus},
		{"terminal", reconcile.Terminal("BadConfig", errors.New("spec.message names no template")), metav1.ConditionFalse, "", nil, status.FailedStatus},
	}
	for _, s := range steps {
		if s.spec != "" {
			cur := read()
			cur.Spec.Message = s.spec
			testkit.Must(t, env.Client.Update(ctx, cur))
			if !kstatustest.AssertStatus(t, read(), s.want) {
				t.Errorf("step %q", s.name)
			}
			continue
		}
		if s.paused != nil {
			cur := read()
			if *s.paused {
				cur.Annotations = map[string]string{reconcile.AnnotationPaused: ""}
			} else {
				delete(cur.Annotations, reconcile.AnnotationPaused)
			}
			testkit.Must(t, env.Client.Update(ctx, cur))
		}
		hooks.next, hooks.available = s.next, s.available
		_, _ = r.Reconcile(ctx, crreconcile.Request{NamespacedName: key})
		if !kstatustest.AssertStatus(t, read(), s.want) {
			t.Errorf("step %q", s.name)
		}
	}
}

// TestAssertStatusReportsTheDifference checks the helper itself: a wrong
// expectation fails with kstatus's message and the object's status.
func TestAssertStatusReportsTheDifference(t *testing.T) {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", Generation: 2}}
	w.Status.ObservedGeneration = 1
	rec := testkit.RunTB(t, func(tb testing.TB) {
		if kstatustest.AssertStatus(tb, w, status.CurrentStatus) {
			tb.Error("AssertStatus returned true")
		}
	})
	for _, want := range []string{"InProgress", "want Current", "generation 2"} {
		if !strings.Contains(rec.Failures(), want) {
			t.Errorf("failure %q does not contain %q", rec.Failures(), want)
		}
	}
	if !kstatustest.AssertStatus(t, w, status.InProgressStatus) {
		t.Error("AssertStatus(InProgress) = false")
	}
}
