package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// TestHandoffTellsAMoveFromADeletion runs member a alone, then adds b:
// the Widget of the slot b takes leaves a's cache, but it exists, so a's
// reconciler must not see it gone. Once b left again, only its deletion
// reaches a's reconciler as such.
func TestHandoffTellsAMoveFromADeletion(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 2}
	widgets := widgetPerSlot(t, r)
	mgr := manager(t, nil, r.NewCache("a", &testv1.Widget{}))
	var mu sync.Mutex
	found, gone := map[string]int{}, map[string]int{} // inner's passes that found a Widget, that found it gone
	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		err := mgr.GetClient().Get(ctx, req.NamespacedName, &testv1.Widget{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			found[req.Name]++
		case apierrors.IsNotFound(err):
			gone[req.Name]++
		default:
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, nil
	})
	testkit.Must(t, ctrl.NewControllerManagedBy(mgr).For(&testv1.Widget{}).Complete(shard.Handoff(mgr, &testv1.Widget{}, inner)))
	testkit.Start(t, "replica a", mgr)

	counts := func(name string) (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return found[name], gone[name]
	}
	waitFor := func(what, name string, ok func(found, gone int) bool) {
		t.Helper()
		for end := time.Now().Add(15 * time.Second); !ok(counts(name)); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				f, g := counts(name)
				t.Fatalf("%s: not within 15 s (passes that found %s %d, that found it gone %d)", what, name, f, g)
			}
		}
	}
	for _, w := range widgets {
		waitFor("a's first pass", w.Name, func(f, _ int) bool { return f > 0 })
	}

	stopB := testkit.Start(t, "replica b", manager(t, nil, r.NewCache("b", &testv1.Widget{})))
	h := heldBy(t, r, "a", "b")
	moved := widgets[0]
	if h[0] == "a" {
		moved = widgets[1]
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := mgr.GetClient().Get(t.Context(), client.ObjectKeyFromObject(moved), &testv1.Widget{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s, of b's slot, still in a's cache after 10 s: %v", moved.Name, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // for a pass its leaving would queue
	if _, g := counts(moved.Name); g != 0 {
		t.Fatalf("a's reconciler saw %s gone %d times after its slot moved to b; it exists", moved.Name, g)
	}

	f, _ := counts(moved.Name)
	stopB()
	waitFor("a's pass once the Widget is back", moved.Name, func(found, _ int) bool { return found > f })
	testkit.Must(t, env.Client.Delete(t.Context(), moved))
	waitFor("the deletion reaching a", moved.Name, func(_, gone int) bool { return gone == 1 })
}

// TestLongPassOutlivesItsFirstFence: a pass of a member that keeps
// renewing its Lease runs on past the lease duration; only a member whose
// Lease may have run out stops its passes. Before, the pass's deadline was
// the fence read when it began, which renewals never moved: every pass
// longer than a lease duration was cancelled on a healthy member (issue
// #81, item 4).
func TestLongPassOutlivesItsFirstFence(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 2 * time.Second, Slots: 1}
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{r.SlotLabel(): "0"}}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	ended := make(chan error, 1)
	var once sync.Once
	long := 3 * r.LeaseDuration
	inner := reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		once.Do(func() {
			select {
			case <-ctx.Done():
				ended <- fmt.Errorf("pass cancelled after a lease duration's renewals: %w", context.Cause(ctx))
			case <-time.After(long):
				ended <- nil
			}
		})
		return reconcile.Result{}, nil
	})
	mgr := manager(t, nil, r.NewCache("a", &testv1.Widget{}))
	testkit.Must(t, ctrl.NewControllerManagedBy(mgr).For(&testv1.Widget{}).Complete(shard.Handoff(mgr, &testv1.Widget{}, inner)))
	testkit.Start(t, "replica a", mgr)
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(long + 15*time.Second):
		t.Fatal("no pass within 15 s")
	}
}
