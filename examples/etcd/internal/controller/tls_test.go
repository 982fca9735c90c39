package controller_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
	"github.com/opkit-dev/opkit/statusutil"
)

func tlsCluster(name string, size int32, spec *v1alpha1.TLSSpec) *v1alpha1.EtcdCluster {
	c := cluster(name, size)
	c.Spec.TLS = spec
	return c
}

func (g *rig) secret(name string) *corev1.Secret {
	g.t.Helper()
	var s corev1.Secret
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: name}, &s); err != nil {
		g.t.Fatalf("Secret %s: %v", name, err)
	}
	return &s
}

func (g *rig) pods(cluster string) []corev1.Pod {
	g.t.Helper()
	var pods corev1.PodList
	if err := g.c.List(g.t.Context(), &pods, client.InNamespace(g.ns), client.MatchingLabels{controller.LabelCluster: cluster}); err != nil {
		g.t.Fatal(err)
	}
	return pods.Items
}

// handshake runs a mutual TLS handshake between a server presenting the
// certificate of Secret server and a client with cfg asking for
// serverName, as the operator dials a member: nil when both accept.
func handshake(t *testing.T, server *corev1.Secret, cfg *tls.Config, serverName string) error {
	t.Helper()
	cert, err := tls.X509KeyPair(server.Data[corev1.TLSCertKey], server.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	clientCAs, err := pki.ParseCerts(server.Data["ca.crt"])
	if err != nil {
		t.Fatal(err)
	}
	srvCfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert}
	srvCfg.ClientCAs = clientPool(clientCAs)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer func() { _ = conn.Close() }()
		err = conn.(*tls.Conn).Handshake()
		if err == nil {
			_, err = conn.Write([]byte("ok"))
		}
		served <- err
	}()
	cfg = cfg.Clone()
	cfg.ServerName = serverName
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return errors.Join(err, <-served)
	}
	return <-served
}

// TestTLSAuto: spec.tls.auto makes a CA and the three certificates, held
// like the cluster's other children; the members serve TLS with them and
// require client certificates; every etcd client the operator makes dials
// with the client certificate, which a member's server certificate
// accepts; and a renewal, once due, restarts the members one at a time on
// their data.
func TestTLSAuto(t *testing.T) {
	g := newRig(t)
	g.create(tlsCluster("t", 3, &v1alpha1.TLSSpec{Auto: &v1alpha1.AutoTLSSpec{}}))
	g.converge("t", 20)
	c := g.get("t")

	guard := g.guard("t")
	for _, name := range []string{"t-ca", "t-peer-tls", "t-server-tls", "t-client-tls"} {
		s := g.secret(name)
		if s.Type != corev1.SecretTypeTLS || !metav1.IsControlledBy(s, c) || !slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == guard.UID }) {
			t.Errorf("Secret %s: type %s, owners %+v; want kubernetes.io/tls controlled by the cluster and held by its guard", name, s.Type, s.OwnerReferences)
		}
	}
	now := g.clock.Now()
	wildcard := "*.t." + g.ns + ".svc"
	for name, want := range map[string]pki.Expect{
		"t-peer-tls":   {Usages: pki.ServerAndClient, DNSNames: []string{wildcard}},
		"t-server-tls": {Usages: pki.ServerAndClient, DNSNames: []string{wildcard, "t-client." + g.ns + ".svc"}},
		"t-client-tls": {Usages: pki.Client},
	} {
		s := g.secret(name)
		if _, err := pki.Verify(s.Data["tls.crt"], s.Data["tls.key"], g.secret("t-ca").Data["tls.crt"], want, now); err != nil {
			t.Errorf("Secret %s: %v", name, err)
		}
	}

	for _, p := range g.pods("t") {
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		for _, want := range []string{"--client-cert-auth", "--peer-client-cert-auth", "--listen-client-urls=https://", "--listen-peer-urls=https://",
			"--initial-advertise-peer-urls=https://" + p.Name + ".t." + g.ns + ".svc:2380", "--trusted-ca-file=", "--listen-metrics-urls=http://0.0.0.0:2381"} {
			if !strings.Contains(args, want) {
				t.Errorf("pod %s: args lack %q: %s", p.Name, want, args)
			}
		}
		var secrets []string
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil {
				secrets = append(secrets, v.Secret.SecretName)
			}
		}
		if diff := cmp.Diff([]string{c.Status.TLS.SecretName}, secrets); diff != "" {
			t.Errorf("pod %s mounts Secrets (-want +got):\n%s", p.Name, diff)
		}
		if port := p.Spec.Containers[0].ReadinessProbe.HTTPGet.Port.IntValue(); port != controller.MetricsPort {
			t.Errorf("pod %s: readiness probe on port %d, want the plain metrics port %d", p.Name, port, controller.MetricsPort)
		}
	}

	dials := g.dialed()
	if len(dials) == 0 {
		t.Fatal("no etcd client made")
	}
	for i, d := range dials {
		if d.TLS == nil {
			t.Fatalf("etcd client %d dialed without TLS", i)
		}
	}
	// The operator's client configuration is accepted by a member's server
	// certificate, and accepts it, for every member's name and the client
	// Service's.
	for _, name := range []string{"t-0.t." + g.ns + ".svc", "t-2.t." + g.ns + ".svc", "t-client." + g.ns + ".svc"} {
		if err := handshake(t, g.secret("t-server-tls"), dials[len(dials)-1].TLS, name); err != nil {
			t.Errorf("handshake as %s: %v", name, err)
		}
	}
	if err := handshake(t, g.secret("t-server-tls"), dials[len(dials)-1].TLS, "t-0.other."+g.ns+".svc"); err == nil {
		t.Error("handshake for another cluster's member name succeeded")
	}

	st := c.Status.TLS
	if st == nil || st.Revision == "" || st.NotAfter == nil || st.RenewAt == nil {
		t.Fatalf("status.tls = %+v", st)
	}
	if got, want := st.RenewAt.Sub(now), 243*24*time.Hour; got < want-24*time.Hour || got > want+24*time.Hour {
		t.Errorf("renewal in %s, want about two thirds of a year (%s)", got, want)
	}

	// Nothing is issued again before it is due.
	serial := g.secret("t-server-tls").ResourceVersion
	if err := g.pass("t"); err != nil {
		t.Fatal(err)
	}
	if rv := g.secret("t-server-tls").ResourceVersion; rv != serial {
		t.Errorf("server certificate rewritten before it was due")
	}

	// Renewal: due, issued again, and rolled out member by member.
	before := c.Status.Members
	g.clock.advance(st.RenewAt.Sub(now) + time.Hour)
	if err := g.pass("t"); err != nil {
		t.Fatal(err)
	}
	renewed := g.get("t")
	if renewed.Status.TLS.Revision == st.Revision {
		t.Fatal("status.tls.revision unchanged after the renewal")
	}
	if !g.hasEvent(controller.EventCertificatesIssued) {
		t.Errorf("no %s event", controller.EventCertificatesIssued)
	}
	g.converge("t", 40)
	after := g.get("t")
	for _, p := range g.pods("t") {
		if got := p.Annotations[controller.AnnotationPodRevision]; got != controller.PodRevision(after) {
			t.Errorf("pod %s: revision %s, want the renewed certificates' %s", p.Name, got, controller.PodRevision(after))
		}
	}
	if diff := cmp.Diff(before, after.Status.Members); diff != "" {
		t.Errorf("members changed (-before +after); a renewal restarts them on their data:\n%s", diff)
	}
	s := g.secret("t-server-tls")
	if _, err := pki.Verify(s.Data["tls.crt"], s.Data["tls.key"], s.Data["ca.crt"], pki.Expect{Usages: pki.Server}, g.clock.Now()); err != nil {
		t.Errorf("renewed server certificate: %v", err)
	}
}

// TestTLSSecrets: with Secrets named in spec.tls nothing is created until
// they exist; an unusable one stalls the cluster with a message naming the
// Secret, the field and the problem; once fixed the members mount them,
// and a Secret replaced (a cert-manager renewal) rolls the members.
func TestTLSSecrets(t *testing.T) {
	g := newRig(t)
	spec := &v1alpha1.TLSSpec{PeerSecretName: "peer", ServerSecretName: "server", ClientSecretName: "client"}
	g.create(tlsCluster("b", 1, spec))

	if err := g.pass("b"); err != nil {
		t.Fatal(err)
	}
	c := g.get("b")
	if cond := statusutil.Get(c, "Reconciling"); cond == nil || cond.Reason != controller.ReasonTLSSecretMissing || !strings.Contains(cond.Message, "spec.tls.peerSecretName") {
		t.Errorf("Reconciling = %+v, want reason %s naming spec.tls.peerSecretName", cond, controller.ReasonTLSSecretMissing)
	}
	if pods := g.pods("b"); len(pods) != 0 {
		t.Fatalf("%d pods made before the certificates exist", len(pods))
	}

	now := g.clock.Now()
	ca, err := pki.NewCA("user-ca", pki.DefaultCAValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	wildcard := "*.b." + g.ns + ".svc"
	issue := func(name string, req pki.Request) {
		t.Helper()
		req.Validity = 90 * 24 * time.Hour
		kp, err := ca.Issue(req, now)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": kp.CAPEM}}
		if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(s), &corev1.Secret{}); err == nil {
			if err := g.c.Update(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := g.c.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	// A peer certificate for server auth only: members could not dial
	// each other with it.
	issue("peer", pki.Request{CommonName: "peer", DNSNames: []string{wildcard}, Usages: pki.Server})
	issue("server", pki.Request{CommonName: "server", DNSNames: []string{wildcard}, Usages: pki.ServerAndClient})
	issue("client", pki.Request{CommonName: "root", Usages: pki.Client})
	// Stalled, and looked at again: the operator may not list or watch
	// Secrets, so no event would report the fix.
	res, err := g.r.Reconcile(t.Context(), crreconcile.Request{NamespacedName: types.NamespacedName{Namespace: g.ns, Name: "b"}})
	if err != nil || res.RequeueAfter <= 0 {
		t.Errorf("pass with an unusable peer certificate = %+v, %v; want a requeue and no error", res, err)
	}
	c = g.get("b")
	if cond := statusutil.Get(c, "Stalled"); cond == nil || cond.Reason != controller.ReasonTLSSecretInvalid ||
		!strings.Contains(cond.Message, "Secret peer (spec.tls.peerSecretName)") || !strings.Contains(cond.Message, "client auth") {
		t.Errorf("Stalled = %+v, want reason %s naming Secret peer, its field and the missing client auth", cond, controller.ReasonTLSSecretInvalid)
	}

	issue("peer", pki.Request{CommonName: "peer", DNSNames: []string{wildcard}, Usages: pki.ServerAndClient})
	g.converge("b", 10)
	c = g.get("b")
	if c.Status.TLS == nil || c.Status.TLS.RenewAt != nil {
		t.Errorf("status.tls = %+v, want a revision and no renewal time (the user renews)", c.Status.TLS)
	}
	pod := g.pods("b")[0]
	var mounted []string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			mounted = append(mounted, v.Secret.SecretName)
		}
	}
	if diff := cmp.Diff([]string{c.Status.TLS.SecretName}, mounted); diff != "" {
		t.Errorf("mounted Secrets (-want +got):\n%s", diff)
	}
	revision := pod.Annotations[controller.AnnotationPodRevision]

	// cert-manager renews the server certificate.
	issue("server", pki.Request{CommonName: "server", DNSNames: []string{wildcard}, Usages: pki.ServerAndClient})
	g.converge("b", 20)
	pod = g.pods("b")[0]
	if pod.Annotations[controller.AnnotationPodRevision] == revision {
		t.Error("the member was not restarted with the renewed server certificate")
	}
	// The operator never writes a Secret it was given.
	for _, name := range []string{"peer", "server", "client"} {
		if refs := g.secret(name).OwnerReferences; len(refs) != 0 {
			t.Errorf("Secret %s got owners %+v", name, refs)
		}
	}
}

// TestTLSIsChosenAtCreation: spec.tls cannot be added, removed or
// changed, and needs either auto or all three Secret names.
func TestTLSIsChosenAtCreation(t *testing.T) {
	g := newRig(t)
	g.create(cluster("plain", 1))
	g.create(tlsCluster("auto", 1, &v1alpha1.TLSSpec{Auto: &v1alpha1.AutoTLSSpec{}}))
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.EtcdCluster)
		on     string
		want   string
	}{
		{"add tls", func(c *v1alpha1.EtcdCluster) { c.Spec.TLS = &v1alpha1.TLSSpec{Auto: &v1alpha1.AutoTLSSpec{}} }, "plain", "tls can only be chosen when the cluster is created"},
		{"remove tls", func(c *v1alpha1.EtcdCluster) { c.Spec.TLS = nil }, "auto", "tls can only be chosen when the cluster is created"},
		{"auto to Secrets", func(c *v1alpha1.EtcdCluster) {
			c.Spec.TLS = &v1alpha1.TLSSpec{PeerSecretName: "p", ServerSecretName: "s", ClientSecretName: "c"}
		}, "auto", "tls is immutable"},
	} {
		c := g.get(tc.on)
		tc.change(c)
		if err := g.c.Update(t.Context(), c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: update error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	for _, spec := range []*v1alpha1.TLSSpec{
		{},
		{PeerSecretName: "p", ServerSecretName: "s"},
		{Auto: &v1alpha1.AutoTLSSpec{}, ClientSecretName: "c"},
	} {
		c := tlsCluster("bad", 1, spec)
		c.Namespace = g.ns
		err := g.c.Create(t.Context(), c)
		if err == nil || !strings.Contains(err.Error(), "set auto, or all of peerSecretName, serverSecretName and clientSecretName") {
			t.Errorf("create with tls %+v: error = %v", spec, err)
		}
	}
}

func (g *rig) guard(cluster string) *corev1.ConfigMap {
	g.t.Helper()
	var cm corev1.ConfigMap
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: controller.GuardName(cluster)}, &cm); err != nil {
		g.t.Fatalf("guard of %s: %v", cluster, err)
	}
	return &cm
}

// hasEvent drains the events recorded so far and reports whether one has
// reason.
func (g *rig) hasEvent(reason string) bool {
	return slices.ContainsFunc(g.drain(), func(e string) bool { return strings.Contains(e, " "+reason+" ") })
}

func clientPool(certs []*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}
