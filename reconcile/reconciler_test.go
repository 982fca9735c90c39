package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

const finalizer = "test.opkit.dev/widget-cleanup"

func TestLifecycle(t *testing.T) {
	f := newFixture(t)
	hooks := &finalizingHooks{widgetHooks: widgetHooks{children: f.children()}}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1, Message: "hello"})

	// First pass: finalizer, child, status — one write each.
	f.mustPass(r, "w")
	f.wantWrites(3)
	w := f.get("w")
	if !controllerutil.ContainsFinalizer(w, finalizer) {
		t.Errorf("finalizers = %v, want %s", w.Finalizers, finalizer)
	}
	wantConditions(t, w, []condition{
		{"Available", "True", "ChildCreated", "", 1},
		{"Ready", "True", statusutil.ReasonSucceeded, "", 1},
	})
	if w.Status.ObservedGeneration != 1 || w.Status.Replicas != 1 {
		t.Errorf("status = %+v, want observedGeneration 1 and replicas 1", w.Status)
	}
	cm := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), types.NamespacedName{Namespace: f.ns, Name: "w-child"}, cm))
	if ctl := metav1.GetControllerOf(cm); ctl == nil || ctl.UID != w.UID {
		t.Errorf("child controller = %v, want the widget %s", ctl, w.UID)
	}

	// Steady state: nothing changed, nothing written.
	f.mustPass(r, "w")
	f.wantWrites(0)

	// A spec change: the child and the status, nothing else.
	w.Spec.Replicas = 2
	testkit.Must(t, env.Client.Update(t.Context(), w))
	f.mustPass(r, "w")
	f.wantWrites(2)
	w = f.get("w")
	if w.Status.ObservedGeneration != 2 || w.Status.Replicas != 2 {
		t.Errorf("status after spec change = %+v, want observedGeneration 2 and replicas 2", w.Status)
	}
	testkit.Must(t, env.Client.Get(t.Context(), types.NamespacedName{Namespace: f.ns, Name: "w-child"}, cm))
	if cm.Data["replicas"] != "2" {
		t.Errorf("child data = %v, want replicas 2", cm.Data)
	}
	f.mustPass(r, "w")
	f.wantWrites(0)

	// Deletion: Finalize runs, the finalizer goes (one write), the object is gone.
	testkit.Must(t, env.Client.Delete(t.Context(), w))
	f.mustPass(r, "w")
	f.wantWrites(1)
	if got := hooks.finalized.Load(); got != 1 {
		t.Errorf("Finalize calls = %d, want 1", got)
	}
	if !f.gone("w") {
		t.Error("widget still exists after its finalizer was removed")
	}

	// The next pass finds nothing and is not an error.
	f.mustPass(r, "w")
	f.wantWrites(0)
}

func TestNoFinalizerWithoutFinalizeHook(t *testing.T) {
	f := newFixture(t)
	r := newReconciler(t, f, &widgetHooks{children: f.children()})
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")
	f.wantWrites(2) // child and status
	if fin := f.get("w").Finalizers; len(fin) != 0 {
		t.Errorf("finalizers = %v, want none for hooks without Finalize", fin)
	}
}

func TestFinalizeFailsThenSucceeds(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("bucket unreachable")
	hooks := &finalizingHooks{
		widgetHooks: widgetHooks{children: f.children()},
		results:     []reconcile.Result{reconcile.Retry(boom)},
	}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{Replicas: 1})
	f.mustPass(r, "w")
	testkit.Must(t, env.Client.Delete(t.Context(), f.get("w")))

	// Failing cleanup: the error goes to the work queue's backoff, the
	// finalizer stays, and the status says why deletion is held up.
	_, err := f.pass(r, "w")
	if !errors.Is(err, boom) {
		t.Fatalf("pass with failing Finalize: err = %v, want %v", err, boom)
	}
	f.wantWrites(1) // status only
	w := f.get("w")
	if !controllerutil.ContainsFinalizer(w, finalizer) {
		t.Fatalf("finalizer removed although Finalize failed")
	}
	ready := statusutil.Get(w, statusutil.ConditionReady)
	if ready == nil || ready.Reason != reconcile.ReasonFinalizing || !strings.Contains(ready.Message, boom.Error()) {
		t.Errorf("Ready = %+v, want reason %s naming the error", ready, reconcile.ReasonFinalizing)
	}

	// Cleanup succeeds: the finalizer goes and so does the object.
	f.mustPass(r, "w")
	f.wantWrites(1)
	if !f.gone("w") {
		t.Error("widget still exists after Finalize succeeded")
	}
	if got := hooks.finalized.Load(); got != 2 {
		t.Errorf("Finalize calls = %d, want 2", got)
	}
}

func TestFinalizeWaitingKeepsFinalizer(t *testing.T) {
	f := newFixture(t)
	hooks := &finalizingHooks{
		widgetHooks: widgetHooks{children: f.children()},
		results:     []reconcile.Result{reconcile.Waiting("BackupRunning", "final backup in progress", time.Second)},
	}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	testkit.Must(t, env.Client.Delete(t.Context(), f.get("w")))
	res, err := f.pass(r, "w")
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("pass = %+v, %v; want RequeueAfter 1s and no error", res, err)
	}
	w := f.get("w")
	if c := statusutil.Get(w, statusutil.ConditionReconciling); c == nil || c.Reason != "BackupRunning" {
		t.Errorf("Reconciling = %+v, want reason BackupRunning", c)
	}
	f.mustPass(r, "w")
	if !f.gone("w") {
		t.Error("widget still exists after Finalize finished")
	}
}

// TestFinalizeRequeueAfterKeepsFinalizer: a Finalize that merges a running
// operation's poll into Done (Done().RequeueBy(d), as Runner.Step's
// callers do) is not finished: the finalizer stays and the object is
// looked at again after d. Before, RequeueAfter counted as success in
// Finalize and the finalizer went while the work ran.
func TestFinalizeRequeueAfterKeepsFinalizer(t *testing.T) {
	f := newFixture(t)
	hooks := &finalizingHooks{
		widgetHooks: widgetHooks{children: f.children()},
		results:     []reconcile.Result{reconcile.Done().RequeueBy(5 * time.Second)},
	}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{})
	f.mustPass(r, "w")
	testkit.Must(t, env.Client.Delete(t.Context(), f.get("w")))
	res, err := f.pass(r, "w")
	if err != nil || res.RequeueAfter != 5*time.Second {
		t.Errorf("pass = %+v, %v; want RequeueAfter 5s and no error", res, err)
	}
	if f.gone("w") || !controllerutil.ContainsFinalizer(f.get("w"), finalizer) {
		t.Fatal("finalizer removed while Finalize asked to look again")
	}
	f.mustPass(r, "w")
	if !f.gone("w") {
		t.Error("widget still exists after Finalize returned Done")
	}
}

func TestObjectVanishesMidPass(t *testing.T) {
	for _, withFinalizer := range []bool{false, true} {
		name := map[bool]string{false: "without-finalizer", true: "with-finalizer"}[withFinalizer]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			onReconc := func(ctx context.Context, w *testv1.Widget) (reconcile.Result, bool) {
				// Somebody deletes the object while the pass runs.
				if err := env.Client.Delete(ctx, w.DeepCopy()); err != nil {
					t.Errorf("deleting mid-pass: %v", err)
				}
				if withFinalizer {
					// Let it go: release our finalizer as another actor would.
					latest := &testv1.Widget{}
					if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), latest); err == nil {
						controllerutil.RemoveFinalizer(latest, finalizer)
						if err := env.Client.Update(ctx, latest); err != nil {
							t.Errorf("releasing finalizer: %v", err)
						}
					}
				}
				statusutil.MarkTrue(w, "Available", "Done", "")
				return reconcile.Done(), true
			}
			var hooks reconcile.Hooks[*testv1.Widget] = &widgetHooks{onReconc: onReconc}
			if withFinalizer {
				hooks = &finalizingHooks{widgetHooks: widgetHooks{onReconc: onReconc}}
			}
			r := newReconciler(t, f, hooks)
			f.createWidget("w", testv1.WidgetSpec{})
			f.mustPass(r, "w")
			if !f.gone("w") {
				t.Error("widget should be gone")
			}
			f.mustPass(r, "w")
		})
	}
}

func TestOutcomes(t *testing.T) {
	boom := errors.New("upstream timeout")
	tests := []struct {
		name        string
		result      reconcile.Result
		wantResult  crreconcile.Result
		wantErr     func(error) bool
		wantConds   []condition
		wantObsGen  int64
		wantRequeue bool
	}{
		{
			name:       "done",
			result:     reconcile.Done(),
			wantErr:    func(err error) bool { return err == nil },
			wantConds:  []condition{{"Ready", "True", statusutil.ReasonSucceeded, "", 1}},
			wantObsGen: 1,
		},
		{
			name:       "requeue after",
			result:     reconcile.RequeueAfter(time.Minute),
			wantResult: crreconcile.Result{RequeueAfter: time.Minute},
			wantErr:    func(err error) bool { return err == nil },
			wantConds:  []condition{{"Ready", "True", statusutil.ReasonSucceeded, "", 1}},
			wantObsGen: 1,
		},
		{
			name:       "waiting",
			result:     reconcile.Waiting("PodsStarting", "1/3 pods ready", 5*time.Second),
			wantResult: crreconcile.Result{RequeueAfter: 5 * time.Second},
			wantErr:    func(err error) bool { return err == nil },
			wantConds: []condition{
				{"Ready", "Unknown", "PodsStarting", "1/3 pods ready", 1},
				{"Reconciling", "True", "PodsStarting", "1/3 pods ready", 1},
			},
			wantObsGen: 1,
		},
		{
			name:    "retry",
			result:  reconcile.Retry(boom),
			wantErr: func(err error) bool { return errors.Is(err, boom) && !errors.Is(err, crreconcile.TerminalError(nil)) },
			wantConds: []condition{
				{"Ready", "False", reconcile.ReasonReconcileFailed, boom.Error(), 1},
				{"Reconciling", "True", reconcile.ReasonRetrying, boom.Error(), 1},
			},
			wantObsGen: -1, // a failed pass has not acted on the generation: the CRD default stays
		},
		{
			name:    "terminal",
			result:  reconcile.Terminal("SecretMissing", boom),
			wantErr: func(err error) bool { return errors.Is(err, boom) && errors.Is(err, crreconcile.TerminalError(nil)) },
			wantConds: []condition{
				{"Ready", "False", "SecretMissing", boom.Error(), 1},
				{"Stalled", "True", "SecretMissing", boom.Error(), 1},
			},
			wantObsGen: 1,
		},
		{
			name:       "terminal, rechecked",
			result:     reconcile.Terminal("SecretInvalid", boom).RecheckAfter(time.Minute),
			wantResult: crreconcile.Result{RequeueAfter: time.Minute},
			wantErr:    func(err error) bool { return err == nil },
			wantConds: []condition{
				{"Ready", "False", "SecretInvalid", boom.Error(), 1},
				{"Stalled", "True", "SecretInvalid", boom.Error(), 1},
			},
			wantObsGen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			hooks := &widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) { return tt.result, true }}
			r := newReconciler(t, f, hooks)
			f.createWidget("w", testv1.WidgetSpec{})
			res, err := f.pass(r, "w")
			if !tt.wantErr(err) {
				t.Errorf("error = %v", err)
			}
			if res != tt.wantResult {
				t.Errorf("result = %+v, want %+v", res, tt.wantResult)
			}
			w := f.get("w")
			wantConditions(t, w, tt.wantConds)
			if w.Status.ObservedGeneration != tt.wantObsGen {
				t.Errorf("observedGeneration = %d, want %d", w.Status.ObservedGeneration, tt.wantObsGen)
			}
			// The same outcome again changes nothing: no write, no hot loop.
			if _, err := f.pass(r, "w"); !tt.wantErr(err) {
				t.Errorf("second pass error = %v", err)
			}
			f.wantWrites(0)
		})
	}
}

func TestValidationStallsWithoutRetry(t *testing.T) {
	f := newFixture(t)
	hooks := &validatingHooks{widgetHooks: widgetHooks{children: f.children()}}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{Message: "invalid"})

	f.mustPass(r, "w") // no error, no requeue: a user error is not an error loop
	if n := hooks.reconcils.Load(); n != 0 {
		t.Errorf("Reconcile called %d times for an invalid spec, want 0", n)
	}
	w := f.get("w")
	stalled := statusutil.Get(w, statusutil.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != reconcile.ReasonInvalidSpec ||
		!strings.Contains(stalled.Message, "spec.message") {
		t.Fatalf("Stalled = %+v, want True/%s naming spec.message", stalled, reconcile.ReasonInvalidSpec)
	}

	// Fixing the spec un-stalls it, and the defaulted message is used but
	// not written back.
	w.Spec.Message = ""
	testkit.Must(t, env.Client.Update(t.Context(), w))
	f.mustPass(r, "w")
	w = f.get("w")
	if statusutil.Get(w, statusutil.ConditionStalled) != nil || !statusutil.IsTrue(w, statusutil.ConditionReady) {
		t.Errorf("conditions after fix = %+v, want Ready=True and no Stalled", conditionsOf(w))
	}
	if w.Spec.Message != "" {
		t.Errorf("spec.message = %q; defaults must not be written back", w.Spec.Message)
	}
	cm := &corev1.ConfigMap{}
	testkit.Must(t, env.Client.Get(t.Context(), types.NamespacedName{Namespace: f.ns, Name: "w-child"}, cm))
	if cm.Data["message"] != "defaulted" {
		t.Errorf("child message = %q, want the defaulted value", cm.Data["message"])
	}
}

// TestDefaultErrorRetries: a Default that fails fails the pass with Retry,
// before Validate and Reconcile.
func TestDefaultErrorRetries(t *testing.T) {
	f := newFixture(t)
	hooks := &validatingHooks{widgetHooks: widgetHooks{children: f.children()}}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{Message: "cannot default"})

	if _, err := f.pass(r, "w"); err == nil || !strings.Contains(err.Error(), "defaulting: no default today") {
		t.Fatalf("pass error = %v, want the Default error", err)
	}
	if n := hooks.reconcils.Load(); n != 0 {
		t.Errorf("Reconcile called %d times after Default failed, want 0", n)
	}
	w := f.get("w")
	if c := statusutil.Get(w, statusutil.ConditionReconciling); c == nil || c.Reason != reconcile.ReasonRetrying {
		t.Errorf("Reconciling = %+v, want reason %s", c, reconcile.ReasonRetrying)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		opt  reconcile.Option
		want string
	}{
		{"finalizer without domain", reconcile.WithFinalizer("cleanup"), "WithFinalizer"},
		{"empty field owner", reconcile.WithFieldOwner(""), "WithFieldOwner"},
		{"empty name", reconcile.WithName(""), "WithName"},
		{"negative progress delay", reconcile.WithProgressDelay(-time.Second), "WithProgressDelay"},
		{"unknown ready events", reconcile.WithReadyEvents(7), "WithReadyEvents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reconcile.New[*testv1.Widget](f.c, env.Scheme, &widgetHooks{}, tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if _, err := reconcile.New[*testv1.Widget](nil, env.Scheme, &widgetHooks{}); err == nil {
		t.Error("New with a nil client succeeded")
	}
}

// TestControllerOptionsAreSetupOnly checks that the options shaping a
// controller cannot be given to New, which builds none: their values do not
// implement Option, so New(..., WithOwns(...)) does not compile.
func TestControllerOptionsAreSetupOnly(t *testing.T) {
	setupOnly := map[string]reconcile.SetupOption{
		"WithOwns":                    reconcile.WithOwns(&corev1.ConfigMap{}),
		"WithWatches":                 reconcile.WithWatches(&corev1.Secret{}, nil),
		"WithPredicates":              reconcile.WithPredicates(reconcile.DefaultPredicate()),
		"WithMaxConcurrentReconciles": reconcile.WithMaxConcurrentReconciles(2),
		"WithSkipNameValidation":      reconcile.WithSkipNameValidation(),
		"WithControllerOptions":       reconcile.WithControllerOptions(controller.Options{}),
		"WithRawSource":               reconcile.WithRawSource(nil),
	}
	for name, o := range setupOnly {
		if _, ok := o.(reconcile.Option); ok {
			t.Errorf("%s is an Option: New would accept it and ignore it", name)
		}
	}
}

// TestSetupWithManagerRejectsBadOptions checks that SetupWithManager
// validates both kinds of option: the Reconciler's and the controller's.
func TestSetupWithManagerRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  reconcile.SetupOption
		want string
	}{
		{"negative concurrency", reconcile.WithMaxConcurrentReconciles(-1), "WithMaxConcurrentReconciles"},
		{"finalizer without domain", reconcile.WithFinalizer("cleanup"), "WithFinalizer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
				Scheme:                 env.Scheme,
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
			})
			testkit.Must(t, err)
			_, err = reconcile.SetupWithManager[*testv1.Widget](mgr, &widgetHooks{}, tt.opt, reconcile.WithSkipNameValidation())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SetupWithManager = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestNotFoundIsNotAnError(t *testing.T) {
	f := newFixture(t)
	r := newReconciler(t, f, &widgetHooks{})
	f.mustPass(r, "never-existed")
	f.wantWrites(0)
}

// TestRetryKeepsReadyTransitionTime: a pass that fails again with the same
// error leaves Ready=False as it was, its lastTransitionTime included, and
// writes nothing. (Ready once passed through Unknown within the pass, so
// every retry a second or more after the first moved lastTransitionTime to
// now and rewrote the status.)
func TestRetryKeepsReadyTransitionTime(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("upstream timeout")
	hooks := &widgetHooks{onReconc: func(context.Context, *testv1.Widget) (reconcile.Result, bool) { return reconcile.Retry(boom), true }}
	r := newReconciler(t, f, hooks)
	f.createWidget("w", testv1.WidgetSpec{})
	if _, err := f.pass(r, "w"); !errors.Is(err, boom) {
		t.Fatalf("first pass error = %v, want %v", err, boom)
	}
	// Ready became False an hour ago.
	w := f.get("w")
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for i := range w.Status.Conditions {
		w.Status.Conditions[i].LastTransitionTime = since
	}
	if err := env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatal(err)
	}

	if _, err := f.pass(r, "w"); !errors.Is(err, boom) {
		t.Fatalf("second pass error = %v, want %v", err, boom)
	}
	f.wantWrites(0)
	ready := statusutil.Get(f.get("w"), statusutil.ConditionReady)
	if ready == nil || !ready.LastTransitionTime.Equal(&since) {
		t.Errorf("Ready = %+v, want lastTransitionTime %v (it has been False since)", ready, since)
	}
}
