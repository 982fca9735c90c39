package controller_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// rotation are the stages of a CA rotation as TLSSpec documents it: the
// CA that signs the leaves, and those in every ca.crt. Moving to a
// neighbouring stage is safe; any other move the operator must refuse.
var rotation = []struct {
	leaf   int
	bundle []int
}{
	{0, []int{0}}, {0, []int{0, 1}}, {1, []int{0, 1}}, {1, []int{1}},
}

// campaignTLS is a TLS schedule's certificates: the Secrets of spec.tls,
// which the campaign rewrites as a user rotating a CA does.
type campaignTLS struct {
	cas [2]*pki.CA
	ips []net.IP
	// stage is the rotation stage the Secrets show; refused, when not
	// -1, is a stage they show that the members must not get.
	stage, refused int
	// accepted are the Secrets as written at stage: a refused stage is
	// put back as they were, so that it restarts no member.
	accepted []*corev1.Secret
	// client is what the campaign's clients dial with: a certificate of
	// either CA, chosen by what the member asks for, trusting both.
	client *tls.Config
}

// tlsSpec is the spec.tls of a campaign's TLS schedule.
var tlsSpec = v1alpha1.TLSSpec{PeerSecretName: "peer", ServerSecretName: "server", ClientSecretName: "client"}

// startTLS makes s a TLS schedule: two CAs, the Secrets at stage 0, and
// the clients' configuration; member addresses are in the certificates
// since processes listen on loopback addresses, not names.
func (s *schedule) startTLS() *v1alpha1.TLSSpec {
	g := s.g
	t := &campaignTLS{refused: -1, ips: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if s.proc != nil {
		// Ordinals grow with every member replaced under a new name.
		for i := range 64 {
			t.ips = append(t.ips, net.ParseIP(fmt.Sprintf("%s%d", s.proc.base, i+1)))
		}
	}
	roots := x509.NewCertPool()
	var pairs []tls.Certificate
	for i := range t.cas {
		ca, err := pki.NewCA(fmt.Sprintf("campaign-ca-%d", i), pki.DefaultCAValidity, time.Now())
		if err != nil {
			g.t.Fatal(err)
		}
		t.cas[i] = ca
		roots.AddCert(ca.Cert)
		kp, err := ca.Issue(pki.Request{CommonName: "campaign", Usages: pki.Client, Validity: 24 * time.Hour}, time.Now())
		if err != nil {
			g.t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			g.t.Fatal(err)
		}
		pairs = append(pairs, pair)
	}
	t.client = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: pairs}
	s.tls = t
	t.accepted = s.writeSecrets(0)
	spec := tlsSpec
	s.base.Spec.TLS = &spec
	if s.proc != nil {
		s.proc.tls, s.proc.secrets = t.client, g.c
		s.cli = s.proc.raw()
	}
	return &spec
}

// writeSecrets writes the Secrets of spec.tls at a rotation stage, with
// new leaves, and returns them.
func (s *schedule) writeSecrets(stage int) []*corev1.Secret {
	g, t := s.g, s.tls
	var secrets []*corev1.Secret
	st := rotation[stage]
	var bundle []byte
	for _, i := range st.bundle {
		bundle = append(bundle, t.cas[i].CertPEM...)
	}
	wildcard := fmt.Sprintf("*.%s.%s.svc", s.name, g.ns)
	for _, r := range []struct {
		name string
		req  pki.Request
	}{
		{tlsSpec.PeerSecretName, pki.Request{CommonName: "peer", DNSNames: []string{wildcard, wildcard + ".cluster.local"}, IPAddresses: t.ips, Usages: pki.ServerAndClient}},
		{tlsSpec.ServerSecretName, pki.Request{CommonName: "server", DNSNames: []string{wildcard}, IPAddresses: t.ips, Usages: pki.ServerAndClient}},
		{tlsSpec.ClientSecretName, pki.Request{CommonName: "root", Usages: pki.Client}},
	} {
		r.req.Validity = 90 * 24 * time.Hour
		// Wall time: etcd checks validity by it, and the rig's clock runs
		// ahead when hours pass.
		kp, err := t.cas[st.leaf].Issue(r.req, time.Now())
		if err != nil {
			g.t.Fatal(err)
		}
		secrets = append(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: g.ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": bundle}})
	}
	for _, sec := range secrets {
		s.putSecret(sec.DeepCopy())
	}
	return secrets
}

// putSecret creates or replaces sec.
func (s *schedule) putSecret(sec *corev1.Secret) {
	if err := s.g.c.Update(s.g.t.Context(), sec); err != nil {
		if err := s.g.c.Create(s.g.t.Context(), sec); err != nil {
			s.g.t.Fatal(err)
		}
	}
}

// rotateCA moves the Secrets of spec.tls to another rotation stage: a
// neighbouring one, or one the operator must refuse; a refused one is
// put back at the next rotation or when faults stop.
func (s *schedule) rotateCA() {
	t := s.tls
	if t.refused >= 0 {
		s.logf("spec.tls Secrets back to rotation stage %d", t.stage)
		t.refused = -1
		for _, sec := range t.accepted {
			s.putSecret(sec.DeepCopy())
		}
		return
	}
	next := t.stage
	for next == t.stage {
		next = s.rt.IntN(len(rotation))
	}
	if next == t.stage-1 || next == t.stage+1 {
		s.logf("CA rotation: spec.tls Secrets from stage %d to %d", t.stage, next)
		t.stage = next
		t.accepted = s.writeSecrets(next)
		return
	}
	s.logf("spec.tls Secrets from stage %d to %d, which the operator must refuse", t.stage, next)
	t.refused = next
	s.writeSecrets(next)
}

// checkTrust checks that the members' copies of the certificates trust
// each other: two members that do not would not talk.
func (s *schedule) checkTrust(live map[string]*corev1.Pod) {
	if s.tls == nil {
		return
	}
	copies := map[string]map[string][]byte{}
	for _, p := range live {
		for _, v := range p.Spec.Volumes {
			if v.Secret == nil || copies[v.Secret.SecretName] != nil || !strings.HasPrefix(v.Secret.SecretName, controller.TLSCopyName(s.name, "")) {
				continue
			}
			var sec corev1.Secret
			if err := s.g.c.Get(s.g.t.Context(), client.ObjectKey{Namespace: s.g.ns, Name: v.Secret.SecretName}, &sec); err == nil {
				copies[sec.Name] = sec.Data
			}
		}
	}
	names := slices.Sorted(maps.Keys(copies))
	for i, a := range names {
		for _, b := range names[i+1:] {
			if err := controller.TrustEachOther(s.cluster, copies[a], copies[b], s.g.clock.Now()); err != nil {
				s.violate("members mount certificates %s and %s, which do not trust each other: %v", a, b, err)
			}
		}
	}
}
