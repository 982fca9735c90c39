package shard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// TestHandoffTellsAMoveFromADeletion relabels a Widget away from member
// a without a drain, as the Sharder does once a's Lease ran out: the
// Widget leaves a's cache, but it exists, so a's reconciler must not see
// it gone. Only its deletion, once it is a's again, reaches it as such.
func TestHandoffTellsAMoveFromADeletion(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns}
	mgr := manager(t, map[client.Object]cache.ByObject{&testv1.Widget{}: {Label: r.Selector("a")}})
	var mu sync.Mutex
	var found, gone, passes int // inner's passes that found the Widget, that found it gone; Handoff's
	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		err := mgr.GetClient().Get(ctx, req.NamespacedName, &testv1.Widget{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			found++
		case apierrors.IsNotFound(err):
			gone++
		default:
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, nil
	})
	handoff := shard.Handoff(r, "a", mgr, &testv1.Widget{}, inner)
	testkit.Must(t, ctrl.NewControllerManagedBy(mgr).For(&testv1.Widget{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				passes++
			}()
			return handoff.Reconcile(ctx, req)
		})))
	testkit.Start(t, "replica a", mgr)

	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return found, gone
	}
	handoffPasses := func() int {
		mu.Lock()
		defer mu.Unlock()
		return passes
	}
	waitFor := func(what string, ok func(found, gone int) bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(counts()); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				f, g := counts()
				t.Fatalf("%s: not within 10 s (passes that found the Widget %d, that found it gone %d)", what, f, g)
			}
		}
	}
	relabel := func(member string) {
		t.Helper()
		w := &testv1.Widget{}
		testkit.Must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "w"}, w))
		w.Labels[r.Label()] = member
		testkit.Must(t, env.Client.Update(t.Context(), w))
	}
	inCache := func(want bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := mgr.GetClient().Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "w"}, &testv1.Widget{})
			if (err == nil) == want {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("a's cache holding the Widget: %v after 10 s, want %v", err == nil, want)
			}
		}
	}

	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{r.Label(): "a"}}}
	testkit.Must(t, env.Client.Create(t.Context(), w))
	waitFor("a's first pass", func(f, _ int) bool { return f > 0 })

	before := handoffPasses()
	relabel("b")
	inCache(false)
	for end := time.Now().Add(10 * time.Second); handoffPasses() == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no pass 10 s after the Widget left a's cache")
		}
	}
	if _, g := counts(); g != 0 {
		t.Fatalf("a's reconciler saw the Widget gone %d times after it moved to b; it exists", g)
	}

	f, _ := counts()
	relabel("a")
	inCache(true)
	waitFor("a's pass once the Widget is back", func(found, _ int) bool { return found > f })
	testkit.Must(t, env.Client.Delete(t.Context(), w))
	waitFor("the deletion reaching a", func(_, gone int) bool { return gone == 1 })
}
