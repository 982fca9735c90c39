package webhook

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Flags are an operator's webhook settings on its command line. Set the
// installer's names as the fields' defaults, BindFlags, and after parsing
// give the manager Server() and call Setup. The webhooks are off (Port 0)
// unless the installer sets --webhook-port, so that the operator also runs
// outside a cluster, where the API server cannot call it.
type Flags struct {
	// Port serves the webhooks; 0 serves none.
	Port int
	// CertDir holds tls.crt and tls.key (default controller-runtime's).
	CertDir string
	// CertSecret, when set, is the Secret of the operator's namespace,
	// mounted at CertDir, in which it keeps its own certificate
	// (RotateCertificates). Empty: another party, such as cert-manager,
	// writes CertDir and the caBundles.
	CertSecret string
	// Service is the Service in the operator's namespace that the API
	// server calls: the serving certificate's name.
	Service string
	// ValidatingConfiguration and MutatingConfiguration get the CA in
	// their caBundle (with CertSecret); empty names none.
	ValidatingConfiguration, MutatingConfiguration string
	// Conversions are CRDs with a conversion webhook whose caBundle gets
	// the CA. Not a flag: the operator's code knows its CRDs.
	Conversions []string
	// CertValidity and CertRenewBefore are Certificates' Validity and
	// RenewBefore.
	CertValidity, CertRenewBefore time.Duration
	// Namespace is the operator's (default $POD_NAMESPACE, else the pod's
	// ServiceAccount's). Not a flag.
	Namespace string
}

// BindFlags registers --webhook-port, --webhook-cert-dir,
// --webhook-cert-secret, --webhook-service,
// --validating-webhook-configuration, --mutating-webhook-configuration,
// --webhook-cert-validity and --webhook-cert-renew-before on fs, with f's
// fields as their defaults.
func (f *Flags) BindFlags(fs *flag.FlagSet) {
	if f.CertDir == "" {
		f.CertDir = defaultCertDir()
	}
	fs.IntVar(&f.Port, "webhook-port", f.Port, "port the admission webhooks are served on; 0 serves none, for runs outside a cluster (the installers set 9443)")
	fs.StringVar(&f.CertDir, "webhook-cert-dir", f.CertDir, "directory of the webhook server's tls.crt and tls.key; the server starts once they are there")
	fs.StringVar(&f.CertSecret, "webhook-cert-secret", f.CertSecret, "Secret in the pod's namespace, mounted at --webhook-cert-dir, where the operator keeps its own CA and serving certificate and renews them; empty: another party provides them (cert-manager)")
	fs.StringVar(&f.Service, "webhook-service", f.Service, "Service in the pod's namespace the API server calls the webhooks through: the serving certificate's name (with --webhook-cert-secret)")
	fs.StringVar(&f.ValidatingConfiguration, "validating-webhook-configuration", f.ValidatingConfiguration, "ValidatingWebhookConfiguration whose caBundle gets the operator's CA (with --webhook-cert-secret); empty: none")
	fs.StringVar(&f.MutatingConfiguration, "mutating-webhook-configuration", f.MutatingConfiguration, "MutatingWebhookConfiguration whose caBundle gets the operator's CA (with --webhook-cert-secret); empty: none")
	fs.DurationVar(&f.CertValidity, "webhook-cert-validity", f.CertValidity, "how long a serving certificate of --webhook-cert-secret is valid (0: one year)")
	fs.DurationVar(&f.CertRenewBefore, "webhook-cert-renew-before", f.CertRenewBefore, "how long before its expiry the certificate is renewed (0: 90 days); it must exceed the kubelet's delay in updating the mounted Secret, about a minute")
}

// ErrNoNamespace is returned by Setup when the operator's namespace is
// unknown: outside a pod, with no Namespace and no $POD_NAMESPACE.
var ErrNoNamespace = errors.New("webhook: the operator's namespace is unknown: set POD_NAMESPACE")

// Enabled reports whether webhooks are served (Port is not 0).
func (f *Flags) Enabled() bool { return f.Port != 0 }

// Server returns the manager's webhook server (NewServer), or nil when the
// webhooks are off.
func (f *Flags) Server() crwebhook.Server {
	if !f.Enabled() {
		return nil
	}
	return NewServer(crwebhook.Options{Port: f.Port, CertDir: f.certDir()})
}

// Setup adds mgr's "webhook" readiness check, ready once the server
// serves; with CertSecret it first starts RotateCertificates. It does
// nothing when the webhooks are off. Register the webhooks
// (SetupWithManager) too.
func (f *Flags) Setup(mgr ctrl.Manager) error {
	if !f.Enabled() {
		return nil
	}
	ready := mgr.GetWebhookServer().StartedChecker()
	if f.CertSecret != "" {
		if f.Service == "" {
			return errors.New("webhook: --webhook-service: name the Service the API server calls, which names the certificate")
		}
		ns, err := f.namespace()
		if err != nil {
			return fmt.Errorf("--webhook-cert-secret: %w", err)
		}
		c := Certificates{
			Secret:      types.NamespacedName{Namespace: ns, Name: f.CertSecret},
			CertDir:     f.certDir(),
			DNSName:     f.Service + "." + ns + ".svc",
			Conversions: f.Conversions,
			Validity:    f.CertValidity,
			RenewBefore: f.CertRenewBefore,
		}
		if f.ValidatingConfiguration != "" {
			c.Validating = []string{f.ValidatingConfiguration}
		}
		if f.MutatingConfiguration != "" {
			c.Mutating = []string{f.MutatingConfiguration}
		}
		if ready, err = RotateCertificates(mgr, c); err != nil {
			return fmt.Errorf("--webhook-cert-secret: %w", err)
		}
	}
	if err := mgr.AddReadyzCheck("webhook", ready); err != nil {
		return fmt.Errorf("webhook: adding the readiness check: %w", err)
	}
	return nil
}

func (f *Flags) certDir() string { return cmp.Or(f.CertDir, defaultCertDir()) }

// namespace is Namespace, else $POD_NAMESPACE, else the namespace of the
// pod's ServiceAccount.
func (f *Flags) namespace() (string, error) {
	if ns := cmp.Or(f.Namespace, os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns, nil
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoNamespace, err)
	}
	return strings.TrimSpace(string(b)), nil
}
