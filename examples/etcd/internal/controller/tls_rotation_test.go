package controller_test

import (
	"bytes"
	"context"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
	"github.com/opkit-dev/opkit/statusutil"
)

// userCerts issues the three Secrets of spec.tls for cluster from leaves
// signed by ca, each with bundle as its ca.crt.
func (g *rig) userCerts(cluster string, ca *pki.CA, bundle ...*pki.CA) {
	g.t.Helper()
	var caPEM []byte
	for _, b := range bundle {
		caPEM = append(caPEM, b.CertPEM...)
	}
	wildcard := "*." + cluster + "." + g.ns + ".svc"
	for _, s := range []struct {
		name string
		req  pki.Request
	}{
		{"peer", pki.Request{CommonName: "peer", DNSNames: []string{wildcard}, Usages: pki.ServerAndClient}},
		{"server", pki.Request{CommonName: "server", DNSNames: []string{wildcard}, Usages: pki.ServerAndClient}},
		{"client", pki.Request{CommonName: "root", Usages: pki.Client}},
	} {
		s.req.Validity = 90 * 24 * time.Hour
		kp, err := ca.Issue(s.req, g.clock.Now())
		if err != nil {
			g.t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: g.ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": caPEM}}
		err = g.c.Update(g.t.Context(), sec)
		if err != nil {
			err = g.c.Create(g.t.Context(), sec)
		}
		if err != nil {
			g.t.Fatal(err)
		}
	}
}

// mountedFile returns what pod's etcd container reads at file, through its
// Secret volumes as the kubelet would write them.
func (g *rig) mountedFile(pod *corev1.Pod, file string) []byte {
	g.t.Helper()
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		rel, ok := strings.CutPrefix(file, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			key := rel
			if len(v.Secret.Items) > 0 {
				key = ""
				for _, it := range v.Secret.Items {
					if path.Clean(it.Path) == rel {
						key = it.Key
					}
				}
			}
			return g.secret(v.Secret.SecretName).Data[key]
		}
	}
	g.t.Fatalf("pod %s mounts no Secret at %s", pod.Name, file)
	return nil
}

// TestCARotation: members mount the certificates the operator accepted,
// not the user's Secrets. A change of spec.tls's Secrets that members still
// running the old certificates would not trust (a new CA alone) is refused:
// the members keep theirs, the cluster keeps healing with them, and the
// cluster is Stalled naming the Secret and the fix. The documented
// rotation (both CAs in every ca.crt, then the new leaves, then the new CA
// alone) rolls the members at each step. Before, the pods mounted the
// Secrets and the kubelet gave every member the new CA at once.
func TestCARotation(t *testing.T) {
	g := newRig(t)
	now := g.clock.Now()
	ca1, err := pki.NewCA("ca-1", pki.DefaultCAValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := pki.NewCA("ca-2", pki.DefaultCAValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	g.userCerts("r", ca1, ca1)
	g.create(tlsCluster("r", 3, &v1alpha1.TLSSpec{PeerSecretName: "peer", ServerSecretName: "server", ClientSecretName: "client"}))
	g.converge("r", 20)

	peerCA := "/etc/etcd/tls/peer/ca.crt"
	trusts := func(want ...*pki.CA) {
		t.Helper()
		var bundle []byte
		for _, ca := range want {
			bundle = append(bundle, ca.CertPEM...)
		}
		pods := g.pods("r")
		if len(pods) != 3 {
			t.Fatalf("%d pods, want 3", len(pods))
		}
		for i := range pods {
			if got := g.mountedFile(&pods[i], peerCA); !pki.SameCerts(got, bundle) {
				t.Errorf("pod %s trusts another peer CA bundle than %d CA(s) the test expects", pods[i].Name, len(want))
			}
		}
	}
	trusts(ca1)

	// A new CA alone: refused, and a lost member comes back with the old.
	g.userCerts("r", ca2, ca2)
	if err := g.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-1", Namespace: g.ns}}); err != nil {
		t.Fatal(err)
	}
	g.fake.SetHealthy(controller.PeerURL(g.get("r"), "r-1"), false)
	g.converge("r", 10)
	c := g.get("r")
	stalled := statusutil.Get(c, statusutil.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != controller.ReasonTLSChangeRefused ||
		!strings.Contains(stalled.Message, "spec.tls.peerSecretName") || !strings.Contains(stalled.Message, "both CAs") {
		t.Errorf("Stalled = %+v, want True, %s, naming spec.tls.peerSecretName and the fix", stalled, controller.ReasonTLSChangeRefused)
	}
	trusts(ca1)

	// The documented way: both CAs, then the new leaves, then the new CA.
	for i, step := range []struct {
		leaf   *pki.CA
		bundle []*pki.CA
	}{
		{ca1, []*pki.CA{ca1, ca2}},
		{ca2, []*pki.CA{ca1, ca2}},
		{ca2, []*pki.CA{ca2}},
	} {
		g.userCerts("r", step.leaf, step.bundle...)
		g.converge("r", 30)
		c := g.get("r")
		if cond := statusutil.Get(c, statusutil.ConditionStalled); cond != nil && cond.Status == metav1.ConditionTrue {
			t.Fatalf("step %d: Stalled %s: %s", i, cond.Reason, cond.Message)
		}
		trusts(step.bundle...)
		for _, p := range g.pods("r") {
			leaf, err := pki.ParseCert(g.mountedFile(&p, "/etc/etcd/tls/peer/tls.crt"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(leaf.RawIssuer, step.leaf.Cert.RawSubject) {
				t.Errorf("step %d: pod %s runs a peer certificate issued by %s", i, p.Name, leaf.Issuer)
			}
		}
	}

	// The copies of earlier certificates go once no member mounts them.
	var secrets corev1.SecretList
	if err := g.c.List(t.Context(), &secrets, client.InNamespace(g.ns)); err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, "r-tls-") {
			copies = append(copies, s.Name)
		}
	}
	if want := g.get("r").Status.TLS.SecretName; len(copies) != 1 || copies[0] != want {
		t.Errorf("copies of the certificates: %v, want only %s", copies, want)
	}
}

// TestUnusableSecretKeepsTheClusterHealing: once members run a copy, a
// Secret of spec.tls deleted or made unusable stalls or waits the cluster
// naming it, but a lost member is still replaced with the copy. Before,
// the pass stopped at the Secret and the cluster stayed a member short.
func TestUnusableSecretKeepsTheClusterHealing(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(g *rig)
		cond   string
		reason string
	}{
		{"deleted", func(g *rig) {
			if err := g.c.Delete(g.t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: g.ns}}); err != nil {
				g.t.Fatal(err)
			}
		}, statusutil.ConditionReconciling, controller.ReasonTLSSecretMissing},
		{"expired", func(g *rig) { g.clock.advance(91 * 24 * time.Hour) }, statusutil.ConditionStalled, controller.ReasonTLSSecretInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			ca, err := pki.NewCA("ca", pki.DefaultCAValidity, g.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			g.userCerts("u", ca, ca)
			g.create(tlsCluster("u", 3, &v1alpha1.TLSSpec{PeerSecretName: "peer", ServerSecretName: "server", ClientSecretName: "client"}))
			g.converge("u", 20)
			copyName := g.get("u").Status.TLS.SecretName

			tt.break_(g)
			if err := g.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "u-1", Namespace: g.ns}}); err != nil {
				t.Fatal(err)
			}
			g.fake.SetHealthy(controller.PeerURL(g.get("u"), "u-1"), false)
			g.converge("u", 10)

			c := g.get("u")
			if cond := statusutil.Get(c, tt.cond); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != tt.reason ||
				!strings.Contains(cond.Message, "spec.tls.") {
				t.Errorf("%s = %+v, want True, %s, naming the field", tt.cond, cond, tt.reason)
			}
			p := g.pod("u-1")
			if p == nil {
				t.Fatal("u-1 not recreated")
			}
			if got := p.Spec.Volumes[len(p.Spec.Volumes)-1].Secret; got == nil || got.SecretName != copyName {
				t.Errorf("u-1 mounts %+v, want the copy %s", got, copyName)
			}
		})
	}
}

// TestTLSCopyKeptWhileAnUnseenPodMountsIt: an earlier copy of spec.tls is
// deleted only once no pod mounts it, as the API server lists the pods,
// not the cache. Here the pod the first pass made mounts the first copy,
// the cache has not seen that pod yet, and the user renews the Secrets:
// the first copy must stay. Before, it was deleted on the cache's word and
// the pod waited for a Secret that was gone.
func TestTLSCopyKeptWhileAnUnseenPodMountsIt(t *testing.T) {
	g := newRig(t)
	ca, err := pki.NewCA("ca", pki.DefaultCAValidity, g.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	g.userCerts("u", ca, ca)
	g.cache = interceptor.NewClient(g.c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				return nil // no pod seen yet
			}
			return cl.List(ctx, list, opts...)
		},
	})
	g.startOperator()
	g.create(tlsCluster("u", 1, &v1alpha1.TLSSpec{PeerSecretName: "peer", ServerSecretName: "server", ClientSecretName: "client"}))
	if err := g.pass("u"); err != nil {
		t.Fatal(err)
	}
	pods := g.pods("u")
	if len(pods) != 1 {
		t.Fatalf("%d pods after the first pass, want 1", len(pods))
	}
	mounted := ""
	for _, v := range pods[0].Spec.Volumes {
		if v.Secret != nil && v.Name == "tls" {
			mounted = v.Secret.SecretName
		}
	}
	g.clock.advance(time.Minute)
	g.userCerts("u", ca, ca)
	for range 3 {
		_ = g.pass("u")
		if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: mounted}, &corev1.Secret{}); err != nil {
			t.Fatalf("copy %s that pod u-0 mounts: %v", mounted, err)
		}
	}
	if st := g.get("u").Status.TLS; st == nil || st.SecretName == mounted || !slices.Contains(st.Retired, mounted) {
		t.Errorf("status.tls = %+v, want a new copy and %s kept among the retired", st, mounted)
	}
}
