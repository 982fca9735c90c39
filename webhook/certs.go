package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ErrCertificatesNotReady is the readiness error of RotateCertificates
// until the CA is injected.
var ErrCertificatesNotReady = errors.New("webhook: the serving certificate is not mounted and injected yet")

// Certificates is a webhook server's self-managed serving certificate: a CA
// and a certificate it signs, kept in a Secret that the pods mount, with the
// CA written into the caBundle of the named configurations and CRDs.
type Certificates struct {
	// Secret holds ca.crt, ca.key, tls.crt and tls.key. It must exist
	// (installers create it empty) and be mounted at CertDir.
	Secret types.NamespacedName
	// CertDir is the webhook server's CertDir, where Secret is mounted.
	CertDir string
	// DNSName is the name the API server calls, such as
	// webhook-service.my-system.svc.
	DNSName string
	// Validating and Mutating name webhook configurations, Conversions
	// CRDs with a conversion webhook: their caBundle gets the CA.
	Validating, Mutating, Conversions []string
	// Validity is how long a serving certificate is valid (default one
	// year) and RenewBefore how long before its expiry a new one is made
	// (default 90 days). RenewBefore must exceed the kubelet's delay in
	// updating the mounted Secret (about a minute), or requests fail.
	Validity, RenewBefore time.Duration
	// CheckEvery is how often expiry is checked (default 12 hours, or a
	// quarter of RenewBefore when that is shorter); it must be below
	// RenewBefore.
	CheckEvery time.Duration
}

// defaultValidity is cert-controller's serving certificate validity.
const defaultValidity = 365 * 24 * time.Hour

func (c Certificates) check() error {
	switch {
	case c.Secret.Name == "" || c.Secret.Namespace == "":
		return errors.New("webhook: Certificates.Secret: set the name and namespace of the Secret the pods mount")
	case c.CertDir == "":
		return errors.New("webhook: Certificates.CertDir: set the webhook server's CertDir, where the Secret is mounted")
	case c.DNSName == "":
		return errors.New("webhook: Certificates.DNSName: set the Service's name, <service>.<namespace>.svc")
	case c.RenewBefore >= cmp.Or(c.Validity, defaultValidity):
		return fmt.Errorf("webhook: Certificates.RenewBefore (%s) must be below Validity (%s)", c.RenewBefore, cmp.Or(c.Validity, defaultValidity))
	case c.CheckEvery != 0 && c.RenewBefore != 0 && c.CheckEvery >= c.RenewBefore:
		return fmt.Errorf("webhook: Certificates.CheckEvery (%s) must be below RenewBefore (%s)", c.CheckEvery, c.RenewBefore)
	}
	return nil
}

// RotateCertificates provisions and rotates c with
// open-policy-agent/cert-controller on one replica at a time, elected with
// the Lease "<Secret's name>-rotator" in the Secret's namespace (RBAC:
// leases get, create, update there), whether or not the manager elects a
// leader. Give the manager a
// server from NewServer, which waits for the certificate the kubelet
// mounts. Add the returned checker as a readiness check, on every replica:
// it fails with ErrCertificatesNotReady until every caBundle trusts the
// mounted certificate (a replica writes the Secret's CA into one that
// does not, when that CA signs the mounted certificate) (a named configuration or CRD that does not exist
// fails it too, naming it), and stays ready after.
//
// Footgun: a CA rotation (every ten years) replaces the caBundle at once,
// and requests fail until the kubelet mounts the new Secret.
func RotateCertificates(mgr ctrl.Manager, c Certificates) (healthz.Checker, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.CheckEvery == 0 && c.RenewBefore != 0 && c.RenewBefore/4 < 12*time.Hour {
		c.CheckEvery = c.RenewBefore / 4
	}
	var hooks []rotator.WebhookInfo
	for _, w := range []struct {
		names []string
		typ   rotator.WebhookType
	}{{c.Validating, rotator.Validating}, {c.Mutating, rotator.Mutating}, {c.Conversions, rotator.CRDConversion}} {
		for _, n := range w.names {
			hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: w.typ})
		}
	}
	cr := &rotator.CertRotator{
		SecretKey: c.Secret,
		// Controller names are unique per process: one per Secret.
		ControllerName:         "cert-rotator-" + c.Secret.Namespace + "-" + c.Secret.Name,
		CertDir:                c.CertDir,
		CAName:                 c.DNSName + "-ca",
		CAOrganization:         "opkit",
		DNSName:                c.DNSName,
		IsReady:                make(chan struct{}), // unused: see trusted
		Webhooks:               hooks,
		ServerCertDuration:     c.Validity,
		LookaheadInterval:      c.RenewBefore,
		RotationCheckFrequency: c.CheckEvery,
	}
	// One writer, elected apart from the manager's leader (which, with
	// leader election off, is every replica): replicas racing to fill the
	// Secret and the caBundles conflicted, and the losers backed off for
	// minutes.
	err := mgr.Add(&rotatorElection{mgr: mgr, lease: c.Secret.Name + "-rotator", c: c, setup: func(m ctrl.Manager) error {
		if err := rotator.AddRotator(m, cr); err != nil {
			return fmt.Errorf("webhook: adding the certificate rotator: %w", err)
		}
		return nil
	}})
	if err != nil {
		return nil, fmt.Errorf("webhook: adding the certificate rotator: %w", err)
	}
	t := &trusted{
		reader:   mgr.GetAPIReader(),
		writer:   mgr.GetClient(),
		secret:   c.Secret,
		certFile: filepath.Join(c.CertDir, "tls.crt"),
		dnsName:  c.DNSName,
		targets:  hooks,
		started:  mgr.GetWebhookServer().StartedChecker(),
	}
	return t.check, nil
}

// NewServer is controller-runtime's webhook server, started only once
// opts.CertDir holds its certificate: a mounted Secret that a rotator or
// cert-manager fills after the pod starts. (controller-runtime's own fails
// to start without one, and registering webhooks after it started races.)
func NewServer(opts crwebhook.Options) crwebhook.Server {
	// Set here rather than left to controller-runtime's defaults, so that
	// Start waits for the very file the server reads.
	opts.CertDir = cmp.Or(opts.CertDir, defaultCertDir())
	opts.CertName = cmp.Or(opts.CertName, "tls.crt")
	return &server{Server: crwebhook.NewServer(opts), cert: filepath.Join(opts.CertDir, opts.CertName)}
}

// defaultCertDir is controller-runtime's default CertDir.
func defaultCertDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

type server struct {
	crwebhook.Server
	cert string
}

func (s *server) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(s.cert)
		return err == nil, nil
	})
	if err != nil {
		return nil // stopped before the certificate came
	}
	return s.Server.Start(ctx)
}
