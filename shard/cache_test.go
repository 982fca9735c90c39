package shard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/shard"
)

// events records what an informer's handler saw, as "add name" and
// "delete name".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) handler() toolscache.ResourceEventHandler {
	rec := func(verb string, o any) {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.got = append(e.got, verb+" "+o.(client.Object).GetName())
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { rec("add", o) },
		DeleteFunc: func(o any) { rec("delete", o) },
	}
}

// take waits until the events seen, sorted, are want, and forgets them.
func (e *events) take(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		e.mu.Lock()
		got = slices.Sorted(slices.Values(e.got))
		if cmp.Equal(want, got) {
			e.got = nil
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
	}
	t.Fatalf("events (-want +got):\n%s", cmp.Diff(want, got))
}

func TestSlotCacheHoldsOnlyItsSlots(t *testing.T) {
	ns := env.Namespace(t)
	ring := shard.Ring{Name: "widgets", Slots: 4}
	cm := func(name string, slot int) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{ring.SlotLabel(): strconv.Itoa(slot)}},
			Data:       map[string]string{"colour": "blue"},
		}
	}
	for _, o := range []client.Object{cm("a", 0), cm("b", 1), cm("c", 2), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}}} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	c, err := shard.NewSlotCache(ring, env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}}, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Run(t, c)
	if err := c.IndexField(ctx, &corev1.ConfigMap{}, "colour", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["colour"]}
	}); err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	if _, err := inf.AddEventHandler(ev.handler()); err != nil {
		t.Fatal(err)
	}
	for err := c.Hold(ctx, 0, 1); err != nil; err = c.Hold(ctx, 0, 1) {
		if !errors.Is(err, shard.ErrNotStarted) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev.take(t, "add a", "add b")

	has := func(want ...string) {
		t.Helper()
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{"colour": "blue"}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range l.Items {
			got = append(got, o.Name)
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the cache's ConfigMaps (-want +got):\n%s", diff)
		}
		for _, name := range []string{"a", "b", "c"} {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
			if slices.Contains(want, name) != (err == nil) || err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("Get %s: %v; want it held: %t", name, err, slices.Contains(want, name))
			}
		}
	}
	has("a", "b")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &corev1.Secret{}); err != nil {
		t.Errorf("a kind not sharded: %v", err)
	}

	if err := c.Hold(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	ev.take(t, "add c")
	has("a", "b", "c")
	if diff := cmp.Diff([]int{0, 1, 2}, c.Slots()); diff != "" {
		t.Errorf("slots held (-want +got):\n%s", diff)
	}

	// Slot 0 shared its segment with slot 1: b is added again by the
	// segment that replaces it.
	if err := c.Release(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ev.take(t, "delete a", "add b")
	has("b", "c")
	if _, ok := c.Enter(0); ok {
		t.Error("a pass entered slot 0 after its release")
	}
	if err := env.Client.Create(ctx, cm("d", 1)); err != nil {
		t.Fatal(err)
	}
	ev.take(t, "add d")

	// A release waits for the passes its slot admitted.
	leave, ok := c.Enter(2)
	if !ok {
		t.Fatal("no pass entered slot 2, which is held")
	}
	released := make(chan error, 1)
	go func() { released <- c.Release(ctx, 2) }()
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) while a pass over slot 2 ran", err)
	case <-time.After(200 * time.Millisecond):
	}
	leave()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	ev.take(t, "delete c")
	has("b", "d")
	if diff := cmp.Diff([]int{1}, c.Slots()); diff != "" {
		t.Errorf("slots held (-want +got):\n%s", diff)
	}
}

// A Release that cannot restart the cache of the slots it keeps gives
// them up too: their work ends with their gates, as if released.
func TestFailedReleaseEndsTheWorkOfWhatItGaveUp(t *testing.T) {
	ns := env.Namespace(t)
	ring := shard.Ring{Name: "widgets", Slots: 4}
	var failReads atomic.Bool // discovery too: a new cache cannot map ConfigMaps
	config := interceptedConfig(func(req *http.Request) *http.Response {
		if failReads.Load() && req.Method == http.MethodGet {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}
		}
		return nil
	})
	c, err := shard.NewSlotCache(ring, config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}}, &corev1.ConfigMap{})
	testkit.Must(t, err)
	ctx := testkit.Run(t, c)
	// A new segment's cache syncs its indexed informers before it is
	// added: with reads failing, it cannot.
	if err := c.IndexField(ctx, &corev1.ConfigMap{}, "colour", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["colour"]}
	}); err != nil {
		t.Fatal(err)
	}
	for err := c.Hold(ctx, 0, 1); err != nil; err = c.Hold(ctx, 0, 1) {
		if !errors.Is(err, shard.ErrNotStarted) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ended := make(chan struct{})
	if !c.Go(1, func(ctx context.Context) {
		<-ctx.Done()
		close(ended)
	}) {
		t.Fatal("slot 1 held, yet its work refused")
	}

	failReads.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Release(rctx, 0); err == nil {
		t.Fatal("Release(0) restarted slot 1's cache with every read failing")
	}
	if got := c.Slots(); len(got) > 0 {
		t.Errorf("after the failed Release the cache holds %v; want nothing", got)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("slot 1 was given up, yet its work still runs 5 s on")
	}
	if c.Go(1, func(context.Context) {}) {
		t.Error("slot 1 was given up, yet it starts work")
	}
}

// A Release restarts the cache of the slots it keeps; a second Release
// may replace that cache before it synced. A read of a kept slot's object
// must not wait on the replaced cache, which stopped and never syncs: it
// held its pass, and so the slot, until the member stopped.
func TestReadOutlivesNoReplacedCache(t *testing.T) {
	ns := env.Namespace(t)
	ring := shard.Ring{Name: "widgets", Slots: 4}
	config, held := heldListsConfig()
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns, Labels: map[string]string{ring.SlotLabel(): "1"}}}
	testkit.Must(t, env.Client.Create(t.Context(), b))
	c, err := shard.NewSlotCache(ring, config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}}, &corev1.ConfigMap{})
	testkit.Must(t, err)
	ctx := testkit.Run(t, c)
	_, err = c.GetInformer(ctx, &corev1.ConfigMap{}) // a controller's watch
	testkit.Must(t, err)
	for err := c.Hold(ctx, 0, 1, 2); err != nil; err = c.Hold(ctx, 0, 1, 2) {
		if !errors.Is(err, shard.ErrNotStarted) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	held.hold()
	read, released := make(chan error, 1), make(chan error, 1)
	go func() {
		if err := c.Release(ctx, 0); err != nil {
			released <- err
			return
		}
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			read <- c.Get(rctx, client.ObjectKeyFromObject(b), &corev1.ConfigMap{})
		}()
		time.Sleep(200 * time.Millisecond) // the read waits for its cache
		released <- c.Release(ctx, 2)
	}()
	time.Sleep(time.Second)
	held.release()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("reading b of slot 1, kept by both Releases: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading b of slot 1, kept by both Releases, still waits 5 s after lists went on")
	}
	testkit.Must(t, <-released)
}

// A Hold syncing new slots holds up no read of the slots held already:
// no other segment holds the new ones, so those reads need not wait for
// their list.
func TestHoldDelaysNoReadOfOtherSlots(t *testing.T) {
	ns := env.Namespace(t)
	ring := shard.Ring{Name: "widgets", Slots: 4}
	config, held := heldListsConfig()
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns, Labels: map[string]string{ring.SlotLabel(): "0"}}}
	testkit.Must(t, env.Client.Create(t.Context(), b))
	c, err := shard.NewSlotCache(ring, config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}}, &corev1.ConfigMap{})
	testkit.Must(t, err)
	ctx := testkit.Run(t, c)
	_, err = c.GetInformer(ctx, &corev1.ConfigMap{})
	testkit.Must(t, err)
	for err := c.Hold(ctx, 0); err != nil; err = c.Hold(ctx, 0) {
		if !errors.Is(err, shard.ErrNotStarted) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	held.hold()
	holding := make(chan error, 1)
	go func() { holding <- c.Hold(ctx, 1) }()
	t.Cleanup(func() {
		held.release()
		if err := <-holding; err != nil && ctx.Err() == nil { // t.Context() ends before cleanups
			t.Error(err)
		}
	})
	time.Sleep(200 * time.Millisecond) // the Hold's segment added, listing
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.Get(rctx, client.ObjectKeyFromObject(b), &corev1.ConfigMap{}); err != nil {
		t.Errorf("reading b of slot 0 while slot 1's list is held: %v", err)
	}
}
