package realnode

import (
	"fmt"
	"path/filepath"
	"strings"
)

// KwokctlConfig returns the kwokctl configuration (a KwokctlConfiguration
// document for `kwokctl create cluster --config`) that a cluster with real
// nodes needs, given kwokctl's pki directory for the cluster
// (~/.kwok/clusters/NAME/pki):
//
//   - kwok manages only its own fake nodes (the kwok.x-k8s.io/node=fake
//     annotation `kwokctl scale node` sets), not the pods of real nodes;
//     kwokctl's binary runtime otherwise runs it with --manage-all-nodes;
//   - the API server reaches kubelets at their InternalIP (the node names
//     do not resolve), presents the admin certificate to them, and checks
//     their serving certificates against the cluster CA;
//   - the API server advertises node 0's address, so the kubernetes
//     Service sends pods there, and its certificate names that address and
//     the Service's ClusterIP (10.0.0.1), so in-cluster clients verify it.
func KwokctlConfig(pkiDir string) []byte {
	arg := func(k, v string) string { return fmt.Sprintf("  - key: %s\n    value: %q\n", k, v) }
	var b strings.Builder
	b.WriteString("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\n")
	b.WriteString("options:\n  kubeApiserverCertSANs:\n")
	for _, san := range []string{KubernetesServiceIP, NodeIP(0).String()} {
		fmt.Fprintf(&b, "  - %q\n", san)
	}
	b.WriteString("componentsPatches:\n")
	b.WriteString("- name: kube-apiserver\n  extraArgs:\n")
	b.WriteString(arg("kubelet-preferred-address-types", "InternalIP"))
	b.WriteString(arg("kubelet-client-certificate", filepath.Join(pkiDir, "admin.crt")))
	b.WriteString(arg("kubelet-client-key", filepath.Join(pkiDir, "admin.key")))
	b.WriteString(arg("kubelet-certificate-authority", filepath.Join(pkiDir, "ca.crt")))
	b.WriteString(arg("advertise-address", NodeIP(0).String()))
	b.WriteString("- name: kwok-controller\n  extraArgs:\n")
	b.WriteString("  - key: manage-all-nodes\n    value: \"false\"\n    override: true\n")
	b.WriteString(arg("manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake"))
	return []byte(b.String())
}
