package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/guard/guardtest"
	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/webhook"
)

var (
	libSeed      = flag.Uint64("libcampaign.seed", 1, "the library campaign's seed")
	libSchedules = flag.Int("libcampaign.schedules", 16, "the library campaign's schedules")
	libSteps     = flag.Int("libcampaign.steps", 40, "steps per schedule of the library campaign")
)

// TestLibraryCampaign draws, per schedule, a Widget's life under a
// Reconciler running an operation per generation, with what the world
// does to it: foreign writers (another controller's condition and status
// field, labels, annotations), outages of its admission webhooks, a
// user's spec edits, stale reads of lagging caches (the Widget's and the
// ConfigMaps' apart, so that their events arrive in any order),
// conflicts, and operator crashes at any API call (the process and its
// runs gone, a new one started). After every step it checks:
//   - the other controller's condition and status field and the user's
//     labels are as they last wrote them, owned by them alone;
//   - an operation's effect ran at most once (once per recorded attempt
//     where it has no Done), and a recorded success stays as recorded;
//   - a webhook outage (failurePolicy Fail, nothing serving) never keeps
//     the finalizer on a deleted Widget;
//   - a Widget gone had its Finalize succeed first, and its guarded child
//     stayed until then, whatever deleted it (each propagation policy,
//     or its namespace, with the real garbage collector and namespace
//     controller).
//
// Then faults stop and the Widget must converge and delete.
//
// A failure names its schedule and prints its steps; -run
// 'TestLibraryCampaign/<n>$' -libcampaign.seed=<seed> replays it (the
// API server's and the runs' timing aside).
func TestLibraryCampaign(t *testing.T) {
	env.StartControllerManager(t)
	policy, binding := guard.Policy("library-campaign")
	guardtest.Install(t, env.Client, policy, binding)
	var steps, passes, effects, violations atomic.Int64
	var mu sync.Mutex
	faults := map[string]int{}
	start := time.Now()
	t.Cleanup(func() {
		fmt.Printf("library campaign: seed %d, %d schedules, %d steps, %d passes, %d operation effects, faults %v, %d violations in %s\n",
			*libSeed, *libSchedules, steps.Load(), passes.Load(), effects.Load(), faults, violations.Load(), time.Since(start).Round(time.Second))
	})
	for i := range *libSchedules {
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			t.Parallel()
			s := newLibSchedule(t, *libSeed, i)
			s.run(*libSteps)
			steps.Add(int64(s.steps))
			passes.Add(int64(s.passes))
			effects.Add(int64(s.ledger.total()))
			violations.Add(int64(len(s.violations)))
			mu.Lock()
			for k, n := range s.faults {
				faults[k] += n
			}
			mu.Unlock()
			if len(s.violations) > 0 {
				t.Errorf("seed %d schedule %d: %d violations:\n  %s\nsteps:\n  %s", *libSeed, i, len(s.violations),
					strings.Join(s.violations, "\n  "), strings.Join(s.log, "\n  "))
			}
		})
	}
}

// ledger is what the world saw the operation and Finalize do.
type ledger struct {
	mu        sync.Mutex
	effects   map[string]int // by operation ID
	finalized map[types.UID]bool
}

func (l *ledger) effect(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil { // the effect commits atomically, or not at all
		return ctx.Err()
	}
	l.effects[id]++
	return nil
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[id]
}

func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.effects {
		n += c
	}
	return n
}

// campaignHooks mirror a Widget into a ConfigMap and take one "backup"
// per generation, an operation whose effect lands in the ledger.
type campaignHooks struct {
	children *reconcile.Children
	guard    *guard.Guard
	runner   *operation.Runner
	ledger   *ledger
	delay    time.Duration
	// noDone leaves the operation without Done: it cannot tell whether
	// an interrupted attempt took effect.
	noDone bool
}

func (h *campaignHooks) op() operation.Operation {
	op := operation.Operation{Type: "backup", Poll: 5 * time.Millisecond,
		Run: func(ctx context.Context, id string, _ func(string)) error {
			select {
			case <-time.After(h.delay):
			case <-ctx.Done():
				return ctx.Err()
			}
			return h.ledger.effect(ctx, id)
		},
		Done: func(_ context.Context, id string) (bool, error) { return h.ledger.count(id) > 0, nil },
	}
	if h.noDone {
		op.Done = nil // an interrupted attempt runs again
	}
	return op
}

func (h *campaignHooks) Reconcile(ctx context.Context, w *testv1.Widget) reconcile.Result {
	g, err := h.guard.Ensure(ctx, w)
	if err != nil {
		return reconcile.Retry(err)
	}
	cm := guard.Hold(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-child", Namespace: w.Namespace},
		Data: map[string]string{"message": w.Spec.Message}}, g)
	if _, err := h.children.EnsureChild(ctx, w, cm); err != nil {
		return reconcile.Retry(err)
	}
	w.Status.Replicas = w.Spec.Replicas
	rec := &operation.Record{}
	if w.Status.Backup != nil {
		rec = w.Status.Backup.DeepCopy()
	}
	if id := fmt.Sprintf("gen-%d", w.Generation); !rec.Active() && rec.ID != id {
		if err := operation.Start(rec, "backup", id, time.Now()); err != nil {
			return reconcile.Retry(err)
		}
	}
	next := h.runner.Step(ctx, w, rec, h.op())
	w.Status.Backup = rec
	statusutil.MarkTrue(w, "Available", "ChildCreated", "")
	if next > 0 {
		return reconcile.RequeueAfter(next)
	}
	return reconcile.Done()
}

// Finalize does the final work (the ledger records it), then releases the
// guard: the child may go only after.
func (h *campaignHooks) Finalize(ctx context.Context, w *testv1.Widget) reconcile.Result {
	h.ledger.mu.Lock()
	h.ledger.finalized[w.UID] = true
	h.ledger.mu.Unlock()
	if err := h.guard.Release(ctx, w); err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.Done()
}

// errCrash is what every API call of a crashed operator process returns.
var errCrash = errors.New("campaign: the operator crashed")

// libProc is one operator process: a Reconciler, its Runner, and a
// client whose calls may crash it, conflict, or read a stale Widget.
type libProc struct {
	s       *libSchedule
	r       *reconcile.Reconciler[*testv1.Widget]
	runner  *operation.Runner
	stop    context.CancelFunc
	stopped chan struct{}

	mu       sync.Mutex
	calls    int
	crashAt  int // crash at this call (0: never)
	crashed  bool
	conflict float64                                // chance a write conflicts
	stale    float64                                // chance a read lags
	served   int                                    // the history index last served: a cache never goes back
	cms      map[client.ObjectKey]*corev1.ConfigMap // the ConfigMaps' cache: nil once read gone
	// labelMidPass is the user's label to write just before the next
	// status write of a pass ("": none).
	labelMidPass string
}

func (s *libSchedule) startProc() *libProc {
	// A new process's cache starts from a list: the current version.
	p := &libProc{s: s, stopped: make(chan struct{}), served: max(len(s.history)-1, 0), cms: map[client.ObjectKey]*corev1.ConfigMap{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if resp, err := p.fault(req); resp != nil || err != nil {
				return resp, err
			}
			return rt.RoundTrip(req)
		})
	}
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		s.t.Fatal(err)
	}
	c := interceptor.NewClient(base, interceptor.Funcs{Get: p.get})
	ch, err := reconcile.NewChildren(c, env.Scheme, reconcile.WithChildrenFieldOwner("opkit-widget"))
	if err != nil {
		s.t.Fatal(err)
	}
	g, err := guard.New(c, &testv1.Widget{})
	if err != nil {
		s.t.Fatal(err)
	}
	p.runner = operation.NewRunner(nil)
	hooks := &campaignHooks{children: ch, guard: g, runner: p.runner, ledger: s.ledger, delay: time.Duration(s.rd.IntN(20)) * time.Millisecond, noDone: s.noDone}
	if p.r, err = reconcile.New[*testv1.Widget](c, env.Scheme, hooks); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() {
		defer close(p.stopped)
		_ = p.runner.Start(ctx)
	}()
	return p
}

// kill stops p's runs, as the process's death would.
func (p *libProc) kill() {
	p.stop()
	<-p.stopped
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// fault crashes p at its crashAt call, and makes a write conflict at the
// odds p.conflict.
func (p *libProc) fault(req *http.Request) (*http.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.crashed || p.crashAt > 0 && p.calls >= p.crashAt {
		p.crashed = true
		return nil, errCrash
	}
	if team := p.labelMidPass; team != "" && req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/widgets/"+p.s.name+"/status") {
		// The user's write lands between the pass's read and its status
		// write; a lagging cache may serve its version next.
		p.labelMidPass = ""
		if w := p.s.label(team); w != nil {
			p.s.history = append(p.s.history, w.DeepCopy())
		}
	}
	if req.Method != http.MethodGet && p.conflict > 0 && p.s.chance(p.conflict) {
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"campaign: a conflict"}`
		return &http.Response{StatusCode: http.StatusConflict, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
	return nil, nil
}

// get serves a Widget from the history at the odds p.stale: any version
// from the last one p served on, as a lagging cache would.
func (p *libProc) get(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return p.getConfigMap(ctx, c, key, cm, opts...)
	}
	w, ok := obj.(*testv1.Widget)
	p.mu.Lock()
	stale := ok && p.stale > 0 && !p.crashed && p.s.chance(p.stale)
	var old *testv1.Widget
	if stale {
		h := p.s.history
		if i := p.served + p.s.intN(len(h)-p.served+1); i < len(h)-1 {
			old, p.served = h[i], i
		}
	}
	p.mu.Unlock()
	if old != nil {
		old.DeepCopyInto(w)
		return nil
	}
	if ok {
		p.mu.Lock()
		p.served = max(len(p.s.history)-1, 0)
		p.mu.Unlock()
	}
	return c.Get(ctx, key, obj, opts...)
}

// getConfigMap serves the child, the guard and its marker from a cache of
// their own that lags at the odds p.stale, apart from the Widget's: the
// events of two kinds arrive in any order. It serves the last version it
// read, or NotFound if it has read none yet.
func (p *libProc) getConfigMap(ctx context.Context, c client.WithWatch, key client.ObjectKey, cm *corev1.ConfigMap, opts ...client.GetOption) error {
	p.mu.Lock()
	stale := p.stale > 0 && !p.crashed && p.s.chance(p.stale)
	old, seen := p.cms[key]
	p.mu.Unlock()
	if stale {
		if !seen || old == nil {
			return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
		}
		old.DeepCopyInto(cm)
		return nil
	}
	err := c.Get(ctx, key, cm, opts...)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	if err == nil {
		p.cms[key] = cm.DeepCopy()
	} else {
		p.cms[key] = nil
	}
	p.mu.Unlock()
	return err
}

// libSchedule is one schedule: a Widget, its operator, the world.
type libSchedule struct {
	t    *testing.T
	ns   string
	name string

	rdMu sync.Mutex
	rd   *rand.Rand

	proc    *libProc
	ledger  *ledger
	history []*testv1.Widget // every version the campaign saw, oldest first
	uid     types.UID

	// What the foreign writers last wrote: another controller's
	// condition and status.note ("" removed), the user's labels.
	external *metav1.Condition
	note     *string
	labels   map[string]string
	// outage says the Widget's admission webhooks are configured and
	// down.
	outage bool
	// deleted is how the Widget was deleted ("": not yet); child the UID
	// of its child once seen.
	deleted metav1.DeletionPropagation
	child   types.UID

	// noDone is drawn per schedule: its operation has no Done.
	noDone bool
	// succeeded are the operations the API server recorded Succeeded.
	succeeded map[string]operation.Record

	steps, passes int
	faults        map[string]int
	log           []string
	violations    []string
}

func newLibSchedule(t *testing.T, seed uint64, i int) *libSchedule {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "campaign-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	s := &libSchedule{t: t, ns: ns.Name, name: "w", rd: rand.New(rand.NewPCG(seed, uint64(i))),
		ledger: &ledger{effects: map[string]int{}, finalized: map[types.UID]bool{}}, faults: map[string]int{},
		succeeded: map[string]operation.Record{}}
	s.noDone = s.rd.IntN(2) == 0
	s.proc = s.startProc()
	t.Cleanup(func() { s.proc.kill() })
	return s
}

func (s *libSchedule) chance(p float64) bool {
	s.rdMu.Lock()
	defer s.rdMu.Unlock()
	return s.rd.Float64() < p
}

func (s *libSchedule) intN(n int) int {
	s.rdMu.Lock()
	defer s.rdMu.Unlock()
	return s.rd.IntN(n)
}

func (s *libSchedule) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%3d ", s.steps)+fmt.Sprintf(format, args...))
}

func (s *libSchedule) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf("step %d: ", s.steps)+fmt.Sprintf(format, args...))
}

func (s *libSchedule) key() client.ObjectKey { return client.ObjectKey{Namespace: s.ns, Name: s.name} }

func (s *libSchedule) run(steps int) {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}, Spec: testv1.WidgetSpec{Replicas: 1, Message: "m0"}}
	if err := env.Client.Create(s.t.Context(), w); err != nil {
		s.t.Fatal(err)
	}
	s.uid = w.UID
	s.observe()
	for s.steps = 1; s.steps <= steps && len(s.violations) == 0; s.steps++ {
		s.step()
		gone := s.observe() == nil
		s.check()
		if gone {
			break
		}
	}
	if len(s.violations) > 0 {
		return
	}
	if s.deleted == "" {
		s.converge()
		if len(s.violations) > 0 {
			return
		}
		s.delete()
	}
	s.untilGone()
}

// step draws what happens next.
func (s *libSchedule) step() {
	ctx := s.t.Context()
	switch n := s.intN(100); {
	case n < 42:
		s.pass()
	case n < 45:
		s.webhookOutage(!s.outage)
	case n < 55:
		s.fault("spec")
		w := &testv1.Widget{}
		if err := env.Client.Get(ctx, s.key(), w); err != nil {
			s.wrote(err)
			return
		}
		w.Spec.Message = fmt.Sprintf("m%d", s.steps)
		w.Spec.Replicas = int32(s.intN(5))
		s.logf("user: spec message %s replicas %d", w.Spec.Message, w.Spec.Replicas)
		err := env.Client.Update(ctx, w)
		switch {
		case s.faults["webhook outage"] > 0 && apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook"):
			// The API server drops a deleted configuration a moment later.
			s.logf("user: the spec edit refused: the webhooks are down")
		case !apierrors.IsConflict(err):
			s.wrote(err)
		}
	case n < 63:
		s.fault("foreign condition")
		status := []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}[s.intN(3)]
		msg := fmt.Sprintf("written at step %d", s.steps)
		s.logf("other controller: External %s %q", status, msg)
		s.external = &metav1.Condition{Type: "External", Status: status, Message: msg}
		s.applyForeign()
	case n < 66:
		s.fault("foreign status field")
		note := []string{"", fmt.Sprintf("n%d", s.steps)}[s.intN(2)]
		s.logf("other controller: status.note %q", note)
		s.note = &note
		s.applyForeign()
	case n < 70:
		s.fault("foreign labels")
		team := fmt.Sprintf("t%d", s.steps)
		if s.intN(2) == 0 {
			s.logf("user: label team=%s", team)
			s.label(team)
			break
		}
		// Between the next pass's read and its status write.
		s.logf("user: label team=%s during the next pass", team)
		s.proc.mu.Lock()
		s.proc.labelMidPass = team
		s.proc.mu.Unlock()
	case n < 78:
		s.fault("crash")
		s.proc.mu.Lock()
		s.proc.crashAt = s.proc.calls + 1 + s.rd.IntN(8)
		s.logf("operator: crashes at its API call %d (%d made)", s.proc.crashAt, s.proc.calls)
		s.proc.mu.Unlock()
	case n < 86:
		s.fault("stale reads")
		s.proc.mu.Lock()
		s.proc.stale = []float64{0, 0.3, 0.7}[s.rd.IntN(3)]
		s.logf("caches (Widget, ConfigMaps apart): lag at odds %.1f", s.proc.stale)
		s.proc.mu.Unlock()
	case n < 92:
		s.fault("conflicts")
		s.proc.mu.Lock()
		s.proc.conflict = []float64{0, 0.2, 0.5}[s.rd.IntN(3)]
		s.logf("API server: writes conflict at odds %.1f", s.proc.conflict)
		s.proc.mu.Unlock()
	case n < 95 && s.deleted == "" && s.steps > 5:
		s.delete()
	default:
		d := time.Duration(s.intN(30)) * time.Millisecond
		s.logf("time: %s passes", d)
		time.Sleep(d)
	}
}

func (s *libSchedule) fault(kind string) { s.faults[kind]++ }

// ownsStatusField says whether e owns status.<field>.
func ownsStatusField(e metav1.ManagedFieldsEntry, field string) bool {
	if e.FieldsV1 == nil {
		return false
	}
	var fields struct {
		Status map[string]any `json:"f:status"`
	}
	if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields); err != nil {
		return false
	}
	_, ok := fields.Status["f:"+field]
	return ok
}

// label writes the user's label team=team (and an annotation), and
// returns the Widget it made, nil if it is gone.
func (s *libSchedule) label(team string) *testv1.Widget {
	w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"team":%q},"annotations":{"note":%q}}}`, team, team)
	err := env.Client.Patch(s.t.Context(), w, client.RawPatch(types.MergePatchType, []byte(patch)))
	s.wrote(err)
	s.labels = map[string]string{"team": team}
	if err != nil {
		return nil
	}
	return w
}

// applyForeign applies what the other controller owns of the Widget's
// status: its condition and status.note. A field it leaves out of its
// apply is removed, as server-side apply removes what its sole owner
// stops applying.
func (s *libSchedule) applyForeign() {
	status := map[string]any{}
	if c := s.external; c != nil {
		status["conditions"] = []any{map[string]any{
			"type": c.Type, "status": string(c.Status), "reason": "OtherController", "message": c.Message,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}
	}
	if s.note != nil && *s.note != "" {
		status["note"] = *s.note
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetGroupVersionKind(testv1.GroupVersion.WithKind("Widget"))
	u.SetNamespace(s.ns)
	u.SetName(s.name)
	s.wrote(env.Client.Status().Apply(s.t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("other-controller"), client.ForceOwnership))
}

// wrote fails the test on a foreign writer's error, but for a Widget
// deleted meanwhile: one the operator never passed goes at once.
func (s *libSchedule) wrote(err error) {
	switch {
	case err == nil:
	case s.deleted != "" && apierrors.IsNotFound(err):
		s.logf("the Widget is gone")
	default:
		s.t.Fatal(err)
	}
}

// pass runs a pass, and restarts a crashed operator.
func (s *libSchedule) pass() {
	s.passes++
	res, err := s.proc.r.Reconcile(s.t.Context(), crreconcile.Request{NamespacedName: s.key()})
	s.proc.mu.Lock()
	crashed := s.proc.crashed
	s.proc.mu.Unlock()
	switch {
	case crashed:
		s.logf("pass: crashed; operator restarted")
		s.proc.kill()
		s.proc = s.startProc()
	case err != nil:
		s.logf("pass: %v", err)
	default:
		s.logf("pass: %+v", res)
	}
}

// observe adds the Widget's current version to the history.
func (s *libSchedule) observe() *testv1.Widget {
	w := &testv1.Widget{}
	err := env.Client.Get(s.t.Context(), s.key(), w)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.proc.mu.Lock()
	if n := len(s.history); n == 0 || s.history[n-1].ResourceVersion != w.ResourceVersion {
		s.history = append(s.history, w.DeepCopy())
	}
	s.proc.mu.Unlock()
	return w
}

// hadFinalizer says whether the campaign saw the operator's finalizer on
// the Widget: one deleted before any pass goes at once, as it should.
func (s *libSchedule) hadFinalizer() bool {
	s.proc.mu.Lock()
	defer s.proc.mu.Unlock()
	for _, w := range s.history {
		for _, f := range w.Finalizers {
			if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
				return true
			}
		}
	}
	return false
}

// check checks the invariants against the API server's Widget.
func (s *libSchedule) check() {
	s.checkChild()
	w := &testv1.Widget{}
	err := env.Client.Get(s.t.Context(), s.key(), w)
	if apierrors.IsNotFound(err) {
		s.ledger.mu.Lock()
		finalized := s.ledger.finalized[s.uid]
		s.ledger.mu.Unlock()
		if !finalized && s.hadFinalizer() {
			s.violate("the Widget is gone without its Finalize")
		}
		return
	}
	if err != nil {
		s.t.Fatal(err)
	}
	if s.external != nil {
		got := statusutil.Get(w, "External")
		if got == nil || got.Status != s.external.Status || got.Message != s.external.Message {
			s.violate("the other controller's condition is %+v, want %s %q as it last wrote", got, s.external.Status, s.external.Message)
		}
		for _, e := range w.ManagedFields {
			if e.Manager != "other-controller" && e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.GetRawBytes()), `{\"type\":\"External\"}`) {
				s.violate("%s owns the other controller's condition", e.Manager)
			}
		}
	}
	if s.note != nil {
		if w.Status.Note != *s.note {
			s.violate("status.note is %q, want %q as the other controller last wrote", w.Status.Note, *s.note)
		}
		for _, e := range w.ManagedFields {
			if e.Manager != "other-controller" && ownsStatusField(e, "note") {
				s.violate("%s owns the other controller's status.note", e.Manager)
			}
		}
	}
	for k, v := range s.labels {
		if w.Labels[k] != v {
			s.violate("label %s is %q, want %q as the user last wrote", k, w.Labels[k], v)
		}
	}
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	for id, n := range s.ledger.effects {
		// Without Done an attempt a crash interrupted runs again: its
		// effect is once per attempt (checked below).
		if n > 1 && !s.noDone {
			s.violate("operation %s took effect %d times", id, n)
		}
	}
	if rec := w.Status.Backup; rec != nil && rec.ID != "" {
		if n := s.ledger.effects[rec.ID]; n > int(rec.Attempts) {
			s.violate("operation %s took effect %d times, %d attempts recorded", rec.ID, n, rec.Attempts)
		}
		if won, ok := s.succeeded[rec.ID]; ok && (rec.Phase != operation.Succeeded || rec.Attempts != won.Attempts) {
			s.violate("operation %s recorded Succeeded at attempt %d, now %s at attempt %d", rec.ID, won.Attempts, rec.Phase, rec.Attempts)
		}
		if _, ok := s.succeeded[rec.ID]; !ok && rec.Phase == operation.Succeeded {
			s.succeeded[rec.ID] = *rec
		}
	}
}

// checkChild checks that the guarded child, once made, stays until the
// Widget's Finalize did its work.
func (s *libSchedule) checkChild() {
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(s.t.Context(), client.ObjectKey{Namespace: s.ns, Name: s.name + "-child"}, cm)
	if client.IgnoreNotFound(err) != nil {
		s.t.Fatal(err)
	}
	s.ledger.mu.Lock()
	finalized := s.ledger.finalized[s.uid]
	s.ledger.mu.Unlock()
	switch {
	case err == nil && s.child == "":
		s.child = cm.UID
	case s.child == "" || finalized:
	case err != nil || cm.UID != s.child:
		s.violate("the guarded child is gone (%s deletion) before the Widget's Finalize", s.deleted)
	case cm.DeletionTimestamp != nil:
		s.violate("the guarded child is being deleted (%s deletion) before the Widget's Finalize", s.deleted)
	}
}

// converge stops the faults and runs passes until the Widget is done at
// its generation: Available, its child current, the generation's
// operation succeeded.
func (s *libSchedule) converge() {
	s.stopFaults()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.pass()
		w := s.observe()
		s.check()
		if len(s.violations) > 0 {
			return
		}
		if s.done(w) {
			return
		}
		if time.Now().After(deadline) {
			s.violate("no convergence within 20 s of the faults' end: status %+v", w.Status)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *libSchedule) done(w *testv1.Widget) bool {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(s.t.Context(), client.ObjectKey{Namespace: s.ns, Name: s.name + "-child"}, cm); err != nil {
		return false
	}
	rec := w.Status.Backup
	return w.Status.ObservedGeneration == w.Generation && statusutil.IsTrue(w, "Available") &&
		cm.Data["message"] == w.Spec.Message && rec != nil && rec.ID == fmt.Sprintf("gen-%d", w.Generation) &&
		rec.Phase == operation.Succeeded
}

// webhookOutage starts or ends an outage of the Widget's admission
// webhooks: while one lasts, a mutating and a validating webhook with
// failurePolicy Fail and webhook.MatchConditions call an address nobody
// serves. The outage is configured for the schedule's namespace alone;
// the faults' end leaves it as it is, so that a deletion meets it too.
func (s *libSchedule) webhookOutage(on bool) {
	s.fault("webhook outage")
	s.outage = on
	ctx := s.t.Context()
	name := "campaign-" + s.ns
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if !on {
		s.logf("webhooks: serve again")
		for _, o := range []client.Object{mutating, validating} {
			if err := env.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				s.t.Fatal(err)
			}
		}
		return
	}
	s.logf("webhooks: down")
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	url := "https://127.0.0.1:1/admit" // port 1: nothing serves it
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{testv1.GroupVersion.Group}, APIVersions: []string{testv1.GroupVersion.Version}, Resources: []string{"widgets"}},
	}}
	scope := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: s.ns}}
	mutating.Webhooks = []admissionregistrationv1.MutatingWebhook{{
		Name: "mwidget.campaign.opkit.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: scope,
		MatchConditions: webhook.MatchConditions(),
	}}
	validating.Webhooks = []admissionregistrationv1.ValidatingWebhook{{
		Name: "vwidget.campaign.opkit.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}, Rules: rules,
		FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: scope,
		MatchConditions: webhook.MatchConditions(),
	}}
	for _, o := range []client.Object{mutating, validating} {
		if err := env.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
}

// deletedNamespace is the deletion of the Widget's namespace: the
// namespace controller deletes every object in it directly.
const deletedNamespace metav1.DeletionPropagation = "Namespace"

// delete deletes the Widget with a propagation policy it draws, or its
// namespace.
func (s *libSchedule) delete() {
	policies := []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan, deletedNamespace}
	s.deleted = policies[s.intN(len(policies))]
	s.fault("delete " + string(s.deleted))
	var err error
	if s.deleted == deletedNamespace {
		err = env.Client.Delete(s.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})
	} else {
		err = env.Client.Delete(s.t.Context(), &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}}, client.PropagationPolicy(s.deleted))
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.logf("user: deleted (%s)", s.deleted)
}

// untilGone stops the faults, runs passes until the Widget is gone, and
// checks what its deletion left: nothing of it, or under Orphan its child
// without owners.
func (s *libSchedule) untilGone() {
	s.stopFaults()
	deadline := time.Now().Add(20 * time.Second)
	for s.observe() != nil {
		if time.Now().After(deadline) {
			s.violate("the Widget is not gone within 20 s of its deletion and the faults' end")
			return
		}
		s.pass()
		if s.checkChild(); len(s.violations) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.check()
	if len(s.violations) > 0 {
		return
	}
	// What the Collector does for a guard a pass on a stale read made
	// after the Widget went.
	g, err := guard.New(env.Client, &testv1.Widget{})
	if err != nil {
		s.t.Fatal(err)
	}
	collector, err := guard.NewCollector(g, env.Client)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, name := range []string{guard.Name(&testv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: s.name}}), s.name + "-guard-cascade"} {
		if _, err := collector.Reconcile(s.t.Context(), crreconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.ns, Name: name}}); err != nil {
			s.t.Fatal(err)
		}
	}
	var left []string
	// The namespace controller retries a namespace with a growing delay.
	settle := 30 * time.Second
	if s.deleted == deletedNamespace {
		settle = 90 * time.Second
	}
	for end := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
		left = s.left()
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			s.violate("the %s deletion is not settled after %s: %s", s.deleted, settle, strings.Join(left, ", "))
			return
		}
	}
}

// stopFaults ends crashes, stale reads and conflicts, restarting a
// crashed operator.
func (s *libSchedule) stopFaults() {
	s.proc.mu.Lock()
	s.proc.crashAt, s.proc.stale, s.proc.conflict = 0, 0, 0
	crashed := s.proc.crashed
	s.proc.mu.Unlock()
	if crashed {
		s.proc.kill()
		s.proc = s.startProc()
	}
	s.logf("faults stop")
}

// left is what the Widget's deletion has yet to settle: its guard, its
// marker, its child (under Orphan: the child gone or still owned), and
// under a namespace deletion the namespace.
func (s *libSchedule) left() []string {
	if s.deleted == deletedNamespace {
		ns := &corev1.Namespace{}
		err := env.Client.Get(s.t.Context(), client.ObjectKey{Name: s.ns}, ns)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			s.t.Fatal(err)
		}
		return []string{fmt.Sprintf("namespace %s %s: %v", s.ns, ns.Status.Phase, ns.Status.Conditions)}
	}
	var cms corev1.ConfigMapList
	if err := env.Client.List(s.t.Context(), &cms, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	var left []string
	kept := false
	for _, cm := range cms.Items {
		if cm.Name == s.name+"-child" && s.deleted == metav1.DeletePropagationOrphan && cm.DeletionTimestamp == nil {
			kept = true
			if len(cm.OwnerReferences) > 0 {
				left = append(left, fmt.Sprintf("the orphaned child owned by %v", cm.OwnerReferences))
			}
			continue
		}
		if strings.HasPrefix(cm.Name, s.name+"-") {
			left = append(left, fmt.Sprintf("ConfigMap %s (finalizers %q, owners %d)", cm.Name, cm.Finalizers, len(cm.OwnerReferences)))
		}
	}
	if s.deleted == metav1.DeletePropagationOrphan && !kept && s.child != "" {
		left = append(left, "the orphaned child deleted")
	}
	return left
}
