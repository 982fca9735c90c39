package realnode

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
)

// Paths and addresses of the real nodes. Only one set of real nodes runs
// on a machine at a time (they share the host's network namespace, where
// kube-proxy's rules and the bridges are machine-wide), so they are fixed.
const (
	// StateDir holds everything the nodes keep on disk: kubelet and
	// containerd roots, configs, certificates, logs, volumes.
	StateDir = "/var/lib/opkit/realnode"
	// RunDir holds sockets and containerd's state (netns mounts included).
	RunDir = "/run/opkit/realnode"

	// PodCIDR covers every node's pod subnet: node i gets 10.244.i.0/24 on a
	// bridge of its own, and the bridge's address 10.244.i.1 is the node's
	// InternalIP. Pods get routes to PodCIDR and ServiceCIDR only: no
	// default route, so nothing in a pod can reach off the machine.
	PodCIDR = "10.244.0.0/16"
	// ServiceCIDR is kube-apiserver's default service range (kwokctl sets
	// none); the kubernetes Service is 10.0.0.1.
	ServiceCIDR = "10.0.0.0/24"
	// KubernetesServiceIP is the ClusterIP of the kubernetes Service, the
	// first address of ServiceCIDR.
	KubernetesServiceIP = "10.0.0.1"
	// ClusterDomain is the DNS domain CoreDNS serves.
	ClusterDomain = "cluster.local"

	// NodeLabel is set to "true" on real nodes; fake nodes carry kwok's
	// kwok.x-k8s.io/node=fake annotation instead.
	NodeLabel = "opkit.dev/real-node"

	// guardChain is the iptables chain that drops forwarded traffic from a
	// bridge to anything outside PodCIDR.
	guardChain = "OPKIT-REALNODE-GUARD"
	// bridgePrefix names the bridges: opkitrn0, opkitrn1, ...
	bridgePrefix = "opkitrn"
)

// node is the layout of real node i.
type node struct {
	index int
}

// NodeName returns the Kubernetes name of real node i.
func NodeName(i int) string { return fmt.Sprintf("real-node-%d", i) }

// NodeIndex is NodeName's inverse: the i of a real node's name, false for
// any other name.
func NodeIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "real-node-")
	i, err := strconv.Atoi(s)
	if !ok || err != nil || i < 0 || NodeName(i) != name {
		return 0, false
	}
	return i, true
}

// NodeIP returns the InternalIP of real node i: its bridge's address.
func NodeIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 244, byte(i), 1}) }

// DNSAddress is where CoreDNS listens (node 0's bridge address); kubelets
// point pods there (clusterDNS).
func DNSAddress() netip.Addr { return NodeIP(0) }

func (n node) name() string         { return NodeName(n.index) }
func (n node) ip() netip.Addr       { return NodeIP(n.index) }
func (n node) bridge() string       { return fmt.Sprintf("%s%d", bridgePrefix, n.index) }
func (n node) subnet() netip.Prefix { return netip.PrefixFrom(n.ip(), 24).Masked() }
func (n node) dir(elem ...string) string {
	return filepath.Join(append([]string{StateDir, n.name()}, elem...)...)
}
func (n node) runDir(elem ...string) string {
	return filepath.Join(append([]string{RunDir, n.name()}, elem...)...)
}
func (n node) containerdSocket() string { return n.runDir("containerd.sock") }

// cgroupRoot is the cgroup parent of the node's pods: one per node, so
// that kubelets sharing the machine never touch each other's pods.
func (n node) cgroupRoot() string { return "/" + cgroupPrefix + strconv.Itoa(n.index) }

// cgroupPrefix starts the cgroup root of every real node.
const cgroupPrefix = "opkit-real-node-"

// sharedDir is the state of what the nodes share: CoreDNS, kube-proxy.
func sharedDir(elem ...string) string {
	return filepath.Join(append([]string{StateDir, "shared"}, elem...)...)
}
