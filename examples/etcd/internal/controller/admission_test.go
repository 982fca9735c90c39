package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// TestValidateAdmission: what admission refuses beyond Validate and the
// CRD's rules, and what it lets through so that an object stored while
// invalid stays editable.
func TestValidateAdmission(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	issue := issuer(t, now)
	secret := func(name string, usages pki.Usages) client.Object {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Type: corev1.SecretTypeTLS,
			Data: issue("c", "ns", usages)}
	}
	// server-only is a peer certificate for server auth only: members
	// could not dial each other with it.
	secrets := []client.Object{secret("peer", pki.ServerAndClient), secret("server", pki.ServerAndClient), secret("client", pki.Client),
		secret("server-only", pki.Server)}
	hooks := &controller.ClusterHooks{ClusterConfig: controller.ClusterConfig{
		Secrets: fake.NewClientBuilder().WithObjects(secrets...).Build(),
		Now:     func() time.Time { return now },
	}}
	withTLS := func(peer string) func(*v1alpha1.EtcdCluster) {
		return func(c *v1alpha1.EtcdCluster) {
			c.Spec.TLS = &v1alpha1.TLSSpec{PeerSecretName: peer, ServerSecretName: "server", ClientSecretName: "client"}
		}
	}
	running := func(version string) func(*v1alpha1.EtcdCluster) {
		return func(c *v1alpha1.EtcdCluster) { c.Spec.Version, c.Status.Version = version, version }
	}
	tests := []struct {
		name         string
		old          func(*v1alpha1.EtcdCluster) // nil: a create
		obj          func(*v1alpha1.EtcdCluster)
		want         []string // each error's field and a part of its message
		wantWarnings []string
	}{
		{name: "create", obj: func(*v1alpha1.EtcdCluster) {}},
		{name: "create with a backup schedule that does not parse", obj: func(c *v1alpha1.EtcdCluster) {
			c.Spec.Backup = &v1alpha1.BackupSpec{Schedule: "hourly", StoreRef: v1alpha1.StoreReference{PVCName: "b"}}
		}, want: []string{"spec.backup.schedule", "hourly"}},
		{name: "create with a defragmentation schedule that does not parse", obj: func(c *v1alpha1.EtcdCluster) {
			c.Spec.Defragmentation = &v1alpha1.DefragmentationSpec{Schedule: "0 0 * *"}
		}, want: []string{"spec.defragmentation.schedule", "0 0 * *"}},
		{name: "a patch upgrade", old: running("3.6.5"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.6.16" }},
		{name: "a minor upgrade", old: running("3.5.26"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.6.16" }},
		{name: "a minor upgrade from too old a patch", old: running("3.5.20"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.6.16" },
			want: []string{"spec.version", "needs 3.5.26 or later first"}},
		{name: "a downgrade", old: running("3.6.16"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.5.26" },
			want: []string{"spec.version", "is a downgrade; restore a backup into a new cluster instead"}},
		{name: "a skipped minor version", old: running("3.4.30"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.6.16" },
			want: []string{"spec.version", "skips a minor version"}},
		{name: "a version stored while invalid, unchanged", old: func(c *v1alpha1.EtcdCluster) {
			c.Spec.Version, c.Status.Version = "3.5.26", "3.6.16"
		}, obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Size = 5 }},
		{name: "a schedule stored while invalid, unchanged", old: func(c *v1alpha1.EtcdCluster) {
			c.Spec.Defragmentation = &v1alpha1.DefragmentationSpec{Schedule: "never"}
		}, obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Size = 5 }},
		{name: "a schedule stored while invalid, changed to another", old: func(c *v1alpha1.EtcdCluster) {
			c.Spec.Defragmentation = &v1alpha1.DefragmentationSpec{Schedule: "never"}
		}, obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Defragmentation.Schedule = "seldom" }, want: []string{"spec.defragmentation.schedule", "seldom"}},
		{name: "create with a version whose members have no /readyz", obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.5.10" },
			want: []string{"spec.version", "3.5.11 or later", "/readyz"}},
		{name: "create at the first version with /readyz", obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.5.11" }},
		{name: "a patch upgrade to a version whose members have no /readyz", old: running("3.5.5"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.5.9" },
			want: []string{"spec.version", "3.5.11 or later"}},
		{name: "create with the operator's labels on the pods", obj: func(c *v1alpha1.EtcdCluster) {
			c.Spec.PodTemplate.Labels = map[string]string{"team": "a", controller.LabelVoter: "true"}
		}, want: []string{"spec.podTemplate.labels[etcd.opkit.dev/voter]", "the operator's", "remove it"}},
		{name: "create with the guard's label on the pods", obj: func(c *v1alpha1.EtcdCluster) {
			c.Spec.PodTemplate.Labels = map[string]string{"opkit.dev/held-by": "x"}
		}, want: []string{"spec.podTemplate.labels[opkit.dev/held-by]"}},
		{name: "an operator's label stored, unchanged", old: func(c *v1alpha1.EtcdCluster) {
			c.Spec.PodTemplate.Labels = map[string]string{controller.LabelServing: "true"}
		}, obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Size = 5 }},
		{name: "create with TLS Secrets", obj: withTLS("peer")},
		{name: "create with a TLS Secret not there yet", obj: withTLS("later"),
			wantWarnings: []string{`spec.tls.peerSecretName: Secret "later" is not in namespace ns yet: the cluster starts once it is`}},
		{name: "create with a TLS Secret that would not serve", obj: withTLS("server-only"),
			want: []string{"spec.tls.peerSecretName", `"server-only"`, "the peer certificate", "client auth", "fix the Secret or name another"}},
		{name: "an update of a cluster with TLS is not checked again", old: withTLS("server-only"), obj: func(c *v1alpha1.EtcdCluster) { c.Spec.Size = 5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster("c", 3)
			c.Namespace = "ns"
			var old *v1alpha1.EtcdCluster
			if tt.old != nil {
				tt.old(c)
				old = c.DeepCopy()
			}
			tt.obj(c)
			errs := hooks.ValidateAdmission(t.Context(), old, c)
			switch {
			case len(tt.want) == 0 && len(errs) > 0:
				t.Errorf("refused: %v", errs)
			case len(tt.want) > 0 && len(errs) != 1:
				t.Errorf("errors = %v, want one naming %q", errs, tt.want)
			case len(tt.want) > 0:
				for _, w := range tt.want {
					if !strings.Contains(errs[0].Error(), w) {
						t.Errorf("error %q does not name %q", errs[0].Error(), w)
					}
				}
			}
			if diff := cmp.Diff(tt.wantWarnings, hooks.Warnings(t.Context(), old, c)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// issuer returns a function that issues, from one CA, a Secret's data: a
// certificate for every member of cluster name in namespace ns, for
// usages.
func issuer(t *testing.T, now time.Time) func(name, ns string, usages pki.Usages) map[string][]byte {
	t.Helper()
	ca, err := pki.NewCA("user-ca", pki.DefaultCAValidity, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return func(name, ns string, usages pki.Usages) map[string][]byte {
		t.Helper()
		req := pki.Request{CommonName: name, Usages: usages, Validity: 90 * 24 * time.Hour}
		if usages != pki.Client {
			req.DNSNames = []string{"*." + name + "." + ns + ".svc"}
		}
		kp, err := ca.Issue(req, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": kp.CAPEM}
	}
}
