// Package localpv is a dynamic PersistentVolume provisioner for the local
// cluster's real nodes: each claim of a StorageClass served by it gets a
// fresh directory under a root directory on the node, exposed as a hostPath
// PersistentVolume pinned to that node.
//
// It implements the Provisioner interface of
// sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller, whose
// ProvisionController watches claims, volumes and classes; Run wires the two
// together. hack/localpv is the command (`make local-path-provisioner`):
//
//	local-path-provisioner --kubeconfig PATH --node-name NODE --root DIR \
//		[--provisioner-name opkit.dev/local-path]
//
// One process runs per real node. For a claim it creates
// DIR/<namespace>-<claim>-<volume> with mode 0777 and a PersistentVolume
// with hostPath (type DirectoryOrCreate) at that path, node affinity
// kubernetes.io/hostname=NODE, the claim's access modes and requested
// capacity, and the class's reclaim policy. When a volume of reclaim policy
// Delete is released, the directory and the PersistentVolume go.
//
// The StorageClass (StorageClass returns it) must use volumeBindingMode
// WaitForFirstConsumer: the scheduler then picks the pod's node first and
// records it on the claim (annotation volume.kubernetes.io/selected-node),
// and only the provisioner of that node provisions. A process ignores claims
// selected for other nodes (so one process per node can share a provisioner
// name) and refuses claims without a selected node.
//
// Footguns:
//   - Capacity is not enforced: hostPath has no quota, so a volume can fill
//     the node's disk whatever its claim requested.
//   - The directory is world-writable (0777) rather than owned by the pod's
//     fsGroup: the kubelet does not apply fsGroup to hostPath volumes, and
//     the provisioner does not know the pod. Anything on the node can read
//     and write it.
//   - NODE must equal the node's kubernetes.io/hostname label (the node name
//     unless the kubelet's hostname is overridden differently).
//   - A pod whose claim is bound to a volume on a node that no longer exists
//     stays Pending; delete the claim to start afresh.
package localpv
