package incluster

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// nextTag is the tag of the second build of each operator (make images
// builds both): the in-place upgrade rolls the operator from its dev image
// to this one.
const nextTag = "next"

// workload is what an operator manages for one custom resource: the
// children it controls (every kind it creates, found by their controller
// reference) and the pods that run the workload.
type workload struct {
	ns    string
	owner types.UID
	// pods selects the workload's pods.
	pods string
}

// workloadState is what must not change when the operator is upgraded:
// each child's resourceVersion and each pod's UID and restarts.
type workloadState struct {
	Children map[string]string // kind/name -> resourceVersion
	Pods     map[string]podState
}

type podState struct {
	UID      types.UID
	Restarts int32
}

// childKinds are the kinds the example operators create.
const childKinds = "deployments,statefulsets,services,pods,persistentvolumeclaims,configmaps,secrets,poddisruptionbudgets"

func observeWorkload(ctx context.Context, t *testing.T, cfg *envconf.Config, w workload) workloadState {
	t.Helper()
	out, err := harness.Kubectl(ctx, cfg, "get", childKinds, "-n", w.ns, "-o", "json")
	if err != nil {
		t.Fatalf("listing children: %v\n%s", err, out)
	}
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatal(err)
	}
	s := workloadState{Children: map[string]string{}, Pods: map[string]podState{}}
	for _, o := range list.Items {
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == w.owner && ptr.Deref(ref.Controller, false) {
				s.Children[o.GetKind()+"/"+o.GetName()] = o.GetResourceVersion()
			}
		}
	}
	var pods corev1.PodList
	if err := cfg.Client().Resources(w.ns).List(ctx, &pods, resources.WithLabelSelector(w.pods)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		var restarts int32
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		s.Pods[p.Name] = podState{UID: p.UID, Restarts: restarts}
	}
	if len(s.Children) == 0 || len(s.Pods) == 0 {
		t.Fatalf("no children or pods found: %+v", s)
	}
	return s
}

// leaseWatch records the holders of a leader-election Lease in turn, with
// the last renewal seen of each.
type leaseWatch struct {
	stopPolling func()

	mu       sync.Mutex
	duration time.Duration
	terms    []leaseTerm
}

// leaseTerm is one holder's time as leader, as far as polling saw it.
type leaseTerm struct {
	pod               string
	acquire, lastSeen time.Time
}

func watchLease(ctx context.Context, cfg *envconf.Config, ns, name string) *leaseWatch {
	w := &leaseWatch{}
	w.stopPolling = poll(ctx, leasePoll, func(ctx context.Context) {
		var l coordinationv1.Lease
		if err := cfg.Client().Resources().Get(ctx, name, ns, &l); err == nil {
			w.record(&l)
		}
	})
	return w
}

func (w *leaseWatch) record(l *coordinationv1.Lease) {
	pod := holderPod(l)
	if pod == "" || l.Spec.RenewTime == nil || l.Spec.AcquireTime == nil {
		return // released, between two holders
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.duration = time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	if n := len(w.terms); n > 0 && w.terms[n-1].pod == pod {
		w.terms[n-1].lastSeen = l.Spec.RenewTime.Time
		return
	}
	w.terms = append(w.terms, leaseTerm{pod: pod, acquire: l.Spec.AcquireTime.Time, lastSeen: l.Spec.RenewTime.Time})
}

func (w *leaseWatch) current() (leaseTerm, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.terms) == 0 {
		return leaseTerm{}, false
	}
	return w.terms[len(w.terms)-1], true
}

func (w *leaseWatch) stop() (terms []leaseTerm, duration time.Duration) {
	w.stopPolling()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terms, w.duration
}

// nextImg is the image of the operator's next build, which
// upgradeInPlace moves it to.
func (o operator) nextImg() string { return o.next }

// upgradeInPlace is the step that upgrades the operator as a user does,
// make deploy (or helm upgrade) with the image of the next build, while the workload of
// owner runs: the Deployment rolls to the new image, each new leader takes
// over within the lease's duration of the last renewal of the one before,
// the new version logs its version, and after its first passes nothing it
// manages was written or restarted.
func (o operator) upgradeInPlace(lease string, owner func(ctx context.Context, t *testing.T, cfg *envconf.Config) workload) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		operatorDisruption.Lock()
		defer operatorDisruption.Unlock()
		w := owner(ctx, t, cfg)
		before := observeWorkload(ctx, t, cfg, w)
		next := o
		next.img = o.nextImg()
		leases := watchLease(ctx, cfg, o.namespace, lease)
		defer leases.stop()
		// The old pods' logs, for a failure message after they are gone.
		oldLogs := followLogs(ctx, cfg, o.namespace, o.podSelector())
		defer oldLogs.stop()
		harness.WaitFor(ctx, t, "the current leader", time.Minute, 200*time.Millisecond, func(context.Context) (bool, string) {
			_, ok := leases.current()
			return ok, "no holder yet"
		})
		if out, err := next.install(ctx, cfg, true); err != nil {
			t.Fatalf("%s: moving the operator to %s: %v\n%s", o.how(), next.img, err, out)
		}
		if out, err := harness.Kubectl(ctx, cfg, "rollout", "status", "deployment/"+o.deployment(), "-n", o.namespace, "--timeout=3m"); err != nil {
			t.Fatalf("rolling the operator to %s: %v\n%s\npods: %s", next.img, err, out, harness.DescribePods(ctx, cfg, o.namespace))
		}
		var leader string
		harness.WaitFor(ctx, t, "a leader running "+next.img, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
			term, ok := leases.current()
			if !ok {
				return false, "no holder"
			}
			var p corev1.Pod
			if err := cfg.Client().Resources().Get(ctx, term.pod, o.namespace, &p); err != nil {
				return false, err.Error()
			}
			leader = p.Name
			return p.Spec.Containers[0].Image == next.img, p.Name + " runs " + p.Spec.Containers[0].Image
		})
		// Its first passes run as soon as it leads: give them time.
		time.Sleep(15 * time.Second)
		terms, duration := leases.stop()
		oldLogs.stop()
		if len(terms) < 2 {
			t.Fatalf("lease holders seen: %+v; want the old leader and a new one", terms)
		}
		for i := 1; i < len(terms); i++ {
			gap, prev := terms[i].acquire.Sub(terms[i-1].lastSeen), terms[i-1].pod
			switch {
			case gap <= duration:
				t.Logf("%s took the lease %s after the last renewal seen of %s (lease duration %s)", terms[i].pod, gap.Round(time.Millisecond), prev, duration)
			case gap <= duration+maxLeaseRetry+leasePoll && cutShortAcquire(oldLogs.lines(prev)):
				t.Logf("%s took the lease %s after the last renewal seen of %s, which expired: %[3]s was stopped in the middle of taking it and never learnt that it held it (its log: a cancelled lease update and no %q)",
					terms[i].pod, gap.Round(time.Millisecond), prev, acquiredLease)
			default:
				t.Errorf("%s took the lease %s after the last renewal of %s, more than the lease duration %s: %[3]s did not release it; the end of its log:\n%[5]s",
					terms[i].pod, gap, prev, duration, strings.Join(lastN(oldLogs.lines(prev), 40), "\n"))
			}
		}
		logs, err := harness.Kubectl(ctx, cfg, "logs", "-n", o.namespace, leader)
		if err != nil {
			t.Fatal(err)
		}
		if start := firstMatch(logs, `"msg":"starting"`); !strings.Contains(start, `"version":"`+nextTag+`"`) {
			t.Errorf("the new leader %s does not log version %s at start:\n%s\nlog head:\n%.3000s", leader, nextTag, start, logs)
		}
		if diff := cmp.Diff(before, observeWorkload(ctx, t, cfg, w)); diff != "" {
			t.Errorf("the upgrade wrote children or restarted pods (-before +after):\n%s", diff)
		}
		return ctx
	}
}

// How a candidate takes a leader-election lease (client-go's
// leaderelection, as controller-runtime runs it): it tries every
// RetryPeriod, controller-runtime's default of 2s that both operators
// keep, plus up to JitterFactor times that; the test polls the Lease
// every leasePoll.
const (
	maxLeaseRetry = time.Duration(2 * (1 + leaderelection.JitterFactor) * float64(time.Second))
	leasePoll     = 200 * time.Millisecond
	acquiredLease = "Successfully acquired lease"
)

// cutShortAcquire tells from a pod's log the one way a pod that releases
// its lease on shutdown (LeaderElectionReleaseOnCancel) leaves it to
// expire instead: its shutdown cancelled a lease update that the API
// server had applied all the same, so the pod never learnt that it held
// the lease and had nothing to release. Its log then holds the cancelled
// update and never the line of a lease taken.
func cutShortAcquire(log []string) bool {
	cancelled := false
	for _, l := range log {
		if strings.Contains(l, acquiredLease) {
			return false
		}
		cancelled = cancelled || (strings.Contains(l, "Failed to update lock") && strings.Contains(l, "context canceled"))
	}
	return cancelled
}

// holderPod is the pod holding a leader-election Lease, "" when none:
// controller-runtime's identity is <hostname>_<uuid>, and a pod's hostname
// is its name.
func holderPod(l *coordinationv1.Lease) string {
	pod, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
	return pod
}

// firstMatch is the first line of s containing sub.
func firstMatch(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return fmt.Sprintf("(no line with %s)", sub)
}

// podLogs follows the logs of the pods a label selector matches when it
// starts (kubectl logs -f), so that the log of a pod deleted meanwhile is
// still at hand for a failure message.
type podLogs struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	out bytes.Buffer
}

func followLogs(ctx context.Context, cfg *envconf.Config, ns, selector string) *podLogs {
	ctx, cancel := context.WithCancel(ctx)
	l := &podLogs{cancel: cancel, done: make(chan struct{})}
	cmd, err := harness.KubectlCommand(ctx, cfg, "logs", "-f", "-n", ns, "-l", selector, "--prefix", "--tail=-1", "--max-log-requests=10")
	if err == nil {
		cmd.Stdout, cmd.Stderr = l, l
		err = cmd.Start()
	}
	if err != nil {
		_, _ = fmt.Fprintf(l, "following the logs: %v\n", err)
		close(l.done)
		return l
	}
	go func() {
		_ = cmd.Wait()
		close(l.done)
	}()
	return l
}

// Write takes kubectl's output.
func (l *podLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.Write(p)
}

// stop ends following; it may be called more than once.
func (l *podLogs) stop() {
	l.cancel()
	<-l.done
}

// lines are the lines of pod's log followed so far, and what kubectl
// itself reported.
func (l *podLogs) lines(pod string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(l.out.String(), "\n") {
		if strings.HasPrefix(line, "[pod/"+pod+"/") || (line != "" && !strings.HasPrefix(line, "[pod/")) {
			out = append(out, line)
		}
	}
	return out
}

// lastN is the last n of lines.
func lastN(lines []string, n int) []string {
	return lines[max(0, len(lines)-n):]
}
