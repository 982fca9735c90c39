package operation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/operation"
)

var owner = &metav1.ObjectMeta{Name: "db", UID: "uid-1"}

// work is an operation whose Run blocks until released or cancelled, and
// commits its effect only when released.
type work struct {
	mu       sync.Mutex
	started  int
	effects  map[string]int
	release  chan error
	finished chan struct{}
}

func newWork() *work {
	return &work{effects: map[string]int{}, release: make(chan error, 10), finished: make(chan struct{}, 10)}
}

func (w *work) op(maxAttempts int32, withDone bool) operation.Operation {
	op := operation.Operation{Type: "backup", MaxAttempts: maxAttempts, Poll: time.Millisecond,
		Run: func(ctx context.Context, id string, progress func(string)) error {
			w.mu.Lock()
			w.started++
			w.mu.Unlock()
			progress("copying")
			defer func() { w.finished <- struct{}{} }()
			select {
			case err := <-w.release:
				if err == nil {
					w.mu.Lock()
					w.effects[id]++
					w.mu.Unlock()
				}
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	if withDone {
		op.Done = func(_ context.Context, id string) (bool, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.effects[id] > 0, nil
		}
	}
	return op
}

func (w *work) counts() (started, effects int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started, w.effects["b1"]
}

// process is one operator process: its Runner, and the Record a pass
// works on, read back from what was written (saved).
type process struct {
	t      *testing.T
	runner *operation.Runner
	op     operation.Operation
	rec    operation.Record
	saved  *operation.Record
}

func (p *process) step() time.Duration {
	p.t.Helper()
	p.rec = *p.saved.DeepCopy()
	return p.runner.Step(p.t.Context(), owner, &p.rec, p.op)
}

func (p *process) write() { *p.saved = *p.rec.DeepCopy() }

// restart is the operator killed: its runs end, and the next process
// starts from what was written.
func (p *process) restart() *process {
	p.runner.Cancel(owner)
	return &process{t: p.t, runner: operation.NewRunner(nil), op: p.op, saved: p.saved}
}

func TestStepRunsAnOperationOnce(t *testing.T) {
	w := newWork()
	saved := &operation.Record{}
	p := &process{t: t, runner: operation.NewRunner(nil), op: w.op(3, true), saved: saved}
	if err := operation.Start(saved, "backup", "b1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := operation.Start(saved, "backup", "b2", time.Now()); !errors.Is(err, operation.ErrActive) {
		t.Errorf("a second Start: %v, want ErrActive", err)
	}
	if d := p.step(); d == 0 || p.rec.Phase != operation.Running || p.rec.Attempts != 1 {
		t.Fatalf("first step: %s attempt %d, next pass in %s; want Running attempt 1 and a next pass", p.rec.Phase, p.rec.Attempts, d)
	}
	if started, _ := w.counts(); started != 0 {
		t.Fatal("the attempt ran before it was written")
	}
	p.write()
	p.step()
	p.write()
	w.release <- nil
	// finished comes from inside Run, before the Runner records its end.
	if err := p.runner.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := p.step(); d != 0 || p.rec.Phase != operation.Succeeded || p.rec.EndTime == nil {
		t.Fatalf("after the run: %+v, next pass in %s; want Succeeded and no next pass", p.rec, d)
	}
	p.write()
	if started, effects := w.counts(); started != 1 || effects != 1 {
		t.Errorf("started %d, effects %d; want 1 and 1", started, effects)
	}
}

// drive runs passes, each written, until Step wants no more, releasing
// every run it launches.
func (p *process) drive(w *work) {
	p.t.Helper()
	for range 500 {
		select {
		case w.release <- nil:
		default:
		}
		d := p.step()
		p.write()
		if d == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	p.t.Fatalf("no end after 500 passes: %+v", p.rec)
}

// waitStarted waits for the n-th start of the operation's Run.
func waitStarted(t *testing.T, w *work, n int) {
	t.Helper()
	waitCount(t, "start", n, func() int { started, _ := w.counts(); return started })
}

// waitEffects waits for the n-th effect of the operation's Run.
func waitEffects(t *testing.T, w *work, n int) {
	t.Helper()
	waitCount(t, "take effect", n, func() int { _, effects := w.counts(); return effects })
}

func waitCount(t *testing.T, what string, n int, count func() int) {
	t.Helper()
	for range 1000 {
		if count() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("Run did not %s %d times", what, n)
}

// TestRestartAtEveryStep kills the operator at each point of an
// operation's life and checks that it ends Succeeded or Failed with a
// reason, never lost, and that an operation of MaxAttempts 1 never starts
// twice.
func TestRestartAtEveryStep(t *testing.T) {
	type outcome struct {
		Phase            operation.Phase
		Reason           string
		Started, Effects int
	}
	for _, tc := range []struct {
		name        string
		maxAttempts int32
		withDone    bool
		crashAt     string
		want        outcome
	}{
		{"while pending", 3, true, "pending", outcome{operation.Succeeded, "", 1, 1}},
		{"attempt recorded, not written", 1, true, "armed-unwritten", outcome{operation.Succeeded, "", 1, 1}},
		{"attempt written, not run", 3, true, "armed", outcome{operation.Succeeded, "", 1, 1}},
		{"attempt written, not run, once only", 1, true, "armed", outcome{operation.Failed, operation.ReasonInterrupted, 0, 0}},
		{"during the run", 3, true, "running", outcome{operation.Succeeded, "", 2, 1}},
		{"during the run, once only", 1, true, "running", outcome{operation.Failed, operation.ReasonInterrupted, 1, 0}},
		{"after the effect, Done knows", 3, true, "committed", outcome{operation.Succeeded, "", 1, 1}},
		{"after the effect, once only, Done knows", 1, true, "committed", outcome{operation.Succeeded, "", 1, 1}},
		{"after the effect, once only, no Done", 1, false, "committed", outcome{operation.Failed, operation.ReasonInterrupted, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWork()
			saved := &operation.Record{}
			p := &process{t: t, runner: operation.NewRunner(nil), op: w.op(tc.maxAttempts, tc.withDone), saved: saved}
			if err := operation.Start(saved, "backup", "b1", time.Now()); err != nil {
				t.Fatal(err)
			}
			switch tc.crashAt {
			case "pending":
				p = p.restart()
			case "armed-unwritten":
				p.step()
				p = p.restart()
			case "armed":
				p.step()
				p.write()
				p = p.restart()
			case "running", "committed":
				p.step()
				p.write()
				p.step()
				p.write()
				waitStarted(t, w, 1)
				if tc.crashAt == "committed" {
					// The channel is buffered: wait for the effect, or the
					// restart's cancel may win Run's select.
					w.release <- nil
					waitEffects(t, w, 1)
				}
				p = p.restart()
				<-w.finished
			}
			p.drive(w)
			started, effects := w.counts()
			if diff := cmp.Diff(tc.want, outcome{saved.Phase, saved.Reason, started, effects}); diff != "" {
				t.Errorf("outcome (-want +got):\n%s\nrecord %+v", diff, saved)
			}
			if saved.Phase == operation.Failed && saved.Message == "" {
				t.Errorf("Failed with no message: %+v", saved)
			}
		})
	}
}

// TestFailedRunIsRetriedThenFails: a failed run is attempted again up to
// MaxAttempts; a Permanent error ends it at once, with its reason.
func TestFailedRunIsRetriedThenFails(t *testing.T) {
	for _, tc := range []struct {
		maxAttempts int32
		errs        []error
		want        operation.Phase
		attempts    int32
		reason      string
	}{
		{3, []error{errors.New("disk full"), nil}, operation.Succeeded, 2, ""},
		{2, []error{errors.New("disk full"), errors.New("disk full")}, operation.Failed, 2, operation.ReasonFailed},
		{1, []error{errors.New("disk full")}, operation.Failed, 1, operation.ReasonFailed},
		{3, []error{operation.Permanent("Refused", errors.New("disk full"))}, operation.Failed, 1, "Refused"},
		{3, []error{fmt.Errorf("copying: %w", operation.Permanent("", errors.New("disk full")))}, operation.Failed, 1, operation.ReasonFailed},
	} {
		t.Run(fmt.Sprint(tc.maxAttempts, len(tc.errs), tc.reason), func(t *testing.T) {
			w := newWork()
			saved := &operation.Record{}
			p := &process{t: t, runner: operation.NewRunner(nil), op: w.op(tc.maxAttempts, true), saved: saved}
			if err := operation.Start(saved, "backup", "b1", time.Now()); err != nil {
				t.Fatal(err)
			}
			for _, err := range tc.errs {
				w.release <- err
			}
			for range 50 {
				if p.step() == 0 {
					p.write()
					break
				}
				p.write()
				time.Sleep(time.Millisecond)
			}
			if saved.Phase != tc.want || saved.Attempts != tc.attempts {
				t.Errorf("record %+v, want %s after %d attempts", saved, tc.want, tc.attempts)
			}
			if saved.Reason != tc.reason || (tc.want == operation.Failed && !strings.HasSuffix(saved.Message, "disk full")) {
				t.Errorf("reason %q message %q, want %q and the error", saved.Reason, saved.Message, tc.reason)
			}
		})
	}
}

// TestCancel: Cancel stops the run, and the next Step records the
// operation Failed with ReasonCanceled instead of running it again.
func TestCancel(t *testing.T) {
	w := newWork()
	saved := &operation.Record{}
	p := &process{t: t, runner: operation.NewRunner(nil), op: w.op(3, true), saved: saved}
	if err := operation.Start(saved, "backup", "b1", time.Now()); err != nil {
		t.Fatal(err)
	}
	p.step()
	p.write()
	p.step()
	p.write()
	waitStarted(t, w, 1)
	p.runner.Cancel(owner)
	<-w.finished
	if d := p.step(); d != 0 || p.rec.Phase != operation.Failed || p.rec.Reason != operation.ReasonCanceled {
		t.Errorf("after Cancel: %+v, next pass in %s; want Failed/%s", p.rec, d, operation.ReasonCanceled)
	}
	if started, effects := w.counts(); started != 1 || effects != 0 {
		t.Errorf("started %d, effects %d; want 1 and 0", started, effects)
	}
}

// TestTypesDoNotShareRuns: two operations of different types with one ID
// are two operations.
func TestTypesDoNotShareRuns(t *testing.T) {
	w := newWork()
	runner := operation.NewRunner(nil)
	backup, resize := w.op(1, false), w.op(1, false)
	resize.Type = "resize"
	a, b := &operation.Record{}, &operation.Record{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operation.Start(a, "backup", "b1", time.Now()))
	must(operation.Start(b, "resize", "b1", time.Now()))
	for _, step := range []func(){
		func() { runner.Step(t.Context(), owner, a, backup) }, // arm a
		func() { runner.Step(t.Context(), owner, a, backup) }, // launch a
		func() { runner.Step(t.Context(), owner, b, resize) }, // arm b
	} {
		step()
	}
	waitStarted(t, w, 1)
	w.release <- nil
	<-w.finished
	runner.Step(t.Context(), owner, b, resize) // launch b, not a's result
	if b.Phase != operation.Running {
		t.Errorf("resize record %+v took the backup's result", b)
	}
	waitStarted(t, w, 2)
	w.release <- nil
	if err := runner.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	runner.Step(t.Context(), owner, a, backup)
	runner.Step(t.Context(), owner, b, resize)
	if a.Phase != operation.Succeeded || b.Phase != operation.Succeeded {
		t.Errorf("records %+v and %+v, want both Succeeded", a, b)
	}
}

// TestRunningWithNoAttemptIsArmedFirst: a Running record with Attempts 0
// (written by hand) is not launched before an attempt is written.
func TestRunningWithNoAttemptIsArmedFirst(t *testing.T) {
	w := newWork()
	runner := operation.NewRunner(nil)
	r := &operation.Record{ID: "b1", Type: "backup", Phase: operation.Running}
	runner.Step(t.Context(), owner, r, w.op(1, true))
	if started, _ := w.counts(); started != 0 || r.Attempts != 1 {
		t.Errorf("started %d, attempts %d; want 0 started and attempt 1 recorded", started, r.Attempts)
	}
}

// TestStartWaitsForRuns: the manager's stop cancels the runs and waits
// for them to return.
func TestStartWaitsForRuns(t *testing.T) {
	w := newWork()
	runner := operation.NewRunner(nil)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		_ = runner.Start(ctx)
		close(stopped)
	}()
	r := &operation.Record{}
	if err := operation.Start(r, "backup", "b1", time.Now()); err != nil {
		t.Fatal(err)
	}
	op := w.op(1, true)
	runner.Step(t.Context(), owner, r, op)
	for range 100 { // Start may not have set its context yet
		runner.Step(t.Context(), owner, r, op)
		if started, _ := w.counts(); started > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	waitStarted(t, w, 1)
	cancel()
	<-stopped
	select {
	case <-w.finished:
	default:
		t.Error("Start returned before the run did")
	}
}

// TestWait: Wait returns once the run a Step launched has returned, and
// at once when none is going.
func TestWait(t *testing.T) {
	w := newWork()
	p := &process{t: t, runner: operation.NewRunner(nil), op: w.op(1, true), saved: &operation.Record{}}
	if err := p.runner.Wait(t.Context()); err != nil {
		t.Fatalf("Wait with no run: %v", err)
	}
	if err := operation.Start(p.saved, "backup", "b1", time.Now()); err != nil {
		t.Fatal(err)
	}
	p.step()
	p.write()
	p.step() // launches
	p.write()
	waitStarted(t, w, 1)
	short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := p.runner.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait during the run: %v, want the context's deadline", err)
	}
	w.release <- nil
	if err := p.runner.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, effects := w.counts(); effects != 1 {
		t.Errorf("Wait returned before the run's effect (%d)", effects)
	}
}

// TestCancelOperationLeavesTheOthers: cancelling one of an owner's
// operations ends its run alone.
func TestCancelOperationLeavesTheOthers(t *testing.T) {
	runner := operation.NewRunner(nil)
	ended := map[string]chan struct{}{"backup": make(chan struct{}), "resize": make(chan struct{})}
	recs := map[string]*operation.Record{}
	ops := map[string]operation.Operation{}
	for typ, ch := range ended {
		ops[typ] = operation.Operation{Type: typ, MaxAttempts: 1, Run: func(ctx context.Context, _ string, _ func(string)) error {
			<-ctx.Done()
			close(ch)
			return ctx.Err()
		}}
		recs[typ] = &operation.Record{}
		if err := operation.Start(recs[typ], typ, "x1", time.Now()); err != nil {
			t.Fatal(err)
		}
		runner.Step(t.Context(), owner, recs[typ], ops[typ]) // arm
		runner.Step(t.Context(), owner, recs[typ], ops[typ]) // launch
	}
	runner.CancelOperation(owner, "backup", "x1")
	select {
	case <-ended["backup"]:
	case <-time.After(5 * time.Second):
		t.Fatal("the canceled backup still runs 5 s on")
	}
	select {
	case <-ended["resize"]:
		t.Fatal("CancelOperation of the backup ended the resize too")
	case <-time.After(100 * time.Millisecond):
	}
	if d := runner.Step(t.Context(), owner, recs["resize"], ops["resize"]); d == 0 || recs["resize"].Phase != operation.Running {
		t.Errorf("the resize after the backup's cancel: %+v, next pass in %s; want it running", recs["resize"], d)
	}
	runner.Cancel(owner)
	<-ended["resize"]
}
