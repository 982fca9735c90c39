package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/shard"
)

// runs records the operation runs of every replica: the records, as the
// API server would keep them in status, and the runs going per object.
type runs struct {
	ns       string
	mu       sync.Mutex
	records  map[string]operation.Record
	going    map[string]string // object: the replica whose run goes
	started  map[string][]string
	overlaps []string
}

// reconciler is replica's pass: it starts a long operation on each
// Widget once and steps it with runner.
func (rs *runs) reconciler(replica string, runner *operation.Runner) reconcile.Reconciler {
	op := operation.Operation{Type: "long", Poll: 100 * time.Millisecond,
		Run: func(ctx context.Context, id string, _ func(string)) error {
			rs.mu.Lock()
			if other, ok := rs.going[id]; ok {
				rs.overlaps = append(rs.overlaps, fmt.Sprintf("%s: %s's run starts while %s's goes", id, replica, other))
			}
			rs.going[id] = replica
			rs.started[id] = append(rs.started[id], replica)
			rs.mu.Unlock()
			defer func() {
				rs.mu.Lock()
				delete(rs.going, id)
				rs.mu.Unlock()
			}()
			<-ctx.Done() // a backup that streams for a while
			return ctx.Err()
		}}
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if req.Namespace != rs.ns {
			return reconcile.Result{}, nil // another test's Widget: the replicas watch every namespace
		}
		rs.mu.Lock()
		rec := rs.records[req.Name]
		rs.mu.Unlock()
		if rec.ID == "" {
			if err := operation.Start(&rec, op.Type, req.Name, time.Now()); err != nil {
				return reconcile.Result{}, err
			}
		}
		owner := &metav1.ObjectMeta{UID: types.UID("uid-" + req.Name)}
		next := runner.Step(ctx, owner, &rec, op)
		rs.mu.Lock()
		rs.records[req.Name] = rec
		rs.mu.Unlock()
		return reconcile.Result{RequeueAfter: next}, nil
	})
}

func (rs *runs) startedBy(name string) []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.started[name]...)
}

// TestOperationRunsOnceAcrossAHandover: an operation a replica runs for
// an object of a slot that moves to another replica ends before the other
// replica holds the slot, so the new holder's attempt never overlaps it.
// Before, runs went on under the manager's context and Release waited
// for passes only: the new holder found the record Running with no run of
// its own and started a second run beside the first (issue #81, item 3).
func TestOperationRunsOnceAcrossAHandover(t *testing.T) {
	ns := env.Namespace(t)
	r := shard.Ring{Name: "widgets", Namespace: ns, LeaseDuration: 3 * time.Second, Slots: 2}
	widgets := widgetPerSlot(t, r)
	rs := &runs{ns: ns, records: map[string]operation.Record{}, going: map[string]string{}, started: map[string][]string{}}
	replicaWithRunner := func(id string) {
		replicaOf(t, r, id, func(mgr ctrl.Manager) reconcile.Reconciler {
			runner := operation.NewRunner(nil)
			testkit.Must(t, mgr.Add(runner))
			return rs.reconciler(id, runner)
		}, nil, nil)
	}
	replicaWithRunner("a")
	waitUntil(t, "a's runs", func() bool { return len(rs.startedBy(widgets[0].Name)) > 0 && len(rs.startedBy(widgets[1].Name)) > 0 })

	replicaWithRunner("b")
	h := heldBy(t, r, "a", "b")
	moved := widgets[0]
	if h[0] == "a" {
		moved = widgets[1]
	}
	waitUntil(t, "b's run of "+moved.Name, func() bool {
		started := rs.startedBy(moved.Name)
		return started[len(started)-1] == "b"
	})
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.overlaps) > 0 {
		t.Errorf("runs overlapped: %q", rs.overlaps)
	}
	// Each run had its attempt recorded first. (b may hold the slot a
	// moment and give it up as the membership settles: more attempts.)
	if rec, runs := rs.records[moved.Name], len(rs.started[moved.Name]); int(rec.Attempts) < runs {
		t.Errorf("record of %s: %+v; %d runs started, more than its attempts", moved.Name, rec, runs)
	}
}

// waitUntil polls ok for up to 30 s.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}
