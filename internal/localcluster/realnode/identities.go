package realnode

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// identity is a host daemon's own user: a client certificate from the
// cluster CA and, unless Kubernetes has a built-in binding for it, a
// ClusterRole with only what the daemon does.
type identity struct {
	// user is the certificate's CommonName, the Kubernetes user name.
	user string
	// file names the certificate, key and kubeconfig in the shared dir.
	file string
	// rules is the ClusterRole (named after the user) bound to it; nil
	// when a built-in binding applies (system:kube-proxy).
	rules []rbacv1.PolicyRule
}

var (
	kubeProxyIdentity = identity{user: "system:kube-proxy", file: "kube-proxy"}
	coreDNSIdentity   = identity{user: "opkit:coredns", file: "coredns", rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	provisionerIdentity = identity{user: "opkit:local-path-provisioner", file: "local-path-provisioner", rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	}}
)

// kubeconfig is where the identity's kubeconfig is written.
func (id identity) kubeconfig() string { return sharedDir("pki", id.file+".kubeconfig") }

// create issues the identity's certificate, writes its kubeconfig for
// server and applies its ClusterRole and binding.
func (id identity) create(ctx context.Context, cs kubernetes.Interface, authority *ca, server string) error {
	cert, key := sharedDir("pki", id.file+".crt"), sharedDir("pki", id.file+".key")
	if err := authority.issue(cert, key, pkix.Name{CommonName: id.user}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := writeKubeconfig(id.kubeconfig(), server, authority.certFile, cert, key, id.user); err != nil {
		return err
	}
	if id.rules == nil {
		return nil
	}
	name := id.user
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{NodeLabel: "true"}}, Rules: id.rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{NodeLabel: "true"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: id.user}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", name, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
