package controller_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdtest"
	"github.com/opkit-dev/opkit/examples/etcd/kvhistory"
)

// campaignEtcd is the etcd cluster a schedule runs: the fake, or real etcd
// processes started from the pods the operator writes.
type campaignEtcd interface {
	// factory is the operator's and the clients' way to the members.
	factory() etcdclient.Factory
	// endpoints are the client URLs a client of the cluster dials.
	endpoints() []string
	members() []etcdclient.Member
	leader() uint64
	// start runs pod's member on the data directory of claim (the pod's
	// own directory if claim is "") unless it runs, and reports whether
	// it is ready.
	start(pod *corev1.Pod, claim string) bool
	// ready reports whether pod's member answers its readiness probe.
	ready(pod string) bool
	// alive reports whether pod's member runs: a crashed one is started
	// again.
	alive(pod string) bool
	// reap stops the members whose pods are not in live (by name).
	reap(live map[string]*corev1.Pod)
	// stop stops pod's member: killed, or terminated as a deleted pod is.
	stop(pod string, kill bool)
	moveLeader(pod string) error
}

// fakeEtcd is the fake: members start ready and stop at once.
type fakeEtcd struct {
	f *etcdclient.Fake
	c *v1alpha1.EtcdCluster
}

func (e fakeEtcd) factory() etcdclient.Factory { return e.f.Factory() }
func (e fakeEtcd) endpoints() []string         { return nil }
func (e fakeEtcd) members() []etcdclient.Member {
	return e.f.Members()
}
func (e fakeEtcd) leader() uint64 { return e.f.Leader() }
func (e fakeEtcd) start(pod *corev1.Pod, _ string) bool {
	e.f.Start(pod.Name, controller.PeerURL(e.c, pod.Name), controller.InClusterClientURL(e.c, pod.Name))
	return true
}
func (e fakeEtcd) ready(string) bool { return true }
func (e fakeEtcd) alive(string) bool { return true }
func (e fakeEtcd) reap(live map[string]*corev1.Pod) {
	for _, m := range e.f.Members() {
		if _, ok := live[m.Name]; !ok && m.Name != "" {
			e.f.SetHealthy(m.PeerURLs[0], false)
		}
	}
}
func (e fakeEtcd) stop(pod string, _ bool) {
	e.f.SetHealthy(controller.PeerURL(e.c, pod), false)
}
func (e fakeEtcd) moveLeader(pod string) error {
	e.f.SetLeader(controller.PeerURL(e.c, pod))
	return nil
}

// procEtcd runs each member pod as an etcd process listening on a loopback
// address of its own (127.a.b.<ordinal+1>), on the ports of the pod. Pod
// DNS names do not resolve here, so the URLs in the pods' flags are
// rewritten to those addresses, and the factory rewrites what the operator
// sends and reads back: etcd holds addresses, the operator sees names.
type procEtcd struct {
	t    *testing.T
	c    *v1alpha1.EtcdCluster
	bin  string
	dir  string
	base string // "127.a.b."
	// toIP matches the cluster's member host names, fromIP its addresses.
	toIP, fromIP *regexp.Regexp
	// linked are the clusters whose names and addresses to and from
	// rewrite too: a cluster restored beside e's (link).
	linkMu sync.Mutex
	linked []*procEtcd

	mu    sync.Mutex
	procs map[string]*proc
	// clusterID is the first cluster ID a member reported.
	clusterID uint64
	// cutPods are the members cut from their peers, by pod: nothing
	// reaches them; cutIDs the same by member ID: nothing they send
	// arrives. cutChanged is closed on every change.
	cutPods    map[string]bool
	cutIDs     map[uint64]string
	cutChanged chan struct{}
	// peerConns are the connections between members.
	peerConns map[*peerConn]struct{}
	// tls, for a TLS cluster, is the clients' configuration, and
	// secrets where the members' Secret volumes are read from.
	tls     *tls.Config
	secrets client.Reader
}

// peerConn is one connection from member from to pod to's member.
type peerConn struct {
	from uint64
	to   string
	in   *net.TCPConn

	mu     sync.Mutex
	out    *net.TCPConn
	closed bool
}

// setOut records the connection to the member; false if the connection
// was cut meanwhile.
func (c *peerConn) setOut(out *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = out
	return !c.closed
}

// close drops the connection both ways, as a lost link would.
func (c *peerConn) close() {
	_ = c.in.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.out != nil {
		_ = c.out.Close()
	}
}

type proc struct {
	pod      types.UID
	endpoint string
	tls      *tls.Config
	// metrics is the plain URL of a TLS member's /readyz, "" without TLS.
	metrics string
	// volumes are the member's Secret volumes and what was written of
	// each, by the directory they are written to (see mountSecrets).
	volumes map[string]secretVolume
	cmd     *exec.Cmd
	exited  chan struct{}
	log     string

	mu     sync.Mutex
	cli    *clientv3.Client
	paused bool
}

// conn is a connection to p's member alone, kept until p stops.
func (p *proc) conn() (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli == nil {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint}, DialTimeout: time.Second, Logger: zap.NewNop(), TLS: p.tls})
		if err != nil {
			return nil, err
		}
		p.cli = cli
	}
	return p.cli.ActiveConnection(), nil
}

func (p *proc) closeConn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cli != nil {
		_ = p.cli.Close()
		p.cli = nil
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func newProcEtcd(t *testing.T, c *v1alpha1.EtcdCluster, block int) *procEtcd {
	base := fmt.Sprintf("127.%d.%d.", 100+block/250, block%250)
	e := &procEtcd{t: t, c: c, bin: etcdtest.Binary(t), dir: t.TempDir(), base: base, procs: map[string]*proc{},
		cutPods: map[string]bool{}, cutIDs: map[uint64]string{}, cutChanged: make(chan struct{}), peerConns: map[*peerConn]struct{}{},
		toIP:   regexp.MustCompile(regexp.QuoteMeta(c.Name+"-") + `(\d+)\.` + regexp.QuoteMeta(c.Name+"."+c.Namespace+".svc")),
		fromIP: regexp.MustCompile(regexp.QuoteMeta(base) + `(\d+)\b`)}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.procs {
			p.kill()
		}
		// Held connections end.
		clear(e.cutPods)
		clear(e.cutIDs)
		close(e.cutChanged)
		e.cutChanged = make(chan struct{})
	})
	return e
}

// link makes e's factory reach the members of o too; unlinked, o's
// stop.
func (e *procEtcd) link(o *procEtcd) func() {
	e.linkMu.Lock()
	defer e.linkMu.Unlock()
	e.linked = append(e.linked, o)
	return func() {
		e.linkMu.Lock()
		e.linked = slices.DeleteFunc(e.linked, func(x *procEtcd) bool { return x == o })
		e.linkMu.Unlock()
		o.reap(nil)
	}
}

func (e *procEtcd) group() []*procEtcd {
	e.linkMu.Lock()
	defer e.linkMu.Unlock()
	return append([]*procEtcd{e}, e.linked...)
}

// to rewrites member host names in s to their addresses.
func (e *procEtcd) to(s string) string {
	for _, x := range e.group() {
		s = x.toIP.ReplaceAllStringFunc(s, func(host string) string {
			n, _ := strconv.Atoi(x.toIP.FindStringSubmatch(host)[1])
			return x.base + strconv.Itoa(n+1)
		})
	}
	return s
}

// from rewrites member addresses in s to their host names.
func (e *procEtcd) from(s string) string {
	for _, x := range e.group() {
		s = x.fromIP.ReplaceAllStringFunc(s, func(ip string) string {
			n, _ := strconv.Atoi(x.fromIP.FindStringSubmatch(ip)[1])
			return fmt.Sprintf("%s-%d.%s.%s.svc", x.c.Name, n-1, x.c.Name, x.c.Namespace)
		})
	}
	return s
}

func (e *procEtcd) fromMember(m etcdclient.Member) etcdclient.Member {
	m.PeerURLs = slices.Clone(m.PeerURLs)
	m.ClientURLs = slices.Clone(m.ClientURLs)
	for i := range m.PeerURLs {
		m.PeerURLs[i] = e.from(m.PeerURLs[i])
	}
	for i := range m.ClientURLs {
		m.ClientURLs[i] = e.from(m.ClientURLs[i])
	}
	return m
}

func (e *procEtcd) fromMembers(ms []etcdclient.Member) []etcdclient.Member {
	out := make([]etcdclient.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, e.fromMember(m))
	}
	return out
}

func (e *procEtcd) factory() etcdclient.Factory {
	real := etcdclient.NewFactory(time.Second)
	return etcdclient.FactoryFunc(func(ctx context.Context, endpoints []string, opts ...etcdclient.DialOption) (etcdclient.Client, error) {
		eps := make([]string, 0, len(endpoints))
		for _, ep := range endpoints {
			eps = append(eps, e.to(ep))
		}
		c, err := real.New(ctx, eps, opts...)
		if err != nil {
			return nil, err
		}
		return &translated{Client: c, e: e}, nil
	})
}

// endpoints are the client URLs of ordinals 0-6: a cluster of 5 replaces
// a member under a new ordinal at most twice over.
func (e *procEtcd) endpoints() []string {
	var out []string
	for i := range 7 {
		out = append(out, controller.InClusterClientURL(e.c, fmt.Sprintf("%s-%d", e.c.Name, i)))
	}
	return out
}

func (e *procEtcd) client(ctx context.Context, endpoints ...string) (etcdclient.Client, error) {
	if len(endpoints) == 0 {
		endpoints = e.endpoints()
	}
	var opts []etcdclient.DialOption
	if e.tls != nil {
		opts = append(opts, etcdclient.WithTLS(e.tls))
	}
	return e.factory().New(ctx, endpoints, opts...)
}

// members is etcd's member list, read from the first member that
// answers: none is no list, at once.
func (e *procEtcd) members() []etcdclient.Member {
	for _, p := range e.answering() {
		conn, err := p.conn()
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Second)
		resp, err := pb.NewClusterClient(conn).MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
		cancel()
		if err != nil {
			continue
		}
		out := make([]etcdclient.Member, 0, len(resp.Members))
		for _, m := range resp.Members {
			out = append(out, e.fromMember(etcdclient.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}))
		}
		return out
	}
	return nil
}

func (e *procEtcd) leader() uint64 {
	for _, p := range e.answering() {
		if s, err := e.status(p); err == nil && s.Leader != 0 {
			return s.Leader
		}
	}
	return 0
}

// status asks p's member for its status on p's own connection:
// clientv3's Status dials the endpoint anew on every call.
func (e *procEtcd) status(p *proc) (*pb.StatusResponse, error) {
	conn, err := p.conn()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Second)
	defer cancel()
	return pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{})
}

// answering are the running members that are not paused, by pod name.
func (e *procEtcd) answering() []*proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*proc
	for _, name := range slices.Sorted(maps.Keys(e.procs)) {
		if p := e.procs[name]; p.answers() {
			out = append(out, p)
		}
	}
	return out
}

func (e *procEtcd) moveLeader(pod string) error {
	var id uint64
	for _, m := range e.members() {
		if m.Name == pod {
			id = m.ID
		}
	}
	lead := e.leader()
	for _, m := range e.members() {
		if m.ID != lead || len(m.ClientURLs) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
		defer cancel()
		c, err := e.client(ctx, m.ClientURLs[0])
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		return c.MoveLeader(ctx, id)
	}
	return errors.New("no leader")
}

// dataDir maps the pod's volume to a directory that outlives the pod
// when it is a claim.
func (e *procEtcd) dataDir(pod *corev1.Pod, claim string) string {
	if claim == "" {
		return filepath.Join(e.dir, "pods", string(pod.UID))
	}
	return filepath.Join(e.dir, "claims", claim)
}

func (e *procEtcd) start(pod *corev1.Pod, claim string) bool {
	e.mu.Lock()
	p := e.procs[pod.Name]
	e.mu.Unlock()
	if p != nil && p.running() {
		return e.ready(pod.Name)
	}
	if len(pod.Spec.InitContainers) > 0 {
		e.t.Fatalf("pod %s: the campaign's kubelet runs no init containers", pod.Name)
	}
	ip := e.to(fmt.Sprintf("%s.%s.%s.svc", pod.Name, e.c.Name, e.c.Namespace))
	root := filepath.Join(e.dir, "volumes", string(pod.UID))
	volumes := e.mountSecrets(pod, root, nil)
	var args []string
	var peers net.Listener
	var metrics string
	for _, a := range pod.Spec.Containers[0].Args {
		flag, value, hasValue := strings.Cut(a, "=")
		if !hasValue {
			args = append(args, a)
			continue
		}
		switch flag {
		case "--data-dir":
			value = e.dataDir(pod, claim)
		case "--listen-peer-urls":
			value = strings.Replace(value, "0.0.0.0", ip, 1)
			if *campaignPartition {
				peers, value = e.peerProxy(pod.Name, value)
			}
		case "--listen-client-urls":
			value = strings.Replace(value, "0.0.0.0", ip, 1)
		case "--listen-metrics-urls":
			value = strings.Replace(value, "0.0.0.0", ip, 1)
			metrics = value + "/readyz"
		default:
			if strings.HasPrefix(value, "/etc/") {
				value = filepath.Join(root, value)
			} else {
				value = e.to(value)
			}
		}
		args = append(args, flag+"="+value)
	}
	// etcd's default election timeout (1s): with 500ms, members starved of
	// CPU under make test (load average 13-30 on two cores) held
	// elections the schedules then waited out. The faults kill processes,
	// not the machine: what etcd wrote is in the page cache, so fsync only
	// costs time.
	args = append(args, "--log-level=warn", "--unsafe-no-fsync")
	logPath := filepath.Join(e.dir, pod.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		e.t.Fatal(err)
	}
	fmt.Fprintf(logf, "--- pod %s (uid %s) starts: %q\n", pod.Name, pod.UID, args)
	cmd := exec.Command(e.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dozens of members share two cores: one P each spins less when idle.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting etcd for pod %s: %v", pod.Name, err)
	}
	p = &proc{pod: pod.UID, endpoint: e.to(controller.InClusterClientURL(e.c, pod.Name)), tls: e.tls, metrics: metrics, volumes: volumes,
		cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		if peers != nil {
			_ = peers.Close()
		}
		close(p.exited)
	}()
	e.mu.Lock()
	e.procs[pod.Name] = p
	e.mu.Unlock()
	// A learner is not ready (/readyz's non_learner check) until it is
	// promoted, which takes a pass: wait only until it serves.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && p.running() {
		if e.probe(pod.Name, "?exclude=non_learner") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e.ready(pod.Name)
}

func (e *procEtcd) alive(pod string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pod]
	return p != nil && p.running()
}

func (e *procEtcd) reap(live map[string]*corev1.Pod) {
	e.mu.Lock()
	var gone []string
	for name, p := range e.procs {
		if pod, ok := live[name]; !ok || pod.UID != p.pod {
			gone = append(gone, name)
		}
	}
	e.mu.Unlock()
	for _, name := range gone {
		e.stop(name, false)
	}
}

var probe = &http.Client{Timeout: time.Second}

// ready asks the member's /readyz, as the pod's readiness probe does.
func (e *procEtcd) ready(pod string) bool { return e.probe(pod, "") }

func (e *procEtcd) probe(pod, query string) bool {
	e.mu.Lock()
	p := e.procs[pod]
	e.mu.Unlock()
	if p == nil || !p.answers() {
		return false
	}
	target := e.to(controller.InClusterClientURL(e.c, pod)) + "/readyz"
	if p.metrics != "" {
		target = p.metrics
	}
	resp, err := probe.Get(target + query)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pause stops pod's member (SIGSTOP), as a stalled disk or a frozen
// node does: its connections stay open and it answers nothing; unpaused
// (SIGCONT), it goes on where it stopped. It reports whether pod runs.
func (e *procEtcd) pause(pod string, paused bool) bool {
	e.mu.Lock()
	p := e.procs[pod]
	e.mu.Unlock()
	if p == nil || !p.running() {
		return false
	}
	sig := syscall.SIGCONT
	if paused {
		sig = syscall.SIGSTOP
	}
	p.mu.Lock()
	p.paused = paused
	p.mu.Unlock()
	return p.cmd.Process.Signal(sig) == nil
}

// answers reports whether p's member may answer: a paused one would only
// time out.
func (p *proc) answers() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running() && !p.paused
}

func (e *procEtcd) stop(pod string, kill bool) {
	e.mu.Lock()
	p := e.procs[pod]
	delete(e.procs, pod)
	e.mu.Unlock()
	if p == nil {
		return
	}
	if kill {
		p.kill()
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused member handles it
	select {
	case <-p.exited:
		p.closeConn()
	case <-time.After(5 * time.Second):
		p.kill()
	}
}

// peerProxy starts a TCP proxy on listen, the peer URL of pod's member,
// and returns it with the URL the member listens on instead: its port
// plus 10000. Members reach each other through the proxies, which cut a
// member from its peers (partition). A TLS peer URL is left alone.
func (e *procEtcd) peerProxy(pod, listen string) (net.Listener, string) {
	u, err := url.Parse(listen)
	if err != nil || u.Scheme != "http" {
		return nil, listen
	}
	port, _ := strconv.Atoi(u.Port())
	target := *u
	target.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port+10000))
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		e.t.Fatalf("pod %s: peer proxy: %v", pod, err)
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go e.relay(pod, in.(*net.TCPConn), target.Host)
		}
	}()
	return ln, target.String()
}

// relay forwards in to pod's member at addr. The bytes are spliced in
// the kernel: an HTTP proxy under -race cost a tenth of the campaign's
// CPU. rafthttp names the sender (X-Server-From) in the first request of
// each connection; a connection that does not is cut only with pod.
func (e *procEtcd) relay(pod string, in *net.TCPConn, addr string) {
	defer func() { _ = in.Close() }()
	br := bufio.NewReaderSize(in, 16<<10)
	from, ok := peerSender(br)
	if !ok {
		return
	}
	conn := &peerConn{from: from, to: pod, in: in}
	for waited := false; ; waited = true {
		e.mu.Lock()
		if !e.cut(from, pod) {
			if waited {
				// Replayed after the heal, it would be stale.
				e.mu.Unlock()
				return
			}
			e.peerConns[conn] = struct{}{}
			e.mu.Unlock()
			break
		}
		changed := e.cutChanged
		e.mu.Unlock()
		// Cut: no answer, as over a lost link, until healed.
		<-changed
	}
	defer func() {
		e.mu.Lock()
		delete(e.peerConns, conn)
		e.mu.Unlock()
	}()
	dialed, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	out := dialed.(*net.TCPConn)
	defer func() { _ = out.Close() }()
	if !conn.setOut(out) {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(in, out)
		_ = in.CloseWrite()
		close(done)
	}()
	head, _ := br.Peek(br.Buffered())
	if end := bytes.Index(head, []byte("\r\n\r\n")); from == 0 && end >= 0 {
		// rafthttp's prober names no sender but shares the pool of
		// connections its raft messages go over: one request only.
		head = slices.Concat(head[:end+2], []byte("Connection: close\r\n"), head[end+2:])
	}
	if _, err := out.Write(head); err == nil {
		_, _ = io.Copy(out, in)
	}
	_ = out.CloseWrite()
	<-done
}

// peerSender reads the sender's member ID from the headers of the first
// request buffered in br, without consuming them.
func peerSender(br *bufio.Reader) (uint64, bool) {
	for {
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return 0, false
		}
		head, _ := br.Peek(br.Buffered())
		if end := bytes.Index(head, []byte("\r\n\r\n")); end >= 0 {
			for line := range strings.SplitSeq(string(head[:end]), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "X-Server-From") {
					from, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
					return from, true
				}
			}
			return 0, true
		}
		if br.Buffered() == br.Size() {
			return 0, true
		}
	}
}

// cut reports whether requests from member from to pod's member are lost.
// e.mu is held.
func (e *procEtcd) cut(from uint64, pod string) bool {
	_, sender := e.cutIDs[from]
	return e.cutPods[pod] || sender
}

// partition cuts pod's member from its peers, or heals the cut: it still
// answers clients, as a member on the wrong side of a network partition
// does. Requests in flight over the cut are dropped. Healing, it returns
// how many revisions the member is behind the most recent one.
func (e *procEtcd) partition(pod string, cut bool) int64 {
	var behind int64
	var id uint64
	if cut {
		for _, m := range e.members() {
			if m.Name == pod {
				id = m.ID
			}
		}
	} else {
		var mine, newest int64
		e.mu.Lock()
		member := e.procs[pod]
		e.mu.Unlock()
		for _, p := range e.answering() {
			if st, err := e.status(p); err == nil {
				newest = max(newest, st.Header.Revision)
				if p == member {
					mine = st.Header.Revision
				}
			}
		}
		behind = newest - mine
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if cut {
		e.cutPods[pod] = true
		if id != 0 {
			e.cutIDs[id] = pod
		}
		for c := range e.peerConns {
			if e.cut(c.from, c.to) {
				c.close()
			}
		}
	} else {
		delete(e.cutPods, pod)
		for id, p := range e.cutIDs {
			if p == pod {
				delete(e.cutIDs, id)
			}
		}
	}
	close(e.cutChanged)
	e.cutChanged = make(chan struct{})
	return behind
}

func (p *proc) kill() {
	if p.running() {
		_ = p.cmd.Process.Kill()
	}
	<-p.exited
	p.closeConn()
}

// logs returns the tail of every member's log, for a violation.
func (e *procEtcd) logs() string {
	matches, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
	var b strings.Builder
	for _, m := range matches {
		data, _ := os.ReadFile(m)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(m), strings.Join(lastN(lines, 15), "\n"))
	}
	return b.String()
}

// translated is a client of procEtcd's members whose URLs it rewrites.
type translated struct {
	etcdclient.Client
	e *procEtcd
}

func (c *translated) MemberList(ctx context.Context) ([]etcdclient.Member, error) {
	ms, err := c.Client.MemberList(ctx)
	return c.e.fromMembers(ms), err
}

func (c *translated) MemberAddAsLearner(ctx context.Context, peerURL string) (etcdclient.Member, []etcdclient.Member, error) {
	m, ms, err := c.Client.MemberAddAsLearner(ctx, c.e.to(peerURL))
	return c.e.fromMember(m), c.e.fromMembers(ms), err
}

func (c *translated) Status(ctx context.Context, endpoint string) (etcdclient.Status, error) {
	return c.Client.Status(ctx, c.e.to(endpoint))
}

func (c *translated) Defragment(ctx context.Context, endpoint string) error {
	return c.Client.Defragment(ctx, c.e.to(endpoint))
}

// loadKeys are the keys the clients of a schedule on etcd processes put
// and read.
var loadKeys = []string{"/load/k0", "/load/k1", "/load/k2", "/load/k3"}

// load is the recorded client traffic of a schedule on etcd processes.
type load struct {
	h    *kvhistory.History
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// raw returns a client of every address a member may have, closed by
// t.Cleanup.
func (e *procEtcd) raw() *clientv3.Client {
	var eps []string
	for _, ep := range e.endpoints() {
		eps = append(eps, e.to(ep))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: time.Second, Logger: zap.NewNop(), TLS: e.tls})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// startLoad starts a client putting and reading loadKeys.
func (e *procEtcd) startLoad() *load {
	ctx, cancel := context.WithCancel(e.t.Context())
	l := &load{h: kvhistory.New(), stop: cancel}
	cli := e.raw()
	l.wg.Go(func() { l.h.Run(ctx, cli, loadKeys) })
	return l
}

// finish stops the clients, reads every key once more when final is set,
// and returns what porcupine found.
func (l *load) finish(ctx context.Context, cli *clientv3.Client, final bool) (kvhistory.Summary, error) {
	l.stop()
	l.wg.Wait()
	var err error
	if final {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = l.h.FinalReads(rctx, cli, loadKeys)
		cancel()
	}
	s, _ := l.h.Check(time.Minute)
	return s, err
}

// oneCluster returns an error when two running members belong to two
// clusters: another cluster ID, or two leaders in one term.
func (e *procEtcd) oneCluster() error {
	leaders := map[uint64]uint64{} // term -> leader
	for _, p := range e.answering() {
		s, err := e.status(p)
		if err != nil {
			continue
		}
		if e.clusterID == 0 {
			e.clusterID = s.Header.ClusterId
		}
		if s.Header.ClusterId != e.clusterID {
			return fmt.Errorf("member %s belongs to cluster %x, not %x", e.from(p.endpoint), s.Header.ClusterId, e.clusterID)
		}
		if s.Leader == s.Header.MemberId {
			if other, ok := leaders[s.RaftTerm]; ok && other != s.Leader {
				return fmt.Errorf("members %x and %x both lead in term %d", other, s.Leader, s.RaftTerm)
			}
			leaders[s.RaftTerm] = s.Leader
		}
	}
	return nil
}

// secretVolume is what was written of one Secret volume of a member.
type secretVolume struct {
	secret          string
	resourceVersion string
	items           []corev1.KeyToPath
}

// mountSecrets writes the Secret volumes of pod's etcd container under
// root, at their mount paths, as the kubelet does; with written (what was
// written before) only the Secrets that changed since, as the kubelet
// updates a mutable Secret's volume under a running container. Immutable
// Secrets are never written again.
func (e *procEtcd) mountSecrets(pod *corev1.Pod, root string, written map[string]secretVolume) map[string]secretVolume {
	if e.secrets == nil {
		return nil
	}
	out := map[string]secretVolume{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			dir := filepath.Join(root, m.MountPath)
			var sec corev1.Secret
			if err := e.secrets.Get(e.t.Context(), client.ObjectKey{Namespace: pod.Namespace, Name: v.Secret.SecretName}, &sec); err != nil {
				out[dir] = written[dir]
				continue
			}
			before, ok := written[dir]
			if ok && (before.resourceVersion == sec.ResourceVersion || ptr.Deref(sec.Immutable, false)) {
				out[dir] = before
				continue
			}
			items := v.Secret.Items
			if len(items) == 0 {
				for _, k := range slices.Sorted(maps.Keys(sec.Data)) {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				file := filepath.Join(dir, it.Path)
				if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
					e.t.Fatal(err)
				}
				// Renamed into place, as the kubelet swaps a volume's files.
				if err := os.WriteFile(file+".new", sec.Data[it.Key], 0o400); err != nil {
					e.t.Fatal(err)
				}
				if err := os.Rename(file+".new", file); err != nil {
					e.t.Fatal(err)
				}
			}
			out[dir] = secretVolume{secret: sec.Name, resourceVersion: sec.ResourceVersion, items: items}
		}
	}
	return out
}

// refresh updates the Secret volumes of pod's running member that changed.
func (e *procEtcd) refresh(pod *corev1.Pod) {
	e.mu.Lock()
	p := e.procs[pod.Name]
	e.mu.Unlock()
	if p == nil || p.pod != pod.UID || len(p.volumes) == 0 {
		return
	}
	p.volumes = e.mountSecrets(pod, filepath.Join(e.dir, "volumes", string(pod.UID)), p.volumes)
}
