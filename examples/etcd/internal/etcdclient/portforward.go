package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultIdleTimeout is how long a port-forward that no client uses is
// kept open for the next client on the same pod.
const DefaultIdleTimeout = 2 * time.Minute

// DefaultMaxAge is the age after which an unused port-forward is replaced
// by a new one (see PortForwardFactory).
const DefaultMaxAge = 10 * time.Minute

// DefaultOpenTimeout bounds how long opening one port-forward (the
// upgraded connection to the API server and the local listener) may take.
const DefaultOpenTimeout = 30 * time.Second

// ErrNotPodURL is returned (wrapped) for an endpoint that is not a pod DNS
// URL (see ParsePodURL).
var ErrNotPodURL = errors.New("not a pod DNS URL")

// ErrClosed is returned (wrapped) by a PortForwardFactory after Close.
var ErrClosed = errors.New("port-forward factory closed")

// PodPort is one port of one pod, what a port-forward reaches.
type PodPort struct {
	Namespace, Pod string
	Port           int
}

// String returns namespace/pod:port.
func (p PodPort) String() string { return p.Namespace + "/" + p.Pod + ":" + strconv.Itoa(p.Port) }

func (p PodPort) pod() string { return p.Namespace + "/" + p.Pod }

// ParsePodURL returns the pod and port that a client URL of the form
// http(s)://<pod>.<service>.<namespace>.svc[.<cluster domain>]:<port> names:
// the DNS name Kubernetes gives a pod whose hostname is <pod> and whose
// subdomain is the headless Service <service>. The port is required.
func ParsePodURL(endpoint string) (PodPort, error) {
	bad := func(why string) (PodPort, error) {
		return PodPort{}, fmt.Errorf("endpoint %q: %s: %w; want http://<pod>.<service>.<namespace>.svc:<port>", endpoint, why, ErrNotPodURL)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return bad(err.Error())
	}
	labels := strings.Split(u.Hostname(), ".")
	if len(labels) < 4 || labels[3] != "svc" || slices.Contains(labels[:3], "") {
		return bad("the host is not <pod>.<service>.<namespace>.svc")
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port <= 0 || port > 65535 {
		return bad("no port")
	}
	return PodPort{Namespace: labels[2], Pod: labels[0], Port: port}, nil
}

// PortForwardOption configures NewPortForwardFactory.
type PortForwardOption func(*portForwardOptions)

type portForwardOptions struct {
	dialTimeout, idleTimeout, maxAge, openTimeout time.Duration
	logger                                        *logr.Logger
}

// WithDialTimeout sets the etcd clients' dial timeout (default
// DefaultDialTimeout).
func WithDialTimeout(d time.Duration) PortForwardOption {
	return func(o *portForwardOptions) { o.dialTimeout = d }
}

// WithIdleTimeout sets how long a port-forward no client uses is kept
// open (default DefaultIdleTimeout).
func WithIdleTimeout(d time.Duration) PortForwardOption {
	return func(o *portForwardOptions) { o.idleTimeout = d }
}

// WithMaxAge sets the age after which an unused port-forward is replaced
// (default DefaultMaxAge).
func WithMaxAge(d time.Duration) PortForwardOption {
	return func(o *portForwardOptions) { o.maxAge = d }
}

// WithOpenTimeout bounds how long opening one port-forward may take
// (default DefaultOpenTimeout).
func WithOpenTimeout(d time.Duration) PortForwardOption {
	return func(o *portForwardOptions) { o.openTimeout = d }
}

// WithLogger sets the logger of the forwards (default klog's): client-go
// logs there why a forward, or a connection through it, failed.
func WithLogger(l logr.Logger) PortForwardOption {
	return func(o *portForwardOptions) { o.logger = &l }
}

// openFunc runs a port-forward to target until ctx ends or the forward
// fails. It calls ready with the local address (host:port) once that
// accepts connections, and returns why the forward ended: nil when ctx
// ended it.
type openFunc func(ctx context.Context, target PodPort, ready func(addr string)) error

// PortForwardFactory is a Factory for an operator that runs outside the
// cluster, where pod DNS names do not resolve: it reaches every member pod
// through the API server's port-forward (pods/portforward), as kubectl
// port-forward does, and dials etcd at the forward's local port on
// 127.0.0.1.
//
// Endpoints must be pod DNS URLs (ParsePodURL), the operator's default
// client URLs; the pod and the port are taken from them. A Client's Status
// takes the same endpoints, and its errors name the pod.
//
// One forward per pod and port is shared by all clients and reused across
// clients. It is closed when its pod is deleted or replaced (another UID),
// when it fails (the API server or the kubelet closed it, or a connection
// to the pod's port failed: client-go then ends the whole forward), when
// no client has used it for the idle timeout, when no client uses it and
// it is older than the max age, and by Close; the next client opens a new
// one. Close waits until every forward's goroutines have ended.
//
// The max age bounds what a kubelet that does not pass on the end of a
// connection leaves behind: client-go keeps each connection through a
// forward (three goroutines and a stream) until the pod's side closes it
// too, and kwok's kubelet, for one, never closes it while etcd keeps its
// side open. Closing the forward ends them all.
type PortForwardFactory struct {
	pods        client.Reader
	next        Factory
	open        openFunc
	idleTimeout time.Duration
	maxAge      time.Duration
	openTimeout time.Duration
	now         func() time.Time
	logger      logr.Logger

	mu       sync.Mutex
	forwards map[PodPort]*forward
	closed   bool
	wg       sync.WaitGroup
}

var _ Factory = (*PortForwardFactory)(nil)

// NewPortForwardFactory returns a PortForwardFactory that opens
// port-forwards through the API server of cfg and looks pods up with pods
// (a cached client is fine: it is read on every New). The identity of cfg
// needs create on pods/portforward and get on pods. Close it when done.
func NewPortForwardFactory(cfg *rest.Config, pods client.Reader, opts ...PortForwardOption) (*PortForwardFactory, error) {
	if cfg == nil || pods == nil {
		return nil, errors.New("port-forward factory: a REST config and a pod reader are required")
	}
	o := portForwardOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	open, err := apiServerOpener(cfg)
	if err != nil {
		return nil, err
	}
	return newPortForwardFactory(pods, NewFactory(o.dialTimeout), open, o), nil
}

func newPortForwardFactory(pods client.Reader, next Factory, open openFunc, o portForwardOptions) *PortForwardFactory {
	if o.idleTimeout <= 0 {
		o.idleTimeout = DefaultIdleTimeout
	}
	if o.maxAge <= 0 {
		o.maxAge = DefaultMaxAge
	}
	if o.openTimeout <= 0 {
		o.openTimeout = DefaultOpenTimeout
	}
	logger := klog.Background()
	if o.logger != nil {
		logger = *o.logger
	}
	if sink := logger.GetSink(); sink != nil {
		logger = logr.New(quietSink{sink})
	}
	return &PortForwardFactory{
		pods: pods, next: next, open: open,
		idleTimeout: o.idleTimeout, maxAge: o.maxAge, openTimeout: o.openTimeout, now: time.Now,
		logger: logger, forwards: map[PodPort]*forward{},
	}
}

// apiServerOpener returns the openFunc that forwards through the API
// server: websocket tunneling first, SPDY when the server does not
// upgrade to websockets (as kubectl does).
func apiServerOpener(cfg *rest.Config) (openFunc, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward factory: %w", err)
	}
	restClient := cs.CoreV1().RESTClient()
	return func(ctx context.Context, t PodPort, ready func(string)) error {
		u := restClient.Post().Resource("pods").Namespace(t.Namespace).Name(t.Pod).SubResource("portforward").URL()
		// A SPDY round tripper holds one connection: one per forward.
		transport, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			return err
		}
		dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
		tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreamingWithLogger(klog.FromContext(ctx), u, cfg)
		if err != nil {
			return err
		}
		dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(err error) bool {
			return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
		})
		readyCh := make(chan struct{})
		pf, err := portforward.NewOnAddressesForStreamingWithContext(ctx, dialer, []string{"127.0.0.1"},
			[]string{"0:" + strconv.Itoa(t.Port)}, readyCh, io.Discard, io.Discard)
		if err != nil {
			return err
		}
		ended := make(chan error, 1)
		go func() { ended <- pf.ForwardPorts() }()
		select {
		case <-readyCh:
		case err := <-ended:
			return err
		}
		ports, err := pf.GetPorts()
		if err != nil || len(ports) != 1 {
			// Cannot happen once ready is closed. The forward is not
			// usable: it ends when it is closed.
			err = fmt.Errorf("local ports of the forward: %v, %w", ports, err)
			<-ctx.Done()
			return errors.Join(err, <-ended)
		}
		ready(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))))
		return <-ended
	}, nil
}

// forward is one port-forward to a pod.
type forward struct {
	target PodPort
	uid    types.UID
	cancel context.CancelFunc
	// ready is closed once the forward accepts connections at addr, or
	// has ended before (addr empty, err set).
	ready     chan struct{}
	readyOnce sync.Once
	addr      string
	// done is closed when the forward has ended, with err.
	done    chan struct{}
	err     error
	created time.Time
	// Guarded by the factory's mu.
	refs     int
	lastUsed time.Time
}

func (fw *forward) ended() bool {
	select {
	case <-fw.done:
		return true
	default:
		return false
	}
}

// why describes how an ended forward ended, with the likely fix.
func (fw *forward) why() string {
	err := fw.err
	switch {
	case err == nil:
		return "it was closed"
	case errors.Is(err, portforward.ErrLostConnectionToPod):
		return fmt.Sprintf("%v (a connection to port %d in the pod failed, see the operator log: is etcd listening there yet?)", err, fw.target.Port)
	default:
		return err.Error()
	}
}

// New returns a client on endpoints (pod DNS URLs, see ParsePodURL),
// each reached through a port-forward to its pod. A pod that cannot be
// forwarded to makes only its own endpoint fail (in Status, with the
// reason); New fails when no endpoint can be reached.
func (f *PortForwardFactory) New(ctx context.Context, endpoints []string, opts ...DialOption) (Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd client: no endpoints")
	}
	targets := make([]PodPort, len(endpoints))
	for i, ep := range endpoints {
		t, err := ParsePodURL(ep)
		if err != nil {
			return nil, fmt.Errorf("--member-access=port-forward needs the in-cluster client URLs of the members (no --client-url-template): %w", err)
		}
		targets[i] = t
	}
	f.sweep(ctx)
	scheme := "http"
	if o := Dial(opts...); o.TLS != nil {
		// The forward's local address is not a name the members'
		// certificate is for: verify it for the first member's host
		// name, which a certificate for every member also covers.
		scheme = "https"
		if o.TLS.ServerName == "" {
			cfg := o.TLS.Clone()
			u, _ := url.Parse(endpoints[0]) // parsed by ParsePodURL above
			cfg.ServerName = u.Hostname()
			opts = append(opts, WithTLS(cfg))
		}
	}

	c := &forwardedClient{f: f, local: map[string]string{}, forwards: map[string]*forward{}, failed: map[string]error{}}
	var locals []string
	var errs []error
	for i, ep := range endpoints {
		if _, seen := c.local[ep]; seen {
			continue
		}
		if _, seen := c.failed[ep]; seen {
			continue
		}
		fw, err := f.acquire(ctx, targets[i])
		if err != nil {
			c.failed[ep] = err
			errs = append(errs, err)
			continue
		}
		c.forwards[ep] = fw
		c.local[ep] = scheme + "://" + fw.addr
		locals = append(locals, c.local[ep])
	}
	if len(locals) == 0 {
		return nil, errors.Join(errs...)
	}
	inner, err := f.next.New(ctx, locals, opts...)
	if err != nil {
		err = c.wrap("", err)
		c.release()
		return nil, err
	}
	c.inner = inner
	return c, nil
}

// acquire returns a ready forward to t with a reference taken, opening
// one if there is none for t's current pod.
func (f *PortForwardFactory) acquire(ctx context.Context, t PodPort) (*forward, error) {
	var pod corev1.Pod
	if err := f.pods.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Pod}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			f.drop(t, nil)
			return nil, fmt.Errorf("port-forward to pod %s: the pod does not exist: %w", t.pod(), err)
		}
		return nil, fmt.Errorf("port-forward to pod %s: getting the pod (the operator needs get on pods): %w", t.pod(), err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, fmt.Errorf("port-forward to pod %s: %w", t.pod(), ErrClosed)
	}
	fw := f.forwards[t]
	if fw != nil && (fw.uid != pod.UID || fw.ended()) {
		delete(f.forwards, t)
		fw.cancel()
		fw = nil
	}
	if fw == nil {
		fw = f.startLocked(t, pod.UID)
	}
	fw.refs++
	f.mu.Unlock()

	timer := time.NewTimer(f.openTimeout)
	defer timer.Stop()
	select {
	case <-fw.ready:
	case <-ctx.Done():
		f.release(fw)
		return nil, fmt.Errorf("port-forward to pod %s: waiting for it to open: %w", t.pod(), ctx.Err())
	case <-timer.C:
		f.release(fw)
		f.drop(t, fw)
		return nil, fmt.Errorf("port-forward to pod %s: not open after %s: is the API server reachable?", t.pod(), f.openTimeout)
	}
	if fw.addr == "" {
		f.release(fw)
		f.drop(t, fw)
		return nil, fmt.Errorf("port-forward to pod %s port %d through the API server: %w "+
			"(the pod must be running on a node whose kubelet serves port-forward, "+
			"and the operator needs create on pods/portforward, see examples/etcd/config/rbac)",
			t.pod(), t.Port, fw.err)
	}
	return fw, nil
}

// startLocked starts a forward to t for the pod with uid and records it.
// The caller holds f.mu.
func (f *PortForwardFactory) startLocked(t PodPort, uid types.UID) *forward {
	logger := f.logger.WithValues("portForward", t.String())
	fctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	now := f.now()
	fw := &forward{target: t, uid: uid, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{}),
		created: now, lastUsed: now}
	f.forwards[t] = fw
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer cancel()
		err := f.open(fctx, t, func(addr string) {
			fw.readyOnce.Do(func() {
				fw.addr = addr
				close(fw.ready)
			})
		})
		if err != nil {
			logger.V(1).Info("port-forward ended", "err", err.Error())
		}
		fw.err = err
		fw.readyOnce.Do(func() { close(fw.ready) })
		close(fw.done)
	}()
	return fw
}

// release gives back a reference to fw.
func (f *PortForwardFactory) release(fw *forward) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fw.refs--
	fw.lastUsed = f.now()
}

// drop closes the forward recorded for t if it is old (any when old is
// nil).
func (f *PortForwardFactory) drop(t PodPort, old *forward) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fw := f.forwards[t]; fw != nil && (old == nil || fw == old) {
		delete(f.forwards, t)
		fw.cancel()
	}
}

// sweep closes the forwards that have ended, and the unused ones that no
// client has used for the idle timeout, that are older than the max age,
// or whose pod is gone or replaced.
func (f *PortForwardFactory) sweep(ctx context.Context) {
	f.mu.Lock()
	now := f.now()
	var unused []*forward
	for t, fw := range f.forwards {
		switch {
		case fw.ended(), fw.refs == 0 && (now.Sub(fw.lastUsed) >= f.idleTimeout || now.Sub(fw.created) >= f.maxAge):
			delete(f.forwards, t)
			fw.cancel()
		case fw.refs == 0:
			unused = append(unused, fw)
		}
	}
	f.mu.Unlock()
	for _, fw := range unused {
		var pod corev1.Pod
		err := f.pods.Get(ctx, client.ObjectKey{Namespace: fw.target.Namespace, Name: fw.target.Pod}, &pod)
		if apierrors.IsNotFound(err) || (err == nil && pod.UID != fw.uid) {
			f.mu.Lock()
			if f.forwards[fw.target] == fw && fw.refs == 0 {
				delete(f.forwards, fw.target)
				fw.cancel()
			}
			f.mu.Unlock()
		}
	}
}

// Close closes every forward and waits until they have ended. Clients
// still open fail from then on; New returns an error wrapping ErrClosed.
func (f *PortForwardFactory) Close() error {
	f.mu.Lock()
	f.closed = true
	for t, fw := range f.forwards {
		delete(f.forwards, t)
		fw.cancel()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// forwardedClient is a Client on local forwards: it translates endpoints
// to the forwards' local URLs and names the pods in its errors.
type forwardedClient struct {
	f     *PortForwardFactory
	inner Client
	// local, forwards and failed are keyed by endpoint.
	local     map[string]string
	forwards  map[string]*forward
	failed    map[string]error
	closeOnce sync.Once
	closeErr  error
}

// wrap adds to err which pods were dialed through which forwards, and how
// the forwards that have ended ended. endpoint limits it to one.
func (c *forwardedClient) wrap(endpoint string, err error) error {
	if err == nil {
		return nil
	}
	var via []string
	for ep, fw := range c.forwards {
		if endpoint != "" && ep != endpoint {
			continue
		}
		s := fmt.Sprintf("pod %s via %s", fw.target.pod(), fw.addr)
		if fw.ended() {
			s += ", whose port-forward ended: " + fw.why()
		}
		via = append(via, s)
	}
	slices.Sort(via)
	return fmt.Errorf("through the API server's port-forward to %s: %w", strings.Join(via, "; "), err)
}

func (c *forwardedClient) MemberList(ctx context.Context) ([]Member, error) {
	m, err := c.inner.MemberList(ctx)
	return m, c.wrap("", err)
}

func (c *forwardedClient) MemberAddAsLearner(ctx context.Context, peerURL string) (Member, []Member, error) {
	m, list, err := c.inner.MemberAddAsLearner(ctx, peerURL)
	return m, list, c.wrap("", err)
}

func (c *forwardedClient) MemberPromote(ctx context.Context, id uint64) error {
	return c.wrap("", c.inner.MemberPromote(ctx, id))
}

func (c *forwardedClient) MemberRemove(ctx context.Context, id uint64) error {
	return c.wrap("", c.inner.MemberRemove(ctx, id))
}

// Status asks the member at endpoint (one the client was built on)
// through its pod's forward.
func (c *forwardedClient) Status(ctx context.Context, endpoint string) (Status, error) {
	if err, ok := c.failed[endpoint]; ok {
		return Status{}, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	local, ok := c.local[endpoint]
	if !ok {
		return Status{}, fmt.Errorf("status of %s: not an endpoint of this client", endpoint)
	}
	st, err := c.inner.Status(ctx, local)
	return st, c.wrap(endpoint, err)
}

func (c *forwardedClient) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	if len(c.local)+len(c.failed) != 1 {
		return SnapshotInfo{}, fmt.Errorf("snapshot needs a client on exactly one endpoint, have %d", len(c.local)+len(c.failed))
	}
	info, err := c.inner.Snapshot(ctx, w)
	return info, c.wrap("", err)
}

func (c *forwardedClient) Put(ctx context.Context, kvs []KeyValue) error {
	return c.wrap("", c.inner.Put(ctx, kvs))
}

func (c *forwardedClient) Revision(ctx context.Context) (int64, error) {
	rev, err := c.inner.Revision(ctx)
	return rev, c.wrap("", err)
}

// Defragment defragments the member at endpoint (one the client was built
// on) through its pod's forward.
func (c *forwardedClient) Defragment(ctx context.Context, endpoint string) error {
	if err, ok := c.failed[endpoint]; ok {
		return fmt.Errorf("defragmenting %s: %w", endpoint, err)
	}
	local, ok := c.local[endpoint]
	if !ok {
		return fmt.Errorf("defragmenting %s: not an endpoint of this client", endpoint)
	}
	return c.wrap(endpoint, c.inner.Defragment(ctx, local))
}

func (c *forwardedClient) Alarms(ctx context.Context) ([]Alarm, error) {
	a, err := c.inner.Alarms(ctx)
	return a, c.wrap("", err)
}

func (c *forwardedClient) Disarm(ctx context.Context, a Alarm) error {
	return c.wrap("", c.inner.Disarm(ctx, a))
}

func (c *forwardedClient) Compact(ctx context.Context, rev int64) error {
	return c.wrap("", c.inner.Compact(ctx, rev))
}

func (c *forwardedClient) MoveLeader(ctx context.Context, transferee uint64) error {
	return c.wrap("", c.inner.MoveLeader(ctx, transferee))
}

// Close closes the etcd client and gives the forwards back to the
// factory, which keeps them for the next client.
func (c *forwardedClient) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.inner.Close()
		c.release()
	})
	return c.closeErr
}

func (c *forwardedClient) release() {
	for _, fw := range c.forwards {
		c.f.release(fw)
	}
}

// quietSink passes log entries on, except client-go's errors about a
// local connection that the etcd client closed while the pod was still
// sending (broken pipe, connection reset): every etcd client's Close
// causes some. Those are logged at V(1) without a stack trace.
type quietSink struct {
	logr.LogSink
}

// Init does nothing: the wrapped sink was initialised with its logger.
func (quietSink) Init(logr.RuntimeInfo) {}

func (s quietSink) Error(err error, msg string, keysAndValues ...any) {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) {
		if s.Enabled(1) {
			s.Info(1, msg, append(keysAndValues, "err", err.Error())...)
		}
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s quietSink) WithValues(keysAndValues ...any) logr.LogSink {
	return quietSink{s.LogSink.WithValues(keysAndValues...)}
}

func (s quietSink) WithName(name string) logr.LogSink {
	return quietSink{s.LogSink.WithName(name)}
}
