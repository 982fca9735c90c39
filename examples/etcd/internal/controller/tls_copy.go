package controller

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
	"github.com/opkit-dev/opkit/ownership"
)

// Keys of a copy (TLSCopyName). Members mount the peer and server ones.
const (
	copyPeerCert   = "peer.crt"
	copyPeerKey    = "peer.key"
	copyPeerCA     = "peer-ca.crt"
	copyServerCert = "server.crt"
	copyServerKey  = "server.key"
	copyServerCA   = "server-ca.crt"
	copyClientCert = "client.crt"
	copyClientKey  = "client.key"
)

// copyKeys maps each role's Secret keys to the copy's.
var copyKeys = map[string]map[string]string{
	peerRole.name:   {corev1.TLSCertKey: copyPeerCert, corev1.TLSPrivateKeyKey: copyPeerKey, caKey: copyPeerCA},
	serverRole.name: {corev1.TLSCertKey: copyServerCert, corev1.TLSPrivateKeyKey: copyServerKey, caKey: copyServerCA},
	clientRole.name: {corev1.TLSCertKey: copyClientCert, corev1.TLSPrivateKeyKey: copyClientKey},
}

// digest hashes the entries of data named keys. "v2" marks the copy
// layout: members of an operator that mounted the Secrets themselves
// restart once onto copies.
func digest(data map[string][]byte, keys ...string) string {
	h := sha256.New()
	h.Write([]byte("v2"))
	for _, k := range keys {
		fmt.Fprintf(h, "%s:%d:", k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// memberRevision identifies what members mount of a copy
// (status.tls.revision); a change restarts them.
func memberRevision(data map[string][]byte) string {
	return digest(data, copyPeerCert, copyPeerKey, copyPeerCA, copyServerCert, copyServerKey, copyServerCA)
}

// copyName names the copy of data: a new client certificate alone makes a
// new copy but restarts no member.
func copyName(c *v1alpha1.EtcdCluster, data map[string][]byte) string {
	keys := slices.Sorted(maps.Keys(data))
	return TLSCopyName(c.Name, digest(data, keys...))
}

// copyTLS is the operator's TLS configuration from a copy's client
// certificate, trusting the server CAs of every copy in bundles.
func copyTLS(data map[string][]byte, bundles ...map[string][]byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(data[copyClientCert], data[copyClientKey])
	if err != nil {
		return nil, fmt.Errorf("the client certificate of the operator's copy: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(data[copyServerCA])
	for _, b := range bundles {
		roots.AppendCertsFromPEM(b[copyServerCA])
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}}, nil
}

// errUntrusted marks a change of certificates members would not trust.
var errUntrusted = errors.New("members would not trust each other")

// trustEachOther returns why members running copy old and members given
// certificates next could not talk (errUntrusted), nil if they can:
// each side's leaves must chain to the other side's CA bundles.
func trustEachOther(c *v1alpha1.EtcdCluster, old, next map[string][]byte, now time.Time) error {
	names := tlsSecretNames(c)
	checks := []struct {
		leaf, bundle map[string][]byte
		cert, ca     string
		field, what  string
		secret       string
	}{
		{next, old, copyPeerCert, copyPeerCA, peerRole.field, "its tls.crt is not signed by a CA in the peer ca.crt members run with", names[0]},
		{old, next, copyPeerCert, copyPeerCA, peerRole.field, "its ca.crt lacks the CA of the peer certificate members run with", names[0]},
		{next, old, copyServerCert, copyServerCA, serverRole.field, "its tls.crt is not signed by a CA in the server ca.crt members run with", names[1]},
		{old, next, copyServerCert, copyServerCA, serverRole.field, "its ca.crt lacks the CA of the server certificate members run with", names[1]},
		{next, old, copyClientCert, copyServerCA, clientRole.field, "its tls.crt is not signed by a CA in the server ca.crt members check clients with", names[2]},
	}
	for _, ch := range checks {
		if err := signedBy(ch.leaf[ch.cert], ch.bundle[ch.ca], now); err != nil {
			return fmt.Errorf("%w: Secret %s (spec.tls.%s): %s (%w); rotate a CA in three steps, letting the members restart after each: "+
				"both CAs in every ca.crt, then certificates from the new CA, then the new CA alone", errUntrusted, ch.secret, ch.field, ch.what, err)
		}
	}
	return nil
}

// signedBy reports whether the PEM leaf chains to a CA of bundle. An
// expired leaf passes: members holding it already fail, and its
// replacement must not be refused for it.
func signedBy(leafPEM, bundlePEM []byte, now time.Time) error {
	chain, err := pki.ParseCerts(leafPEM)
	if err != nil {
		return err
	}
	if now.After(chain[0].NotAfter) {
		return nil
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AppendCertsFromPEM(bundlePEM)
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// mountedCopies returns the copies c's member pods mount, by name; a copy
// gone from the API server is left out.
func (h *ClusterHooks) mountedCopies(ctx context.Context, c *v1alpha1.EtcdCluster) (map[string]*corev1.Secret, []string, error) {
	names, err := mountedNames(ctx, h.Client, c)
	if err != nil {
		return nil, nil, err
	}
	copies := map[string]*corev1.Secret{}
	for _, name := range names {
		sec, err := getSecret(ctx, h.secrets(), c.Namespace, name)
		if err != nil {
			return nil, nil, err
		}
		if sec != nil {
			copies[name] = sec
		}
	}
	return copies, names, nil
}

// mountedNames lists, sorted, the copies c's member pods mount as r
// lists the pods.
func mountedNames(ctx context.Context, r client.Reader, c *v1alpha1.EtcdCluster) ([]string, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels{LabelCluster: c.Name}); err != nil {
		return nil, fmt.Errorf("listing the pods of %s: %w", c.Name, err)
	}
	var names []string
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.Name == tlsVolume && v.Secret != nil && !slices.Contains(names, v.Secret.SecretName) {
				names = append(names, v.Secret.SecretName)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// accepted is the copy a pass runs the members with.
type accepted struct {
	copy *corev1.Secret
	// client is the operator's TLS configuration for every member.
	client *tls.Config
	// refused is why the Secrets of spec.tls were not copied, nil if they
	// were.
	refused *tlsProblem
	// retired are the earlier copies kept while a member mounts them.
	retired []string
}

// accept copies sources (nil when the Secrets of spec.tls are unusable)
// unless members mounting another copy would not trust them, and returns
// the copy members run with. problem is why sources is nil.
func (h *ClusterHooks) accept(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, sources *certificates, problem *tlsProblem) (*accepted, error) {
	copies, mounted, err := h.mountedCopies(ctx, c)
	if err != nil {
		return nil, err
	}
	refused := problem
	var name string
	if sources != nil {
		name = copyName(c, sources.data)
		if _, ok := copies[name]; !ok {
			for _, old := range mounted {
				if copies[old] == nil {
					continue
				}
				if err := trustEachOther(c, copies[old].Data, sources.data, h.now()); err != nil {
					refused = &tlsProblem{reason: ReasonTLSChangeRefused, err: err}
					break
				}
			}
		}
	}
	var cp *corev1.Secret
	if refused == nil {
		if cp = copies[name]; cp == nil {
			if cp, err = h.ensureCopy(ctx, c, guard, name, sources.data); err != nil {
				return nil, err
			}
		}
	} else if cp, err = h.currentCopy(ctx, c, copies, mounted); err != nil {
		return nil, err
	} else if cp == nil {
		return nil, refused
	}
	others := make([]map[string][]byte, 0, len(copies))
	for _, s := range copies {
		others = append(others, s.Data)
	}
	cfg, err := copyTLS(cp.Data, others...)
	if err != nil {
		return nil, err
	}
	retired, err := h.retire(ctx, c, cp.Name, mounted)
	if err != nil {
		return nil, err
	}
	return &accepted{copy: cp, client: cfg, refused: refused, retired: retired}, nil
}

// currentCopy is the copy status.tls names, else the first one mounted;
// nil if there is none.
func (h *ClusterHooks) currentCopy(ctx context.Context, c *v1alpha1.EtcdCluster, copies map[string]*corev1.Secret, mounted []string) (*corev1.Secret, error) {
	if st := c.Status.TLS; st != nil && st.SecretName != "" {
		if s, ok := copies[st.SecretName]; ok {
			return s, nil
		}
		s, err := getSecret(ctx, h.secrets(), c.Namespace, st.SecretName)
		if err != nil || s != nil {
			return s, err
		}
	}
	for _, name := range mounted {
		if s, ok := copies[name]; ok {
			return s, nil
		}
	}
	return nil, nil
}

// ensureCopy creates the immutable copy name of data unless it exists.
func (h *ClusterHooks) ensureCopy(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, name string, data map[string][]byte) (*corev1.Secret, error) {
	sec, err := getSecret(ctx, h.secrets(), c.Namespace, name)
	if err != nil {
		return nil, err
	}
	if sec != nil {
		if !metav1.IsControlledBy(sec, c) {
			return nil, &ownership.NotControlledError{Object: sec}
		}
		return sec, nil
	}
	sec = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: selectorLabels(c)},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptr.To(true),
		Data:       data,
	}
	if err := controllerutil.SetControllerReference(c, sec, h.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := h.Client.Create(ctx, heldBy(sec, guard)); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return sec, nil
}

// retire deletes the earlier copies (status.tls) no pod mounts and
// returns those left. mounted comes from the cache; a copy is deleted
// only once the API server lists no pod mounting it either: a pod made a
// moment ago may not be cached yet.
func (h *ClusterHooks) retire(ctx context.Context, c *v1alpha1.EtcdCluster, current string, mounted []string) ([]string, error) {
	st := c.Status.TLS
	if st == nil {
		return nil, nil
	}
	retired := slices.Clone(st.Retired)
	if st.SecretName != "" && st.SecretName != current && !slices.Contains(retired, st.SecretName) {
		retired = append(retired, st.SecretName)
	}
	live := false
	var keep []string
	for _, name := range retired {
		if name != current && !slices.Contains(mounted, name) && !live {
			var err error
			if mounted, err = mountedNames(ctx, h.apiReader(), c); err != nil {
				return nil, err
			}
			live = true
		}
		if name == current || slices.Contains(mounted, name) {
			if name != current {
				keep = append(keep, name)
			}
			continue
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
		if err := h.Client.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting the retired copy %s: %w", name, err)
		}
	}
	return keep, nil
}
