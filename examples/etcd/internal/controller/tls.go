package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
	"github.com/opkit-dev/opkit/reconcile"
)

// Condition reasons of spec.tls.
const (
	// ReasonTLSSecretMissing (Reconciling=True): a Secret spec.tls names
	// does not exist yet (cert-manager may still be issuing it); nothing
	// is created before it does.
	ReasonTLSSecretMissing = "TLSSecretMissing"
	// ReasonTLSSecretInvalid (Stalled=True): a Secret spec.tls names holds
	// no usable certificate for the cluster; the message names the Secret,
	// the field and what is wrong. Looked at again every secretRecheck.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonTLSChangeRefused (Stalled=True): the Secrets of spec.tls
	// changed to certificates that members still running the old ones
	// would not trust; the members keep the old ones, and the message
	// names the Secret and the rotation that works.
	ReasonTLSChangeRefused = "TLSChangeRefused"
)

// secretRecheck is how often a cluster stalled on an unusable Secret reads
// it again. The operator gets Secrets by name and never lists or watches
// them (that right would let it read every Secret of the cluster), so no
// event reports a fix; a converged cluster re-reads its Secrets on every
// health poll (healthRequeue) anyway, which is how a renewal is seen.
const secretRecheck = 30 * time.Second

// EventCertificatesIssued (Normal): spec.tls.auto made or renewed the
// certificates the note names; the members restart one at a time with
// them.
const EventCertificatesIssued = "CertificatesIssued"

// Where members mount their certificates, and the port of their plain
// HTTP health endpoints (the client port asks for a client certificate,
// which the kubelet's probe has not).
const (
	tlsMountRoot = "/etc/etcd/tls"
	// MetricsPort serves /metrics, /health, /livez and /readyz over plain
	// HTTP on members of a TLS cluster.
	MetricsPort = 2381
	// ClientCommonName is the common name of the client certificate
	// spec.tls.auto makes; etcd takes it as the user name once its own
	// authentication is enabled.
	ClientCommonName = "root"
)

// CASecretName names the CA Secret spec.tls.auto makes for the cluster
// named cluster; PeerSecretName, ServerSecretName and ClientSecretName
// name its certificates.
func CASecretName(cluster string) string { return cluster + "-ca" }

// PeerSecretName names the members' peer certificate of spec.tls.auto.
func PeerSecretName(cluster string) string { return cluster + "-peer-tls" }

// ServerSecretName names the members' server certificate of spec.tls.auto.
func ServerSecretName(cluster string) string { return cluster + "-server-tls" }

// ClientSecretName names the client certificate of spec.tls.auto.
func ClientSecretName(cluster string) string { return cluster + "-client-tls" }

// TLSCopyName names the operator's copy of the certificates of TLS
// revision revision of cluster, which its members mount.
func TLSCopyName(cluster, revision string) string { return cluster + "-tls-" + revision }

// tlsRole is one of the three certificates of a TLS cluster.
type tlsRole struct {
	// name is the role as messages say it; field its spec.tls field.
	name, field string
	// secret is the Secret's name for the cluster.
	secret func(*v1alpha1.EtcdCluster) string
	// want is what the certificate must be, and request how spec.tls.auto
	// issues it.
	want    func(*v1alpha1.EtcdCluster) pki.Expect
	request func(*v1alpha1.EtcdCluster) pki.Request
}

// memberWildcard is the name a certificate for every member of c covers.
func memberWildcard(c *v1alpha1.EtcdCluster) string {
	return fmt.Sprintf("*.%s.%s.svc", c.Name, c.Namespace)
}

// The roles, in the order they are made and checked.
var (
	peerRole = tlsRole{
		name: "peer", field: "peerSecretName",
		secret: func(c *v1alpha1.EtcdCluster) string { return tlsSecretNames(c)[0] },
		want: func(c *v1alpha1.EtcdCluster) pki.Expect {
			return pki.Expect{Usages: pki.ServerAndClient, DNSNames: []string{memberWildcard(c)}}
		},
		request: func(c *v1alpha1.EtcdCluster) pki.Request {
			return pki.Request{CommonName: c.Name + "-peer", DNSNames: memberNames(c), Usages: pki.ServerAndClient}
		},
	}
	serverRole = tlsRole{
		name: "server", field: "serverSecretName",
		secret: func(c *v1alpha1.EtcdCluster) string { return tlsSecretNames(c)[1] },
		want: func(c *v1alpha1.EtcdCluster) pki.Expect {
			return pki.Expect{Usages: pki.ServerAndClient, DNSNames: []string{memberWildcard(c)}}
		},
		request: func(c *v1alpha1.EtcdCluster) pki.Request {
			svc := c.Name + "-client"
			names := append(memberNames(c), svc, svc+"."+c.Namespace, svc+"."+c.Namespace+".svc",
				svc+"."+c.Namespace+".svc.cluster.local", "localhost")
			return pki.Request{CommonName: c.Name + "-server", DNSNames: names, Usages: pki.ServerAndClient}
		},
	}
	clientRole = tlsRole{
		name: "client", field: "clientSecretName",
		secret: func(c *v1alpha1.EtcdCluster) string { return tlsSecretNames(c)[2] },
		want:   func(*v1alpha1.EtcdCluster) pki.Expect { return pki.Expect{Usages: pki.Client} },
		request: func(*v1alpha1.EtcdCluster) pki.Request {
			return pki.Request{CommonName: ClientCommonName, Usages: pki.Client}
		},
	}
	tlsRoles = []tlsRole{peerRole, serverRole, clientRole}
)

// memberNames are the names of every member of c, with and without the
// usual cluster domain.
func memberNames(c *v1alpha1.EtcdCluster) []string {
	return []string{memberWildcard(c), memberWildcard(c) + ".cluster.local"}
}

// tlsSecretNames returns the peer, server and client Secrets of c's TLS.
func tlsSecretNames(c *v1alpha1.EtcdCluster) [3]string {
	t := c.Spec.TLS
	if t.Auto != nil {
		return [3]string{PeerSecretName(c.Name), ServerSecretName(c.Name), ClientSecretName(c.Name)}
	}
	return [3]string{t.PeerSecretName, t.ServerSecretName, t.ClientSecretName}
}

func tlsEnabled(c *v1alpha1.EtcdCluster) bool { return c.Spec.TLS != nil }

// certLifetime is spec.tls.auto's certificate lifetime.
func certLifetime(c *v1alpha1.EtcdCluster) time.Duration {
	if a := c.Spec.TLS.Auto; a != nil && a.CertificateLifetime != nil && a.CertificateLifetime.Duration > 0 {
		return a.CertificateLifetime.Duration
	}
	return pki.DefaultValidity
}

// tlsProblem is why a cluster's certificates cannot be used now: a pass
// waits (missing) or stalls (invalid) with its reason.
type tlsProblem struct {
	reason string
	err    error
}

func (p *tlsProblem) Error() string { return p.err.Error() }

func (p *tlsProblem) Unwrap() error { return p.err }

// result ends a pass with p: waiting for a missing Secret, stalled on an
// unusable one; either is looked at again after after.
func (p *tlsProblem) result(after time.Duration) reconcile.Result {
	if p.reason == ReasonTLSSecretMissing {
		return reconcile.Waiting(p.reason, p.Error(), after)
	}
	return reconcile.Terminal(p.reason, p).RecheckAfter(after)
}

// certificates is what a pass read of a TLS cluster's Secrets.
type certificates struct {
	// data is their copy's content (see TLSCopyName).
	data map[string][]byte
	// notAfter is the first expiry of the three certificates; renewAt
	// the first renewal (spec.tls.auto only).
	notAfter, renewAt time.Time
	// issued names the Secrets spec.tls.auto made or renewed in this
	// pass.
	issued []string
}

// ensureCertificates returns the certificates of TLS cluster c, after
// making or renewing them for spec.tls.auto. Secrets are read through
// h.Secrets (they are not cached) and those made are held by guard, so
// that the final backup can still dial the members.
func (h *ClusterHooks) ensureCertificates(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap) (*certificates, error) {
	now := h.now()
	// The Secrets issueAuto read or wrote, which readCertificates need not
	// read again.
	known := map[string]*corev1.Secret{}
	var issued []string
	if c.Spec.TLS.Auto != nil {
		var err error
		if issued, err = h.issueAuto(ctx, c, guard, now, known); err != nil {
			return nil, err
		}
	}
	certs, err := readCertificates(ctx, h.secrets(), c, now, known)
	if err != nil {
		return nil, err
	}
	certs.issued = issued
	return certs, nil
}

func (h *ClusterHooks) secrets() client.Reader {
	if h.Secrets != nil {
		return h.Secrets
	}
	return h.Client
}

// isTLSProblem returns the tlsProblem err wraps, if any.
func isTLSProblem(err error) (*tlsProblem, bool) {
	var p *tlsProblem
	ok := errors.As(err, &p)
	return p, ok
}

// certificates makes, renews (spec.tls.auto) and checks c's certificates,
// copies them for the members unless members would not trust them (see
// accept), records the copy in status.tls and returns the operator's TLS
// configuration for c's members: nil without spec.tls. aside is a problem
// of the Secrets that the pass works around with the members' copy; a
// non-nil Result ends the pass: nothing is made before there is a copy.
func (h *ClusterHooks) certificates(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap) (_ *tls.Config, aside *tlsProblem, _ *reconcile.Result) {
	if !tlsEnabled(c) {
		c.Status.TLS = nil
		return nil, nil, nil
	}
	certs, err := h.ensureCertificates(ctx, c, guard)
	problem, ok := isTLSProblem(err)
	if err != nil && !ok {
		res := childError(err)
		return nil, nil, &res
	}
	acc, err := h.accept(ctx, c, guard, certs, problem)
	if err != nil {
		res := childError(err)
		if p, ok := isTLSProblem(err); ok {
			res = p.result(secretRecheck)
		}
		return nil, nil, &res
	}
	revision := memberRevision(acc.copy.Data)
	if certs != nil && len(certs.issued) > 0 {
		note := fmt.Sprintf("issued %s", strings.Join(certs.issued, ", "))
		if c.Status.TLS != nil && c.Status.TLS.Revision != "" && c.Status.TLS.Revision != revision {
			note += "; the members restart one at a time with them"
		}
		emit(h.Recorder, c, normal, EventCertificatesIssued, "IssueCertificates", note)
		ctrl.LoggerFrom(ctx).Info("certificates issued", "etcdcluster", klog.KObj(c), "secrets", certs.issued)
	}
	st := &v1alpha1.TLSStatus{Revision: revision, SecretName: acc.copy.Name, Retired: acc.retired}
	if c.Status.TLS != nil && acc.refused != nil {
		st.NotAfter, st.RenewAt = c.Status.TLS.NotAfter, c.Status.TLS.RenewAt
	} else if certs != nil {
		st.NotAfter = ptr.To(metav1.NewTime(certs.notAfter))
		if !certs.renewAt.IsZero() {
			st.RenewAt = ptr.To(metav1.NewTime(certs.renewAt))
		}
	}
	c.Status.TLS = st
	return acc.client, acc.refused, nil
}
