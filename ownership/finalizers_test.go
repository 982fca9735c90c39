package ownership_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/ownership"
)

const (
	finA = "test.opkit.dev/a"
	finB = "test.opkit.dev/b"
)

func TestEnsureFinalizer(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name        string
		initial     []string
		finalizer   string
		wantChanged bool
		wantErr     error
		wantCalls   []string
		wantServer  []string
	}{
		{name: "adds to an object without finalizers", finalizer: finA, wantChanged: true, wantCalls: []string{"patch"}, wantServer: []string{finA}},
		{name: "appends after another writer's finalizer", initial: []string{finB}, finalizer: finA, wantChanged: true, wantCalls: []string{"patch"}, wantServer: []string{finB, finA}},
		{name: "already present costs no request", initial: []string{finA}, finalizer: finA, wantServer: []string{finA}},
		{name: "empty name is refused without a request", finalizer: "", wantErr: ownership.ErrInvalidFinalizer},
		{name: "unqualified name is refused without a request", finalizer: "not a name", wantErr: ownership.ErrInvalidFinalizer},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cm := newConfigMap(t, ns, fmt.Sprintf("ensure-%d", i), withFinalizers(tc.initial...))
			t.Cleanup(func() { forceRemoveFinalizers(t, client.ObjectKeyFromObject(cm)) })
			c, rec := newClient(t, hooks{})
			rvBefore := cm.ResourceVersion

			changed, err := ownership.EnsureFinalizer(t.Context(), c, cm, tc.finalizer)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("EnsureFinalizer() error = %v, want %v", err, tc.wantErr)
			}
			if changed != tc.wantChanged {
				t.Errorf("EnsureFinalizer() changed = %v, want %v", changed, tc.wantChanged)
			}
			assertCalls(t, rec, tc.wantCalls...)
			server, err := getConfigMap(t, client.ObjectKeyFromObject(cm))
			if err != nil {
				t.Fatalf("reading back: %v", err)
			}
			want := tc.wantServer
			if tc.wantErr != nil {
				want = tc.initial
			}
			if diff := cmp.Diff(want, server.Finalizers, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("finalizers on the server (-want +got):\n%s", diff)
			}
			// obj is updated in place with the server's copy.
			if cm.ResourceVersion != server.ResourceVersion {
				t.Errorf("obj resourceVersion = %s, server has %s", cm.ResourceVersion, server.ResourceVersion)
			}
			if tc.wantChanged == (cm.ResourceVersion == rvBefore) {
				t.Errorf("resourceVersion moved from %s to %s, changed = %v", rvBefore, cm.ResourceVersion, tc.wantChanged)
			}
		})
	}
}

// TestFinalizerRaceSequential replays a lost optimistic lock step by step:
// both writers read the same version, A writes first, B's patch conflicts, B
// re-reads and retries, and both finalizers survive.
func TestFinalizerRaceSequential(t *testing.T) {
	ns := newNamespace(t)
	cm := newConfigMap(t, ns, "race")
	t.Cleanup(func() { forceRemoveFinalizers(t, client.ObjectKeyFromObject(cm)) })
	copyA, copyB := cm.DeepCopy(), cm.DeepCopy()
	clientA, recA := newClient(t, hooks{})
	clientB, recB := newClient(t, hooks{})

	if changed, err := ownership.EnsureFinalizer(t.Context(), clientA, copyA, finA); err != nil || !changed {
		t.Fatalf("writer A: EnsureFinalizer() = %v, %v; want true, nil", changed, err)
	}
	if changed, err := ownership.EnsureFinalizer(t.Context(), clientB, copyB, finB); err != nil || !changed {
		t.Fatalf("writer B: EnsureFinalizer() = %v, %v; want true, nil", changed, err)
	}
	assertCalls(t, recA, "patch")
	assertCalls(t, recB, "patch", "get", "patch")

	server, err := getConfigMap(t, client.ObjectKeyFromObject(cm))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if diff := cmp.Diff([]string{finA, finB}, server.Finalizers); diff != "" {
		t.Errorf("finalizers on the server (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(server.Finalizers, copyB.Finalizers); diff != "" {
		t.Errorf("writer B's object is not the server's copy (-server +obj):\n%s", diff)
	}

	// A removes its finalizer from its now stale copy: B's survives.
	if changed, err := ownership.RemoveFinalizer(t.Context(), clientA, copyA, finA); err != nil || !changed {
		t.Fatalf("writer A: RemoveFinalizer() = %v, %v; want true, nil", changed, err)
	}
	assertCalls(t, recA, "patch", "patch", "get", "patch")
	server, err = getConfigMap(t, client.ObjectKeyFromObject(cm))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if diff := cmp.Diff([]string{finB}, server.Finalizers); diff != "" {
		t.Errorf("finalizers on the server after A's removal (-want +got):\n%s", diff)
	}
}

// TestFinalizerRaceConcurrent has several writers, each with its own client
// and the same stale copy, add different finalizers at once.
func TestFinalizerRaceConcurrent(t *testing.T) {
	ns := newNamespace(t)
	cm := newConfigMap(t, ns, "race")
	t.Cleanup(func() { forceRemoveFinalizers(t, client.ObjectKeyFromObject(cm)) })
	// retry.DefaultRetry makes 5 attempts; a writer can lose at most once
	// to each other writer, so 5 writers always all succeed.
	const writers = 5
	var want []string
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		fin := fmt.Sprintf("test.opkit.dev/writer-%d", i)
		want = append(want, fin)
		c, _ := newClient(t, hooks{})
		obj := cm.DeepCopy()
		wg.Go(func() {
			_, errs[i] = ownership.EnsureFinalizer(t.Context(), c, obj, fin)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: EnsureFinalizer() error = %v", i, err)
		}
	}
	server, err := getConfigMap(t, client.ObjectKeyFromObject(cm))
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if diff := cmp.Diff(want, server.Finalizers, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("finalizers on the server (-want +got):\n%s", diff)
	}
}

// TestDeletionWithFinalizers walks an object through deletion: it stays,
// with a deletionTimestamp, until the last finalizer is removed.
func TestDeletionWithFinalizers(t *testing.T) {
	ns := newNamespace(t)
	cm := newConfigMap(t, ns, "deleting")
	key := client.ObjectKeyFromObject(cm)
	t.Cleanup(func() { forceRemoveFinalizers(t, key) })
	c, rec := newClient(t, hooks{})

	if _, err := ownership.EnsureFinalizer(t.Context(), c, cm, finA); err != nil {
		t.Fatalf("EnsureFinalizer() error = %v", err)
	}
	if err := env.Client.Delete(t.Context(), cm); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	deleting, err := getConfigMap(t, key)
	if err != nil {
		t.Fatalf("object with a finalizer vanished on delete: %v", err)
	}
	if deleting.DeletionTimestamp.IsZero() {
		t.Fatalf("deletionTimestamp not set after delete")
	}
	rec.reset()

	// A new finalizer is refused without a request.
	changed, err := ownership.EnsureFinalizer(t.Context(), c, deleting, finB)
	if !errors.Is(err, ownership.ErrBeingDeleted) || changed {
		t.Errorf("EnsureFinalizer(new) on deleting object = %v, %v; want false, ErrBeingDeleted", changed, err)
	}
	// Our existing finalizer is already in place: no request, no error.
	changed, err = ownership.EnsureFinalizer(t.Context(), c, deleting, finA)
	if err != nil || changed {
		t.Errorf("EnsureFinalizer(existing) on deleting object = %v, %v; want false, nil", changed, err)
	}
	assertCalls(t, rec)

	changed, err = ownership.RemoveFinalizer(t.Context(), c, deleting, finA)
	if err != nil || !changed {
		t.Fatalf("RemoveFinalizer() = %v, %v; want true, nil", changed, err)
	}
	assertCalls(t, rec, "patch")
	if len(deleting.Finalizers) != 0 || deleting.DeletionTimestamp.IsZero() {
		t.Errorf("obj after last removal: finalizers %v, deletionTimestamp %v; want none and set", deleting.Finalizers, deleting.DeletionTimestamp)
	}
	if _, err := getConfigMap(t, key); !apierrors.IsNotFound(err) {
		t.Errorf("object after last finalizer removed: err = %v, want NotFound", err)
	}

	// Removing again is a no-op without a request.
	changed, err = ownership.RemoveFinalizer(t.Context(), c, deleting, finA)
	if err != nil || changed {
		t.Errorf("RemoveFinalizer() again = %v, %v; want false, nil", changed, err)
	}
	assertCalls(t, rec, "patch")
}

// TestEnsureFinalizerRefusedOnDeletionSeenOnRetry covers a deletion that
// starts between our read and our patch: the conflict's re-read shows the
// deletionTimestamp and the finalizer is refused.
func TestEnsureFinalizerRefusedOnDeletionSeenOnRetry(t *testing.T) {
	ns := newNamespace(t)
	cm := newConfigMap(t, ns, "deleted-meanwhile", withFinalizers(finB))
	key := client.ObjectKeyFromObject(cm)
	t.Cleanup(func() { forceRemoveFinalizers(t, key) })
	c, rec := newClient(t, hooks{beforePatch: func(n int) error {
		if n == 1 {
			return env.Client.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta})
		}
		return nil
	}})
	stale := cm.DeepCopy()
	changed, err := ownership.EnsureFinalizer(t.Context(), c, cm, finA)
	if !errors.Is(err, ownership.ErrBeingDeleted) || changed {
		t.Fatalf("EnsureFinalizer() = %v, %v; want false, ErrBeingDeleted", changed, err)
	}
	assertCalls(t, rec, "patch", "get")
	if diff := cmp.Diff(stale, cm); diff != "" {
		t.Errorf("obj changed on error (-before +after):\n%s", diff)
	}
}

// TestVanishingObject deletes the object between our read and our request.
func TestVanishingObject(t *testing.T) {
	ns := newNamespace(t)
	// gone deletes the object (by clearing its finalizers after deleting it).
	gone := func(t *testing.T, key client.ObjectKey) error {
		t.Helper()
		cm, err := getConfigMap(t, key)
		if err != nil {
			return err
		}
		if err := env.Client.Delete(t.Context(), cm); err != nil {
			return err
		}
		forceRemoveFinalizers(t, key)
		if _, err := getConfigMap(t, key); !apierrors.IsNotFound(err) {
			return fmt.Errorf("object still there: %w", err)
		}
		return nil
	}
	// touch changes the object so that a stale patch conflicts.
	touch := func(t *testing.T, key client.ObjectKey) error {
		t.Helper()
		cm, err := getConfigMap(t, key)
		if err != nil {
			return err
		}
		cm.Data = map[string]string{"touched": "yes"}
		return env.Client.Update(t.Context(), cm)
	}

	t.Run("EnsureFinalizer reports NotFound", func(t *testing.T) {
		cm := newConfigMap(t, ns, "ensure-gone")
		key := client.ObjectKeyFromObject(cm)
		c, rec := newClient(t, hooks{beforePatch: func(int) error { return gone(t, key) }})
		changed, err := ownership.EnsureFinalizer(t.Context(), c, cm, finA)
		if !apierrors.IsNotFound(err) || changed {
			t.Errorf("EnsureFinalizer() = %v, %v; want false, NotFound", changed, err)
		}
		assertCalls(t, rec, "patch")
	})
	t.Run("RemoveFinalizer counts a vanished object as done", func(t *testing.T) {
		cm := newConfigMap(t, ns, "remove-gone", withFinalizers(finA))
		key := client.ObjectKeyFromObject(cm)
		c, rec := newClient(t, hooks{beforePatch: func(int) error { return gone(t, key) }})
		changed, err := ownership.RemoveFinalizer(t.Context(), c, cm, finA)
		if err != nil || changed {
			t.Errorf("RemoveFinalizer() = %v, %v; want false, nil", changed, err)
		}
		assertCalls(t, rec, "patch")
	})
	t.Run("RemoveFinalizer when the object vanishes before the re-read", func(t *testing.T) {
		cm := newConfigMap(t, ns, "remove-gone-on-retry", withFinalizers(finA))
		key := client.ObjectKeyFromObject(cm)
		c, rec := newClient(t, hooks{
			beforePatch: func(int) error { return touch(t, key) },
			beforeGet:   func(int) error { return gone(t, key) },
		})
		changed, err := ownership.RemoveFinalizer(t.Context(), c, cm, finA)
		if err != nil || changed {
			t.Errorf("RemoveFinalizer() = %v, %v; want false, nil", changed, err)
		}
		assertCalls(t, rec, "patch", "get")
	})
	t.Run("RemoveFinalizer when someone else removed it first", func(t *testing.T) {
		cm := newConfigMap(t, ns, "removed-by-other", withFinalizers(finA, finB))
		key := client.ObjectKeyFromObject(cm)
		c, rec := newClient(t, hooks{beforePatch: func(n int) error {
			if n > 1 {
				return nil
			}
			other, err := getConfigMap(t, key)
			if err != nil {
				return err
			}
			other.Finalizers = []string{finB}
			return env.Client.Update(t.Context(), other)
		}})
		t.Cleanup(func() { forceRemoveFinalizers(t, key) })
		changed, err := ownership.RemoveFinalizer(t.Context(), c, cm, finA)
		if err != nil || changed {
			t.Errorf("RemoveFinalizer() = %v, %v; want false, nil", changed, err)
		}
		assertCalls(t, rec, "patch", "get")
		if diff := cmp.Diff([]string{finB}, cm.Finalizers); diff != "" {
			t.Errorf("obj not refreshed from the re-read (-want +got):\n%s", diff)
		}
	})
}

func TestFinalizerHelpersNeedResourceVersion(t *testing.T) {
	c, rec := newClient(t, hooks{})
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = "default", "never-read"
	if _, err := ownership.EnsureFinalizer(t.Context(), c, cm, finA); err == nil {
		t.Errorf("EnsureFinalizer() on an object without resourceVersion: want error")
	}
	cm.Finalizers = []string{finA}
	if _, err := ownership.RemoveFinalizer(t.Context(), c, cm, finA); err == nil {
		t.Errorf("RemoveFinalizer() on an object without resourceVersion: want error")
	}
	if _, err := ownership.RemoveFinalizer(t.Context(), c, cm, ""); !errors.Is(err, ownership.ErrInvalidFinalizer) {
		t.Errorf("RemoveFinalizer(\"\") error = %v, want ErrInvalidFinalizer", err)
	}
	assertCalls(t, rec)
}
