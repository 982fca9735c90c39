package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/webhook"
)

// The configurations of internal/testapi/webhook.
const validating, mutating = "validating-webhook-configuration", "mutating-webhook-configuration"

// TestRotateCertificates runs the rotator against envtest's API server,
// which calls https://localhost:<port> with the caBundle the rotator
// writes; a goroutine plays the kubelet, copying the Secret into CertDir a
// second late. Admission works with the provisioned certificate, and keeps
// working, with no failed request, across rotations of a 30-second
// certificate renewed 20 seconds before expiry.
func TestRotateCertificates(t *testing.T) {
	ctx := t.Context()
	secret := emptySecret(t)
	certDir := t.TempDir()
	go playKubelet(ctx, t, secret, certDir, time.Second)

	mgr, opts := certManager(t, certDir, ctrl.Options{})
	if err := webhook.SetupWithManager[*testv1.Widget](mgr, widgetHooks{}); err != nil {
		t.Fatal(err)
	}
	ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
		Secret: secret, CertDir: certDir, DNSName: "localhost",
		Validating: []string{validating}, Mutating: []string{mutating},
		Validity: 30 * time.Second, RenewBefore: 20 * time.Second, CheckEvery: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ready(nil); !errors.Is(err, webhook.ErrCertificatesNotReady) {
		t.Fatalf("ready before start = %v, want ErrCertificatesNotReady", err)
	}
	testkit.Run(t, mgr)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return ready(nil) == nil, nil
	}); err != nil {
		t.Fatalf("not ready within a minute: %v", ready(nil))
	}
	ca := secretData(t, secret)["ca.crt"]
	for _, cfg := range []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}} {
		for _, b := range caBundles(t, cfg) {
			if !bytes.Equal(b, ca) {
				t.Errorf("%T's caBundle is not the Secret's CA", cfg)
			}
		}
	}

	certs := map[string]bool{}
	var refused []error
	for i := 0; i < 300; i++ {
		certs[string(secretData(t, secret)["tls.crt"])] = true
		w := &testv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: "w" + strconv.Itoa(i)}}
		if i%10 == 0 {
			w.Spec.Message = "invalid"
		}
		err := env.Client.Create(ctx, w)
		switch {
		case i%10 == 0 && !apierrors.IsInvalid(err):
			refused = append(refused, err)
		case i%10 != 0 && err != nil:
			refused = append(refused, err)
		case i%10 != 0 && w.Spec.Message != "defaulted":
			t.Errorf("%s stored with message %q, want defaulted", w.Name, w.Spec.Message)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(refused) > 0 {
		t.Errorf("%d of 300 requests failed across rotations; first: %v", len(refused), refused[0])
	}
	if len(certs) < 3 {
		t.Errorf("%d serving certificates in 30 s, want at least 3 (two rotations)", len(certs))
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(servedCert(t, opts.Host, opts.Port), firstCert(t, secretData(t, secret)["tls.crt"])), nil
	}); err != nil {
		t.Errorf("the server does not serve the Secret's latest certificate")
	}
}

// TestRotateCertificatesReadiness is a replica that does not hold the
// leader lease, started while its kubelet still mounts an older Secret (a
// pod scheduled before the leader filled it, or a CA rotation): it writes
// nothing, is not ready while it would serve a certificate the caBundles
// do not trust, and is ready within a second of the kubelet's copy.
func TestRotateCertificatesReadiness(t *testing.T) {
	ctx := t.Context()
	ns, secret, data, configs := leaderDone(t)
	certDir := t.TempDir()
	mount(t, certDir, issue(t, "localhost"))

	mgr, _ := certManager(t, certDir, ctrl.Options{LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "leader"})
	ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
		Secret: secret, CertDir: certDir, DNSName: "localhost",
		Validating: []string{validating}, Mutating: []string{mutating},
		// Converts with strategy None: no caBundle to trust.
		Conversions: []string{"widgets.test.opkit.dev"},
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, mgr)
	copied := time.Now().Add(5 * time.Second)
	time.AfterFunc(time.Until(copied), func() { mount(t, certDir, data) })
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return ready(nil) == nil, nil
	})
	switch at := time.Now(); {
	case err != nil:
		t.Fatalf("not ready 25 s after the kubelet's copy: %v", ready(nil))
	case at.Before(copied):
		t.Fatalf("ready %s before the kubelet's copy, serving a certificate no caBundle trusts", copied.Sub(at).Round(time.Millisecond))
	case at.Sub(copied) > time.Second:
		t.Errorf("ready %s after the kubelet's copy, want within 1s", at.Sub(copied).Round(time.Millisecond))
	default:
		t.Logf("ready %s after the kubelet's copy", at.Sub(copied).Round(time.Millisecond))
	}
	if diff := cmp.Diff(configs, injectCA(t, nil)); diff != "" {
		t.Errorf("a replica without the lease wrote the configurations (-before +after resourceVersions):\n%s", diff)
	}
	if got := secretData(t, secret); !bytes.Equal(got["tls.crt"], data["tls.crt"]) {
		t.Error("a replica without the lease rewrote the Secret")
	}
}

// emptySecret is the Secret an installer creates empty, in a new
// namespace, with envtest's caBundles put back when t ends.
func emptySecret(t *testing.T) types.NamespacedName {
	t.Helper()
	restoreCABundles(t)
	ns := namespace(t)
	secret := types.NamespacedName{Namespace: ns, Name: "webhook-server-cert"}
	if err := env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name}}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// leaderDone is the leader's work as a follower replica finds it: in a
// new namespace, a filled Secret, its CA in every caBundle, and the
// leader election Lease "leader" and the rotator's held by another. It returns the
// namespace, the Secret, its data and the configurations'
// resourceVersions.
func leaderDone(t *testing.T) (string, types.NamespacedName, map[string][]byte, map[string]string) {
	t.Helper()
	ctx := t.Context()
	restoreCABundles(t)
	ns := namespace(t)
	secret := types.NamespacedName{Namespace: ns, Name: "webhook-server-cert"}
	data := issue(t, "localhost")
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name}, Data: data}); err != nil {
		t.Fatal(err)
	}
	configs := injectCA(t, data["ca.crt"])
	for _, name := range []string{"leader", secret.Name + "-rotator"} {
		if err := env.Client.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new("other"), LeaseDurationSeconds: new(int32(3600)),
				AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ns, secret, data, configs
}

// certManager is a manager on envtest serving the installed
// configurations from certDir, with opts' leader election.
func certManager(t *testing.T, certDir string, opts ctrl.Options) (ctrl.Manager, crwebhook.Options) {
	t.Helper()
	return certManagerWith(t, certDir, opts, nil)
}

// certManagerWith is certManager whose requests observe sees first; with
// observe, its webhook server listens on a port of its own, not the one
// the configurations call.
func certManagerWith(t *testing.T, certDir string, opts ctrl.Options, observe func(*http.Request)) (ctrl.Manager, crwebhook.Options) {
	t.Helper()
	wo := env.WebhookOptions()
	wo.CertDir = certDir
	cfg := env.Config
	if observe != nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wo.Port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		cfg = rest.CopyConfig(env.Config)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return observingTransport{rt, observe}
		}
	}
	opts.Scheme = env.Scheme
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.HealthProbeBindAddress = "0"
	opts.Controller = config.Controller{SkipNameValidation: new(true)}
	opts.WebhookServer = webhook.NewServer(wo)
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mgr, wo
}

// issue is a Secret's data as cert-controller writes it: a CA named after
// dnsName and a serving certificate for dnsName that it signs.
func issue(t *testing.T, dnsName string) map[string][]byte {
	t.Helper()
	cr := &rotator.CertRotator{CAName: dnsName + "-ca", CAOrganization: "opkit", DNSName: dnsName,
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM, "tls.crt": crt, "tls.key": key}
}

// mount writes data's serving certificate into dir as the kubelet does.
func mount(t *testing.T, dir string, data map[string][]byte) {
	t.Helper()
	for _, name := range []string{"tls.key", "tls.crt"} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, data[name], 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}

// injectCA writes ca, unless nil, into every webhook of both
// configurations and returns their resourceVersions.
func injectCA(t *testing.T, ca []byte) map[string]string {
	t.Helper()
	rv := map[string]string{}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	caBundles(t, v)
	caBundles(t, m)
	if ca != nil {
		for i := range v.Webhooks {
			v.Webhooks[i].ClientConfig.CABundle = ca
		}
		for i := range m.Webhooks {
			m.Webhooks[i].ClientConfig.CABundle = ca
		}
		for _, obj := range []client.Object{v, m} {
			if err := env.Client.Update(t.Context(), obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, obj := range []client.Object{v, m} {
		rv[obj.GetName()] = obj.GetResourceVersion()
	}
	return rv
}

// playKubelet copies secret's tls.crt and tls.key into dir, lag after
// each change, as the kubelet updates a mounted Secret.
func playKubelet(ctx context.Context, t *testing.T, secret types.NamespacedName, dir string, lag time.Duration) {
	var last []byte
	for ctx.Err() == nil {
		var s corev1.Secret
		if err := env.Client.Get(ctx, secret, &s); err == nil && len(s.Data["tls.crt"]) > 0 && !bytes.Equal(s.Data["tls.crt"], last) {
			time.Sleep(lag)
			mount(t, dir, s.Data)
			last = s.Data["tls.crt"]
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restoreCABundles puts back envtest's caBundles when t ends, for the
// tests that serve envtest's certificate.
func restoreCABundles(t *testing.T) {
	t.Helper()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	for _, obj := range []client.Object{v, m} {
		caBundles(t, obj)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, obj := range []client.Object{v, m} {
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				live := obj.DeepCopyObject().(client.Object)
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
					return false, err
				}
				obj.SetResourceVersion(live.GetResourceVersion())
				return env.Client.Update(ctx, obj) == nil, nil
			})
			if err != nil {
				t.Errorf("restoring %s's caBundle: %v", obj.GetName(), err)
			}
		}
	})
}

// caBundles reads obj, one of the two configurations, and returns the
// caBundle of each of its webhooks.
func caBundles(t *testing.T, obj client.Object) [][]byte {
	t.Helper()
	var out [][]byte
	switch c := obj.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		if err := env.Client.Get(t.Context(), types.NamespacedName{Name: validating}, c); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		if err := env.Client.Get(t.Context(), types.NamespacedName{Name: mutating}, c); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	return out
}

func secretData(t *testing.T, key types.NamespacedName) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if err := env.Client.Get(t.Context(), key, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// servedCert is the DER of the certificate the server at host:port
// presents.
func servedCert(t *testing.T, host string, port int) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// firstCert is the DER of the first certificate in PEM data.
func firstCert(t *testing.T, data []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	if _, err := x509.ParseCertificate(b.Bytes); err != nil {
		t.Fatal(err)
	}
	return b.Bytes
}

func TestRotateCertificatesRefuses(t *testing.T) {
	ok := webhook.Certificates{Secret: types.NamespacedName{Namespace: "ns", Name: "certs"}, CertDir: "/certs", DNSName: "svc.ns.svc"}
	tests := []struct {
		name string
		edit func(*webhook.Certificates)
		want string
	}{
		{"no secret", func(c *webhook.Certificates) { c.Secret.Namespace = "" }, "Certificates.Secret"},
		{"no cert dir", func(c *webhook.Certificates) { c.CertDir = "" }, "Certificates.CertDir"},
		{"no DNS name", func(c *webhook.Certificates) { c.DNSName = "" }, "Certificates.DNSName"},
		{"renewal after expiry", func(c *webhook.Certificates) { c.Validity, c.RenewBefore = time.Hour, 2*time.Hour }, "RenewBefore (2h0m0s) must be below Validity (1h0m0s)"},
		{"renewal beyond the default validity", func(c *webhook.Certificates) { c.RenewBefore = 400 * 24 * time.Hour }, "must be below Validity (8760h0m0s)"},
		{"checks too rare", func(c *webhook.Certificates) { c.RenewBefore, c.CheckEvery = time.Hour, time.Hour }, "CheckEvery (1h0m0s) must be below RenewBefore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
			if err != nil {
				t.Fatal(err)
			}
			c := ok
			tt.edit(&c)
			if _, err := webhook.RotateCertificates(mgr, c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RotateCertificates = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestNewServerWaitsForItsCertificate: stopped before its certificate
// comes, the server returns without error, never having served.
func TestNewServerWaitsForItsCertificate(t *testing.T) {
	opts := env.WebhookOptions()
	srv := webhook.NewServer(crwebhook.Options{Host: opts.Host, Port: opts.Port, CertDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Errorf("stopped while waiting: %v", err)
	}
	if err := srv.StartedChecker()(nil); err == nil {
		t.Error("started without a certificate")
	}
}

// TestRotateCertificatesMisnamedConfiguration: a configuration name that
// no configuration has (a typo, another release's prefix) keeps the
// replica not ready, naming it: the rotator injects its CA nowhere, and
// the API server would call a webhook it does not trust. Before, an
// absent configuration counted as trusted.
func TestRotateCertificatesMisnamedConfiguration(t *testing.T) {
	ns, secret, data, _ := leaderDone(t)
	certDir := t.TempDir()
	mount(t, certDir, data)
	mgr, _ := certManager(t, certDir, ctrl.Options{LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "leader"})
	ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
		Secret: secret, CertDir: certDir, DNSName: "localhost",
		Validating: []string{validating, "no-such-configuration"}, Mutating: []string{mutating},
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, mgr)
	// Long enough for the server to start and a check to pass otherwise.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := ready(nil); err == nil {
			t.Fatal("ready while Certificates.Validating names a configuration that does not exist")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := ready(nil); !errors.Is(err, webhook.ErrCertificatesNotReady) || !strings.Contains(err.Error(), "no-such-configuration") {
		t.Errorf("readiness error %v, want ErrCertificatesNotReady naming no-such-configuration", err)
	}
}

// TestOneRotatorWithoutLeaderElection: two replicas without leader
// election (sharded, say), each rotating one Secret's 30-second
// certificate: both get ready, and only one of them ever writes the
// Secret. Before, the rotator ran on the manager's leader, which
// without leader election is every replica: both renewed each
// certificate, racing for the Secret and the caBundles.
func TestOneRotatorWithoutLeaderElection(t *testing.T) {
	ctx := t.Context()
	secret := emptySecret(t)
	var mu sync.Mutex
	writers := map[string]int{}
	var readies []func() error
	for _, replica := range []string{"a", "b"} {
		certDir := t.TempDir()
		go playKubelet(ctx, t, secret, certDir, time.Second)
		mgr, _ := certManagerWith(t, certDir, ctrl.Options{}, func(req *http.Request) {
			if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/secrets/") {
				mu.Lock()
				writers[replica]++
				mu.Unlock()
			}
		})
		ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
			Secret: secret, CertDir: certDir, DNSName: "localhost",
			Validating: []string{validating}, Mutating: []string{mutating},
			Validity: 30 * time.Second, RenewBefore: 20 * time.Second, CheckEvery: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Run(t, mgr)
		readies = append(readies, func() error { return ready(nil) })
	}
	for _, ready := range readies {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return ready() == nil, nil
		}); err != nil {
			t.Fatalf("not ready within a minute: %v", ready())
		}
	}
	time.Sleep(25 * time.Second) // two renewals
	mu.Lock()
	defer mu.Unlock()
	if len(writers) != 1 {
		t.Errorf("Secret writes by replica: %v; want one writer", writers)
	}
}

type observingTransport struct {
	rt      http.RoundTripper
	observe func(*http.Request)
}

func (o observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	o.observe(req)
	return o.rt.RoundTrip(req)
}

// TestReplicaTrustsItsOwnTargets: a replica that does not hold the
// rotator's Lease, naming a configuration the rotator's holder does not
// (a rolling upgrade that adds a webhook, as turning sharding on does),
// writes the Secret's CA into that configuration's empty caBundle itself
// and gets ready. Before, it waited for the holder, which never wrote it,
// and the holder, an old pod, went only once the new ones were ready.
func TestReplicaTrustsItsOwnTargets(t *testing.T) {
	ctx := t.Context()
	ns, secret, data, _ := leaderDone(t)
	certDir := t.TempDir()
	mount(t, certDir, data)
	extra := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "extra-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "extra.test.opkit.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: new("https://localhost:1/extra")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"test.opkit.dev"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           new(admissionregistrationv1.Ignore),
		}},
	}
	if err := env.Client.Create(ctx, extra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), extra) })

	mgr, _ := certManager(t, certDir, ctrl.Options{})
	ready, err := webhook.RotateCertificates(mgr, webhook.Certificates{
		Secret: secret, CertDir: certDir, DNSName: "localhost",
		Validating: []string{validating, extra.Name}, Mutating: []string{mutating},
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, mgr)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return ready(nil) == nil, nil
	}); err != nil {
		t.Fatalf("not ready within 30 s: %v", ready(nil))
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(extra), extra); err != nil {
		t.Fatal(err)
	}
	if b := extra.Webhooks[0].ClientConfig.CABundle; !bytes.Equal(b, data["ca.crt"]) {
		t.Errorf("%s's caBundle is not the Secret's CA: %q", extra.Name, b)
	}
	if got := secretData(t, secret); !bytes.Equal(got["tls.crt"], data["tls.crt"]) {
		t.Error("a replica without the rotator's Lease rewrote the Secret")
	}
}
