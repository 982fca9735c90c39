// Package etcdtest runs real etcd members as local processes on 127.0.0.1
// for the etcd example's integration tests.
//
// The etcd binary is bin/etcd of the repository (built by `make etcd`) or
// $OPKIT_BIN/etcd. A missing binary fails the test with a message naming the
// make target; it never skips. Every process is stopped by t.Cleanup, and
// every data directory lives in t.TempDir().
package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/internal/repo"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// Binary returns the path of the etcd binary or fails t naming `make etcd`.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := binary()
	if err != nil {
		t.Fatalf("etcd binary: %v", err)
	}
	return path
}

func binary() (string, error) { return repo.Tool("etcd", "etcd") }

// Member is one etcd member process.
type Member struct {
	Name      string
	DataDir   string
	PeerURL   string
	ClientURL string
	LogPath   string
	// Certs, when set, make the member speak TLS with them to its peers
	// and clients (PeerURL and ClientURL are https), require client
	// certificates on both, and serve /readyz on MetricsURL.
	Certs      *Certs
	MetricsURL string
	// ExtraArgs are passed to etcd after the others, for example
	// --force-new-cluster; the next Start reads them again.
	ExtraArgs []string

	bin    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// NewMember allocates ports and a data directory for a member named name.
// It does not start it.
func NewMember(t testing.TB, name string) *Member {
	t.Helper()
	return newMember(t, name, nil)
}

// NewTLSMember is NewMember for a member of a TLS cluster with certs.
func NewTLSMember(t testing.TB, name string, certs *Certs) *Member {
	t.Helper()
	return newMember(t, name, certs)
}

func newMember(t testing.TB, name string, certs *Certs) *Member {
	t.Helper()
	dir := t.TempDir()
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	m := &Member{
		Name:      name,
		DataDir:   filepath.Join(dir, "data"),
		PeerURL:   fmt.Sprintf("%s://127.0.0.1:%d", scheme, testkit.MustFreePort(t)),
		ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, testkit.MustFreePort(t)),
		LogPath:   filepath.Join(dir, name+".log"),
		Certs:     certs,
		bin:       Binary(t),
	}
	if certs != nil {
		m.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d", testkit.MustFreePort(t))
	}
	return m
}

// ReadyURL is where the member answers /readyz as its pod's readiness
// probe asks: the client URL, or the plain metrics URL of a TLS member.
func (m *Member) ReadyURL() string {
	if m.MetricsURL != "" {
		return m.MetricsURL + "/readyz"
	}
	return m.ClientURL + "/readyz"
}

// dialOptions are the etcdclient options that reach ms: the client
// certificate of the first TLS member's Certs.
func dialOptions(t testing.TB, ms []*Member) []etcdclient.DialOption {
	for _, m := range ms {
		if m.Certs != nil {
			return []etcdclient.DialOption{etcdclient.WithTLS(m.Certs.ClientTLS(t))}
		}
	}
	return nil
}

// InitialCluster returns the --initial-cluster value for ms.
func InitialCluster(ms ...*Member) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

// Start starts the member with the given --initial-cluster and
// --initial-cluster-state ("new" or "existing"). The process is stopped by
// t.Cleanup.
func (m *Member) Start(t testing.TB, initialCluster, state string) {
	t.Helper()
	logf, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("opening log: %v", err)
	}
	args := []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", "opkit-test",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--log-level", "warn",
	}
	if m.Certs != nil {
		args = append(args, m.Certs.args()...)
		args = append(args, "--listen-metrics-urls", m.MetricsURL)
	}
	args = append(args, m.ExtraArgs...)
	cmd := exec.Command(m.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("starting etcd %s: %v", m.Name, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(m.exited)
	}()
	t.Cleanup(func() { m.Stop() })
}

// Running reports whether the process is running.
func (m *Member) Running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Stop stops the process with SIGTERM (SIGKILL after 10s) and waits for it.
func (m *Member) Stop() {
	if !m.Running() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// Kill kills the process with SIGKILL and waits for it: a crash.
func (m *Member) Kill() {
	if !m.Running() {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// Log returns the member's log, for failure messages.
func (m *Member) Log() string {
	b, _ := os.ReadFile(m.LogPath)
	return string(b)
}

// StartCluster starts n members as a new cluster and waits until every one
// reports a leader.
func StartCluster(t testing.TB, prefix string, n int) []*Member {
	t.Helper()
	return StartTLSCluster(t, prefix, n, nil)
}

// StartTLSCluster is StartCluster for members speaking TLS with certs
// (plain HTTP if nil).
func StartTLSCluster(t testing.TB, prefix string, n int, certs *Certs) []*Member {
	t.Helper()
	ms := make([]*Member, n)
	for i := range ms {
		ms[i] = newMember(t, fmt.Sprintf("%s-%d", prefix, i), certs)
	}
	ic := InitialCluster(ms...)
	for _, m := range ms {
		m.Start(t, ic, "new")
	}
	for _, m := range ms {
		WaitHealthy(t, m, 30*time.Second)
	}
	return ms
}

// WaitHealthy waits until m reports a leader and no errors, or fails t.
func WaitHealthy(t testing.TB, m *Member, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	c, err := etcdclient.NewFactory(time.Second).New(ctx, []string{m.ClientURL}, dialOptions(t, []*Member{m})...)
	if err != nil {
		t.Fatalf("client for %s: %v", m.Name, err)
	}
	defer func() { _ = c.Close() }()
	var last error
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		s, err := c.Status(sctx, m.ClientURL)
		scancel()
		if err == nil && s.Healthy() {
			return
		}
		last = err
		if err == nil {
			last = fmt.Errorf("not healthy: %+v", s)
		}
		if !m.Running() {
			t.Fatalf("etcd %s exited:\n%s", m.Name, m.Log())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcd %s not healthy within %s: %v\n%s", m.Name, timeout, last, m.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Client returns a client on the members' client URLs, closed by t.Cleanup.
func Client(t testing.TB, ms ...*Member) etcdclient.Client {
	t.Helper()
	eps := make([]string, 0, len(ms))
	for _, m := range ms {
		eps = append(eps, m.ClientURL)
	}
	c, err := etcdclient.NewFactory(2*time.Second).New(t.Context(), eps, dialOptions(t, ms)...)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// PID returns the process ID of the running member, 0 if not started.
func (m *Member) PID() int {
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Keys returns every key under prefix, with its value, that the member c
// reaches holds (a linearizable read).
func Keys(t testing.TB, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := c.Get(t.Context(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the keys under %q: %v", prefix, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// Fragment leaves free pages in the database of the cluster c reaches:
// it writes n values of size bytes under prefix+"junk/", deletes them and
// compacts the history, which frees the pages without shrinking the file
// (only a defragmentation does that). It returns the revision compacted
// to.
func Fragment(t testing.TB, c *clientv3.Client, prefix string, n, size int) int64 {
	t.Helper()
	ctx := t.Context()
	value := strings.Repeat("x", size)
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("%sjunk/%06d", prefix, i), value); err != nil {
			t.Fatalf("writing junk: %v", err)
		}
	}
	del, err := c.Delete(ctx, prefix+"junk/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("deleting junk: %v", err)
	}
	if _, err := c.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compacting: %v", err)
	}
	return del.Header.Revision
}

// RawClient returns a go.etcd.io client on the members' client URLs,
// closed by t.Cleanup.
func RawClient(t testing.TB, ms ...*Member) *clientv3.Client {
	t.Helper()
	eps := make([]string, 0, len(ms))
	for _, m := range ms {
		eps = append(eps, m.ClientURL)
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if opts := etcdclient.Dial(dialOptions(t, ms)...); opts.TLS != nil {
		cfg.TLS = opts.TLS
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Corrupt flips one byte in the middle of the file at path, as a bit rot
// of a stored backup would: its size stays, its SHA-256 changes.
func Corrupt(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Fatalf("%s is empty: nothing to corrupt", path)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
