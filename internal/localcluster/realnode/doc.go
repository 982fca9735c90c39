// Package realnode runs real Kubernetes nodes on this machine, without
// Docker: for each node a containerd (v2, with runc and the bridge CNI
// plugin) and a kubelet, and for all of them one kube-proxy, a CoreDNS
// serving cluster.local and a local-path PersistentVolume provisioner per
// node. Pods on them run real containers from image tarballs (`make
// images`) imported into containerd: nothing is pulled.
//
// The nodes join a cluster created by kwokctl with KwokctlConfig (package
// localcluster does both: Cluster.RealNodeArgs, Cluster.StartRealNodes),
// beside kwok's fake nodes, and are set up as kubeadm sets up a node:
//
//   - each kubelet authenticates with its own client certificate
//     (system:node:NAME, group system:nodes) signed by the cluster CA, and
//     its API needs a client certificate or token and is authorised by the
//     API server (Webhook); kube-proxy, CoreDNS and the provisioner have
//     identities of their own with only the rights they use;
//   - kwok fakes only the nodes it made, and the API server reaches the
//     kubelets at their InternalIP (logs, exec, port-forward).
//
// Network: node i has a bridge of its own, opkitrn<i>, with the address
// 10.244.i.1 (its InternalIP) and pods in 10.244.i.0/24. Pods get routes to
// PodCIDR and ServiceCIDR only; an iptables guard chain drops anything
// forwarded from a bridge to an address outside PodCIDR. Nothing is
// masqueraded off the machine and no route leaves it; cluster DNS answers
// for cluster.local and forwards nothing.
//
// Use:
//
//	err := realnode.Up(ctx, realnode.Spec{Cluster: name, Nodes: 1, BinDir: bin, PKIDir: pki, Kubeconfig: admin, Images: tarballs})
//	defer realnode.Down(context.WithoutCancel(ctx), bin)
//
// Footguns:
//
//   - One set of real nodes per machine: they share the host's network
//     namespace, where kube-proxy's rules are machine-wide. Up returns
//     ErrInUse while another set exists; callers serialise with
//     localcluster.LockRealNodes.
//   - Root only: Up and Down start daemons, mount, and change iptables,
//     sysctls and links.
//   - The daemons outlive the process that started them (make cluster-up
//     returns while the nodes run). Down finds them by their state
//     directory, so it cleans up after a process that was killed, too; it
//     also removes every KUBE-* iptables chain, so do not run it on a
//     machine that is itself a Kubernetes node.
//   - Every image is pulled from the nodes' registry on loopback
//     (RegistryAddress), whatever registry it names: one not pushed there
//     (Spec.Images, or RegistryRef) stays in ErrImagePull.
package realnode
