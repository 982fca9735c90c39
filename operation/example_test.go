package operation_test

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
)

// resizeHooks resizes a database's volumes, a long operation, when asked.
type resizeHooks struct {
	runner *operation.Runner
	resize operation.Operation
	// op would live in the status: w.Status.Resize operation.Record.
	op operation.Record
}

func (h *resizeHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	if want := fmt.Sprintf("resize-to-%d", w.Spec.Replicas); want != h.op.ID {
		// Recorded now, written with the status, run in a later pass.
		_ = operation.Start(&h.op, h.resize.Type, want, time.Now()) // ErrActive: one at a time
	}
	res := reconcile.Done()
	if d := h.runner.Step(ctx, w, &h.op, h.resize); d > 0 {
		res = res.RequeueBy(d)
	}
	return res
}

// Wiring a Runner: added to the manager, so that its runs stop with it.
func ExampleRunner() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err) // in main; library code returns errors
	}
	runner := operation.NewRunner(nil)
	if err := mgr.Add(runner); err != nil {
		panic(err)
	}
	hooks := &resizeHooks{runner: runner, resize: operation.Operation{
		Type:        "resize",
		MaxAttempts: 1, // a resize must not run twice
		Run: func(ctx context.Context, id string, progress func(string)) error {
			progress("expanding claim data-0")
			return nil
		},
	}}
	if _, err := reconcile.SetupWithManager[*testv1.Widget](mgr, hooks); err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}
