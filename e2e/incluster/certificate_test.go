package incluster

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
)

// The memcached operator's webhook certificate in this suite: renewed 60 s
// after it is made, 2 min before expiry, which leaves the kubelet (which
// updates a mounted Secret within about a minute) its margin.
const certValidity, certRenewBefore = 3 * time.Minute, 2 * time.Minute

// certificateRotates sends a server-side dry-run create of a Memcached
// through the webhook every half second for 150 s, long enough for at least
// one renewal, and fails on any failed request; then waits until every
// operator pod serves a renewed certificate on its webhook port (dialled at
// the pod's IP, reachable from the test on real nodes). Not the latest: a
// renewal comes every minute, and the kubelet takes up to one to mount it.
func (o operator) certificateRotates(ns string) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		scheme := runtime.NewScheme()
		if err := v1beta1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg.Client().RESTConfig(), client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		secret := o.name + "-webhook-server-cert"
		var certs []string // in the order the Secret held them
		var failed []error
		sent := 0
		for end := time.Now().Add(150 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if c := string(o.secretData(ctx, t, cfg, secret)["tls.crt"]); !slices.Contains(certs, c) {
				certs = append(certs, c)
			}
			m := &v1beta1.Memcached{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("memcached-dry-run-%d", sent), Namespace: ns},
				Spec:       v1beta1.MemcachedSpec{Replicas: 1, Image: "memcached:1.6"},
			}
			sent++
			if err := c.Create(ctx, m, client.DryRunAll); err != nil {
				failed = append(failed, err)
			}
		}
		t.Logf("%d requests, %d serving certificates seen", sent, len(certs))
		if len(failed) > 0 {
			t.Errorf("%d of %d requests failed across the rotation; first: %v", len(failed), sent, failed[0])
		}
		if len(certs) < 2 {
			t.Errorf("no renewal in 150 s of a %s certificate renewed %s before expiry", certValidity, certRenewBefore)
		}
		harness.WaitFor(ctx, t, "every operator pod to serve a renewed certificate", 3*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
			renewed := map[string]bool{}
			for _, c := range append(certs[1:], string(o.secretData(ctx, t, cfg, secret)["tls.crt"])) {
				if block, _ := pem.Decode([]byte(c)); block != nil {
					renewed[string(block.Bytes)] = true
				}
			}
			var pods corev1.PodList
			if err := cfg.Client().Resources(o.namespace).List(ctx, &pods, resources.WithLabelSelector(o.podSelector())); err != nil {
				return false, err.Error()
			}
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
					continue
				}
				served, err := servedCertificate(ctx, net.JoinHostPort(p.Status.PodIP, "9443"))
				if err != nil {
					return false, fmt.Sprintf("pod %s: %v", p.Name, err)
				}
				if !renewed[string(served)] {
					return false, fmt.Sprintf("pod %s serves no renewed certificate", p.Name)
				}
			}
			return true, ""
		})
		return ctx
	}
}

func (o operator) secretData(ctx context.Context, t *testing.T, cfg *envconf.Config, name string) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if err := cfg.Client().Resources().Get(ctx, name, o.namespace, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// servedCertificate is the DER of the leaf certificate addr presents.
func servedCertificate(ctx context.Context, addr string) ([]byte, error) {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // reads the certificate only
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, nil
}
