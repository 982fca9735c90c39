package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/portforward"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/opkit-dev/opkit/internal/testkit"
)

func TestParsePodURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		endpoint string
		want     PodPort
		ok       bool
	}{
		{"http://db-0.db.team-a.svc:2379", PodPort{Namespace: "team-a", Pod: "db-0", Port: 2379}, true},
		{"http://db-0.db.team-a.svc.cluster.local:2379", PodPort{Namespace: "team-a", Pod: "db-0", Port: 2379}, true},
		{"https://db-1.db.ns.svc:12379", PodPort{Namespace: "ns", Pod: "db-1", Port: 12379}, true},
		{"http://db-0.db.team-a.svc", PodPort{}, false},
		{"http://127.0.0.1:2379", PodPort{}, false},
		{"http://db-0.team-a.svc:2379", PodPort{}, false},
		{"http://db-0..team-a.svc:2379", PodPort{}, false},
		{"http://db-0.db.team-a.cluster:2379", PodPort{}, false},
		{"::not a url", PodPort{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePodURL(tt.endpoint)
			if tt.ok != (err == nil) {
				t.Fatalf("ParsePodURL(%q) error = %v, want ok %v", tt.endpoint, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrNotPodURL) {
				t.Errorf("ParsePodURL(%q) error = %v, want it to wrap ErrNotPodURL", tt.endpoint, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePodURL(%q) (-want +got):\n%s", tt.endpoint, diff)
			}
		})
	}
}

// fakeForwards is an openFunc standing in for the API server: each forward
// listens on a loopback port (and closes what it accepts) until its
// context ends or the test ends it.
type fakeForwards struct {
	mu     sync.Mutex
	opened []PodPort
	last   map[PodPort]*fakeForward
	// fail makes the next opens of a target fail before they are ready.
	fail map[PodPort]error
	// hang makes opens of a target never become ready.
	hang map[PodPort]bool
}

type fakeForward struct {
	addr    string
	end     chan error
	stopped chan struct{}
}

func newFakeForwards() *fakeForwards {
	return &fakeForwards{last: map[PodPort]*fakeForward{}, fail: map[PodPort]error{}, hang: map[PodPort]bool{}}
}

func (ff *fakeForwards) open(ctx context.Context, t PodPort, ready func(string)) error {
	ff.mu.Lock()
	ff.opened = append(ff.opened, t)
	failErr, hang := ff.fail[t], ff.hang[t]
	ff.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	if hang {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { _ = ln.Close() }()
	fw := &fakeForward{addr: ln.Addr().String(), end: make(chan error, 1), stopped: make(chan struct{})}
	defer close(fw.stopped)
	ff.mu.Lock()
	ff.last[t] = fw
	ff.mu.Unlock()
	ready(fw.addr)
	select {
	case <-ctx.Done():
		return nil
	case err := <-fw.end:
		return err
	}
}

func (ff *fakeForwards) openCount() int {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return len(ff.opened)
}

func (ff *fakeForwards) forward(t *testing.T, target PodPort) *fakeForward {
	t.Helper()
	ff.mu.Lock()
	defer ff.mu.Unlock()
	fw := ff.last[target]
	if fw == nil {
		t.Fatalf("no forward to %s was opened", target)
	}
	return fw
}

// waitStopped fails t unless fw's open has returned within a second.
func (fw *fakeForward) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case <-fw.stopped:
	case <-time.After(time.Second):
		t.Fatalf("the forward at %s is still open", fw.addr)
	}
}

func (fw *fakeForward) isStopped() bool {
	select {
	case <-fw.stopped:
		return true
	default:
		return false
	}
}

// stubClient is the inner client: Status answers with the endpoint it was
// asked, every other call fails with err.
type stubClient struct {
	endpoints []string
	err       error
}

func (s *stubClient) MemberList(context.Context) ([]Member, error) { return nil, s.err }
func (s *stubClient) MemberAddAsLearner(context.Context, string) (Member, []Member, error) {
	return Member{}, nil, s.err
}
func (s *stubClient) MemberPromote(context.Context, uint64) error { return s.err }
func (s *stubClient) MemberRemove(context.Context, uint64) error  { return s.err }
func (s *stubClient) Status(_ context.Context, endpoint string) (Status, error) {
	return Status{Version: endpoint}, nil
}
func (s *stubClient) Snapshot(context.Context, io.Writer) (SnapshotInfo, error) {
	return SnapshotInfo{}, s.err
}
func (s *stubClient) Put(context.Context, []KeyValue) error    { return s.err }
func (s *stubClient) Defragment(context.Context, string) error { return s.err }
func (s *stubClient) MoveLeader(context.Context, uint64) error { return s.err }
func (s *stubClient) Revision(context.Context) (int64, error)  { return 0, s.err }
func (s *stubClient) Close() error                             { return nil }
func (s *stubClient) Alarms(context.Context) ([]Alarm, error)  { return nil, s.err }
func (s *stubClient) Disarm(context.Context, Alarm) error      { return s.err }
func (s *stubClient) Compact(context.Context, int64) error     { return s.err }

var errStub = errors.New("stub: context deadline exceeded")

// stubFactory records the endpoints of every inner client.
type stubFactory struct {
	mu      sync.Mutex
	got     [][]string
	gotDial []DialOptions
}

func (s *stubFactory) New(_ context.Context, endpoints []string, opts ...DialOption) (Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, endpoints)
	s.gotDial = append(s.gotDial, Dial(opts...))
	return &stubClient{endpoints: endpoints, err: errStub}, nil
}

const testNS = "team-a"

func pod(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(uid)}}
}

func podURL(name string) string { return fmt.Sprintf("http://%s.db.%s.svc:2379", name, testNS) }

func target(name string) PodPort { return PodPort{Namespace: testNS, Pod: name, Port: 2379} }

type pfEnv struct {
	f     *PortForwardFactory
	pods  client.Client
	ff    *fakeForwards
	inner *stubFactory
	mu    sync.Mutex
	now   time.Time
}

func newPFEnv(t *testing.T, o portForwardOptions, pods ...*corev1.Pod) *pfEnv {
	t.Helper()
	b := fake.NewClientBuilder()
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	e := &pfEnv{pods: b.Build(), ff: newFakeForwards(), inner: &stubFactory{}, now: time.Unix(1_000_000, 0)}
	e.f = newPortForwardFactory(e.pods, e.inner, e.ff.open, o)
	e.f.now = func() time.Time {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.now
	}
	t.Cleanup(func() {
		if err := e.f.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func (e *pfEnv) advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
}

func (e *pfEnv) newClient(t *testing.T, endpoints ...string) Client {
	t.Helper()
	c, err := e.f.New(t.Context(), endpoints)
	if err != nil {
		t.Fatalf("New(%v): %v", endpoints, err)
	}
	return c
}

func status(t *testing.T, c Client, endpoint string) string {
	t.Helper()
	st, err := c.Status(t.Context(), endpoint)
	if err != nil {
		t.Fatalf("Status(%s): %v", endpoint, err)
	}
	return st.Version
}

func wantErrContaining(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one containing %q", what, parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not contain %q", what, err, p)
		}
	}
}

// TestPortForwardFactoryReusesForwards: each pod gets its own forward,
// the inner client dials the local addresses, Status is translated, and a
// second client reuses the forwards.
func TestPortForwardFactoryReusesForwards(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"), pod("db-1", "u1"))
	eps := []string{podURL("db-0"), podURL("db-1")}
	for round := range 2 {
		c := e.newClient(t, eps...)
		want := []string{"http://" + e.ff.forward(t, target("db-0")).addr, "http://" + e.ff.forward(t, target("db-1")).addr}
		if diff := cmp.Diff(want, e.inner.got[round]); diff != "" {
			t.Errorf("round %d: endpoints of the inner client (-want +got):\n%s", round, diff)
		}
		for i, ep := range eps {
			if got := status(t, c, ep); got != want[i] {
				t.Errorf("round %d: Status(%s) went to %s, want %s", round, ep, got, want[i])
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.ff.openCount(); n != 2 {
		t.Errorf("forwards opened for two pods in two rounds: %d, want 2", n)
	}
}

// TestPortForwardFactoryOverTLS: with WithTLS the inner client dials the
// forwards over https and verifies the members' certificate for the first
// pod's DNS name (a forward's address is in no certificate); the caller's
// configuration is not changed.
func TestPortForwardFactoryOverTLS(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"), pod("db-1", "u1"))
	eps := []string{"https://db-0.db.team-a.svc:2379", "https://db-1.db.team-a.svc:2379"}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	c, err := e.f.New(t.Context(), eps, WithTLS(cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() { _ = c.Close() }()
	want := []string{"https://" + e.ff.forward(t, target("db-0")).addr, "https://" + e.ff.forward(t, target("db-1")).addr}
	if diff := cmp.Diff(want, e.inner.got[0]); diff != "" {
		t.Errorf("endpoints of the inner client (-want +got):\n%s", diff)
	}
	got := e.inner.gotDial[0].TLS
	if got == nil || got.ServerName != "db-0.db.team-a.svc" {
		t.Fatalf("inner client's TLS = %+v, want ServerName db-0.db.team-a.svc", got)
	}
	if cfg.ServerName != "" {
		t.Errorf("the caller's tls.Config was changed: ServerName %q", cfg.ServerName)
	}
	// A ServerName the caller chose is kept.
	cfg.ServerName = "etcd.example"
	c2, err := e.f.New(t.Context(), eps, WithTLS(cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() { _ = c2.Close() }()
	if got := e.inner.gotDial[1].TLS.ServerName; got != "etcd.example" {
		t.Errorf("ServerName = %q, want the caller's etcd.example", got)
	}
}

// TestPortForwardFactoryErrorsNamePods: errors through a client name the
// pod and its forward, and how a forward that has ended ended.
func TestPortForwardFactoryErrorsNamePods(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"))
	c := e.newClient(t, podURL("db-0"))
	defer func() { _ = c.Close() }()
	fw := e.ff.forward(t, target("db-0"))
	_, err := c.MemberList(t.Context())
	wantErrContaining(t, "MemberList", err, "pod team-a/db-0 via "+fw.addr, errStub.Error())
	if !errors.Is(err, errStub) {
		t.Errorf("MemberList error %v does not wrap the inner client's", err)
	}

	fw.end <- portforward.ErrLostConnectionToPod
	fw.waitStopped(t)
	// done is closed just after open returns.
	deadline := time.Now().Add(time.Second)
	for {
		_, err = c.MemberList(t.Context())
		if strings.Contains(err.Error(), "ended") || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	wantErrContaining(t, "MemberList after the forward ended", err,
		"pod team-a/db-0", "port-forward ended: lost connection to pod", "is etcd listening there yet?")
}

// TestPortForwardFactoryReopens: a forward that ended, or whose pod was
// replaced, is not reused; a gone pod's forward is closed.
func TestPortForwardFactoryReopens(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"), pod("db-1", "u1"))
	ep := podURL("db-0")

	c := e.newClient(t, ep)
	_ = c.Close()
	first := e.ff.forward(t, target("db-0"))
	first.end <- portforward.ErrLostConnectionToPod
	first.waitStopped(t)
	e.waitEnded(t, target("db-0"))
	c = e.newClient(t, ep)
	_ = c.Close()
	second := e.ff.forward(t, target("db-0"))
	if second == first {
		t.Fatal("the ended forward was reused")
	}

	// The pod is replaced: same name, new UID.
	testkit.Must(t, e.pods.Delete(t.Context(), pod("db-0", "u0")))
	testkit.Must(t, e.pods.Create(t.Context(), pod("db-0", "u0-new")))
	c = e.newClient(t, ep)
	second.waitStopped(t)
	third := e.ff.forward(t, target("db-0"))
	if third == second {
		t.Fatal("the forward to the replaced pod was reused")
	}
	if got, want := status(t, c, ep), "http://"+third.addr; got != want {
		t.Errorf("Status went to %s, want the new forward %s", got, want)
	}
	_ = c.Close()

	// The pod is deleted: its idle forward is closed by the next New,
	// and a client on it fails naming the pod.
	testkit.Must(t, e.pods.Delete(t.Context(), pod("db-0", "u0-new")))
	c = e.newClient(t, podURL("db-1"))
	_ = c.Close()
	third.waitStopped(t)
	_, err := e.f.New(t.Context(), []string{ep})
	wantErrContaining(t, "New on a deleted pod", err, "pod team-a/db-0", "does not exist")
	if n := e.ff.openCount(); n != 4 {
		t.Errorf("forwards opened: %d, want 4 (db-0 three times, db-1 once)", n)
	}
}

// waitEnded waits until the factory sees the forward to target ended.
func (e *pfEnv) waitEnded(t *testing.T, target PodPort) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		e.f.mu.Lock()
		fw := e.f.forwards[target]
		ended := fw == nil || fw.ended()
		e.f.mu.Unlock()
		if ended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forward to %s has not ended", target)
		}
	}
}

// TestPortForwardFactoryPartial: a pod that cannot be forwarded to fails
// only its own endpoint, with the reason and the fix; New fails when no
// endpoint can be reached; an open that hangs times out.
func TestPortForwardFactoryPartial(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{openTimeout: 200 * time.Millisecond}, pod("db-0", "u0"), pod("db-1", "u1"), pod("db-2", "u2"))
	e.ff.fail[target("db-1")] = errors.New(`error upgrading connection: pods "db-1" is forbidden`)
	e.ff.hang[target("db-2")] = true
	c := e.newClient(t, podURL("db-0"), podURL("db-1"), podURL("db-2"))
	defer func() { _ = c.Close() }()
	if got, want := status(t, c, podURL("db-0")), "http://"+e.ff.forward(t, target("db-0")).addr; got != want {
		t.Errorf("Status(db-0) went to %s, want %s", got, want)
	}
	_, err := c.Status(t.Context(), podURL("db-1"))
	wantErrContaining(t, "Status(db-1)", err, "pod team-a/db-1", "is forbidden", "pods/portforward")
	_, err = c.Status(t.Context(), podURL("db-2"))
	wantErrContaining(t, "Status(db-2)", err, "pod team-a/db-2", "not open after 200ms")
	if diff := cmp.Diff([][]string{{"http://" + e.ff.forward(t, target("db-0")).addr}}, e.inner.got); diff != "" {
		t.Errorf("endpoints of the inner clients (-want +got):\n%s", diff)
	}

	_, err = e.f.New(t.Context(), []string{podURL("db-1")})
	wantErrContaining(t, "New on an unreachable pod only", err, "pod team-a/db-1", "is forbidden")
	_, err = e.f.New(t.Context(), []string{"http://127.0.0.1:2379"})
	if !errors.Is(err, ErrNotPodURL) {
		t.Errorf("New on a loopback URL: %v, want ErrNotPodURL", err)
	}
	wantErrContaining(t, "New on a loopback URL", err, "--client-url-template")
}

// TestPortForwardFactoryIdle: a forward no client uses is closed once it
// has been idle for the idle timeout, not while a client uses it.
func TestPortForwardFactoryIdle(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{idleTimeout: time.Minute}, pod("db-0", "u0"), pod("db-1", "u1"))
	held := e.newClient(t, podURL("db-0"))
	c := e.newClient(t, podURL("db-1"))
	_ = c.Close()
	e.advance(2 * time.Minute)
	c = e.newClient(t, podURL("db-0"))
	_ = c.Close()
	e.ff.forward(t, target("db-1")).waitStopped(t)
	if e.ff.forward(t, target("db-0")).isStopped() {
		t.Error("a forward in use was closed as idle")
	}
	_ = held.Close()
	e.advance(30 * time.Second)
	c = e.newClient(t, podURL("db-1"))
	_ = c.Close()
	if e.ff.forward(t, target("db-0")).isStopped() {
		t.Error("a forward used 30s ago was closed with an idle timeout of 1m")
	}
	if n := e.ff.openCount(); n != 3 {
		t.Errorf("forwards opened: %d, want 3 (db-1 reopened after idling)", n)
	}
}

// TestPortForwardFactoryMaxAge: a forward older than the max age is
// replaced once no client uses it, however often it is used.
func TestPortForwardFactoryMaxAge(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{idleTimeout: time.Minute, maxAge: 5 * time.Minute}, pod("db-0", "u0"))
	for range 5 {
		c := e.newClient(t, podURL("db-0"))
		_ = c.Close()
		e.advance(50 * time.Second)
	}
	held := e.newClient(t, podURL("db-0"))
	first := e.ff.forward(t, target("db-0"))
	if n := e.ff.openCount(); n != 1 {
		t.Fatalf("forwards opened within the max age: %d, want 1", n)
	}
	e.advance(time.Minute)
	c := e.newClient(t, podURL("db-0"))
	_ = c.Close()
	if first.isStopped() || e.ff.openCount() != 1 {
		t.Fatal("a forward in use was replaced for its age")
	}
	_ = held.Close()
	c = e.newClient(t, podURL("db-0"))
	_ = c.Close()
	first.waitStopped(t)
	if n := e.ff.openCount(); n != 2 {
		t.Errorf("forwards opened: %d, want 2 (the old one replaced once unused)", n)
	}
}

// TestPortForwardFactoryClose: Close ends every forward before it returns;
// New fails after it.
func TestPortForwardFactoryClose(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"), pod("db-1", "u1"))
	c := e.newClient(t, podURL("db-0"), podURL("db-1"))
	if err := e.f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db-0", "db-1"} {
		if !e.ff.forward(t, target(name)).isStopped() {
			t.Errorf("the forward to %s is open after Close returned", name)
		}
	}
	_ = c.Close()
	_, err := e.f.New(t.Context(), []string{podURL("db-0")})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("New after Close: %v, want ErrClosed", err)
	}
}

// TestPortForwardFactoryConcurrent: concurrent clients on one pod share
// one forward.
func TestPortForwardFactoryConcurrent(t *testing.T) {
	e := newPFEnv(t, portForwardOptions{}, pod("db-0", "u0"))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			c, err := e.f.New(t.Context(), []string{podURL("db-0")})
			if err != nil {
				errs <- err
				return
			}
			_, _ = c.Status(t.Context(), podURL("db-0"))
			errs <- c.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := e.ff.openCount(); n != 1 {
		t.Errorf("forwards opened for 8 concurrent clients on one pod: %d, want 1", n)
	}
}

// TestQuietSink: client-go's errors about a local connection the etcd
// client closed are logged at V(1), other errors as errors.
func TestQuietSink(t *testing.T) {
	t.Parallel()
	var got []string
	base := funcr.New(func(prefix, args string) { got = append(got, prefix+" "+args) }, funcr.Options{Verbosity: 1})
	l := logr.New(quietSink{base.GetSink()}).WithName("pf").WithValues("pod", "p")
	pipe := &net.OpError{Op: "write", Net: "tcp4", Err: os.NewSyscallError("write", syscall.EPIPE)}
	l.Error(fmt.Errorf("readfrom: %w", pipe), "Error copying from remote stream to local connection")
	l.Error(errors.New("no forward found for port 2379"), "An error occurred forwarding")
	want := []string{
		`pf "level"=1 "msg"="Error copying from remote stream to local connection" "pod"="p" "err"="readfrom: write tcp4: write: broken pipe"`,
		`pf "msg"="An error occurred forwarding" "error"="no forward found for port 2379" "pod"="p"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}
