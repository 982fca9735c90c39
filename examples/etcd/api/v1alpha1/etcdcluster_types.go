package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/operation"
)

// Condition types of an EtcdCluster, besides the Ready, Reconciling and
// Stalled conditions the reconciler derives.
const (
	// ConditionAvailable is True while the cluster has quorum and serves
	// requests.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while membership or version changes are
	// under way.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True while a voting member is unhealthy or
	// missing, while no member of a cluster that has answered before
	// answers, and when the seed member, a member's pod or a learner is
	// still starting after its timeout. A new cluster whose seed is
	// starting, and a learner that is catching up, are not degraded.
	ConditionDegraded = "Degraded"
	// ConditionStorageResized appears once spec.storage.size outgrows a
	// member's claim: False while claims are being expanded (reason
	// Expanding) or their StorageClass refuses (ExpansionNotAllowed), True
	// once every claim has the size.
	ConditionStorageResized = "StorageResized"
)

// EtcdClusterSpec is the desired state of an EtcdCluster.
// +kubebuilder:validation:XValidation:rule="has(self.restore) == has(oldSelf.restore)",message="restore can only be set when the cluster is created"
// +kubebuilder:validation:XValidation:rule="has(self.storage) == has(oldSelf.storage)",message="storage is immutable: members keep their data where they were created; to move it, restore a backup into a new cluster"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls)",message="tls can only be chosen when the cluster is created: to move a cluster to or from TLS, back it up and restore the backup into a new cluster (spec.restore) with the tls you want"
type EtcdClusterSpec struct {
	// Size is the number of voting members. Odd sizes tolerate the same
	// number of failures as the next even size with fewer members.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +kubebuilder:default=3
	// +optional
	Size int32 `json:"size,omitempty"`

	// Version is the etcd version to run, "3.MINOR.PATCH" (for example
	// "3.6.16"), 3.5.11 or later (members are probed on /readyz). Upgrades
	// go one member at a time and at most one minor version at a time;
	// downgrades are refused.
	// +kubebuilder:validation:Pattern=`^3\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=16
	// +required
	Version string `json:"version"`

	// Repository is the image repository; the image is
	// Repository:v<Version>.
	// +kubebuilder:default="gcr.io/etcd-development/etcd"
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Repository string `json:"repository,omitempty"`

	// Storage says where members keep their data. It cannot change once
	// the cluster exists.
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// Backup configures scheduled backups and the final backup taken before
	// the cluster's data is deleted.
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// Defragmentation returns to the file system, one member at a time, the
	// space etcd keeps in its database file after compaction (the file
	// never shrinks otherwise). Unset, members are never defragmented.
	// +optional
	Defragmentation *DefragmentationSpec `json:"defragmentation,omitempty"`

	// Restore creates the cluster from a backup. It can only be set when the
	// cluster is created and never changed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="restore is immutable"
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`

	// Recovery says what the operator does when the cluster has lost its
	// quorum for good. Unset, it waits for a person (see RecoverySpec).
	// +optional
	Recovery *RecoverySpec `json:"recovery,omitempty"`

	// TLS encrypts and authenticates the members' peer and client traffic.
	// Unset, members speak plain HTTP. It can only be chosen when the
	// cluster is created, and never changed.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// PodTemplate overrides parts of the member pods. A change (like one
	// of Repository) restarts the members on their data one at a time,
	// followers first, as an upgrade does.
	// +optional
	PodTemplate PodTemplateOverrides `json:"podTemplate,omitempty"`

	// QuotaBackendBytes is the size a member's database may reach
	// (--quota-backend-bytes; etcd's default, 2Gi, when unset). At the
	// quota etcd raises a NOSPACE alarm and refuses writes; the operator
	// then compacts, defragments and disarms (status.alarms). A change
	// restarts the members one at a time.
	// +optional
	QuotaBackendBytes *resource.Quantity `json:"quotaBackendBytes,omitempty"`

	// AutoCompaction has etcd discard old revisions by itself, so that
	// history does not fill the quota. Unset, etcd keeps every revision
	// until someone compacts. A change restarts the members one at a time.
	// +optional
	AutoCompaction *AutoCompactionSpec `json:"autoCompaction,omitempty"`

	// ExtraArgs are further etcd flags, without the leading "--"
	// ({"snapshot-count": "10000"}). Flags the operator sets itself (names,
	// URLs, data directory, initial cluster, TLS files, quota and
	// compaction) are refused: the error names them. A change restarts the
	// members one at a time.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9][a-z0-9-]*$'))",message="extraArgs keys are flag names without \"--\", such as \"snapshot-count\""
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['advertise-client-urls', 'auto-compaction-mode', 'auto-compaction-retention', 'auto-tls', 'cert-file', 'client-cert-auth', 'config-file', 'data-dir', 'discovery', 'discovery-srv', 'force-new-cluster', 'initial-advertise-peer-urls', 'initial-cluster', 'initial-cluster-state', 'initial-cluster-token', 'key-file', 'listen-client-urls', 'listen-metrics-urls', 'listen-peer-urls', 'name', 'peer-auto-tls', 'peer-cert-file', 'peer-client-cert-auth', 'peer-key-file', 'peer-trusted-ca-file', 'quota-backend-bytes', 'trusted-ca-file', 'unsafe-no-fsync', 'wal-dir']))",message="extraArgs may not set a flag the operator sets itself (names, URLs, data-dir, initial-cluster*, TLS files, quota-backend-bytes and auto-compaction-*, which have fields of their own) nor unsafe-no-fsync or config-file"
	// +optional
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`
}

// AutoCompactionSpec is etcd's own compaction of old revisions.
// +kubebuilder:validation:XValidation:rule="self.mode != 'revision' || self.retention.matches('^[0-9]+$')",message="with mode revision, retention is a number of revisions, such as \"10000\""
// +kubebuilder:validation:XValidation:rule="self.mode != 'periodic' || self.retention.matches('^([0-9]+|([0-9]+(ms|s|m|h))+)$')",message="with mode periodic, retention is a duration such as \"1h\" or \"30m\""
type AutoCompactionSpec struct {
	// Mode is "periodic" (keep Retention's worth of time) or "revision"
	// (keep the last Retention revisions).
	// +kubebuilder:validation:Enum=periodic;revision
	// +kubebuilder:default=periodic
	// +optional
	Mode string `json:"mode,omitempty"`

	// Retention is a duration ("1h") in periodic mode, a number of
	// revisions ("10000") in revision mode.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +required
	Retention string `json:"retention"`
}

// StorageSpec is the data volume of each member. Only its size may change
// once the cluster exists, and only grow.
// +kubebuilder:validation:XValidation:rule="(has(self.ephemeral) && self.ephemeral) == (has(oldSelf.ephemeral) && oldSelf.ephemeral) && has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage is immutable but for its size: members keep their data where they were created; to move it, restore a backup into a new cluster"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.size) && !has(self.size) || quantity(has(self.size) ? string(self.size) : '1Gi').compareTo(quantity(has(oldSelf.size) ? string(oldSelf.size) : '1Gi')) >= 0",message="storage.size may only grow (volume expansion, where the StorageClass allows it); to shrink, restore a backup into a new cluster"
// +kubebuilder:validation:XValidation:rule="!(has(self.ephemeral) && self.ephemeral && has(self.size))",message="size and ephemeral are mutually exclusive"
type StorageSpec struct {
	// Ephemeral keeps data in an emptyDir: a restarted pod loses its data
	// and is replaced as a new member. For tests and demos only.
	// +optional
	Ephemeral bool `json:"ephemeral,omitempty"`

	// Size is the requested size of each member's PersistentVolumeClaim
	// (default 1Gi). Raising it expands the claims where their
	// StorageClass allows volume expansion (condition StorageResized).
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName is the storage class of the claims; empty uses the
	// cluster's default class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// The values of RecoverySpec.QuorumLoss.
const (
	// QuorumLossWait leaves a cluster that lost its quorum for good to a
	// person: it is reported Degraded (reason MemberDataLost) and nothing
	// is changed.
	QuorumLossWait = "Wait"
	// QuorumLossRebuild rebuilds it from its most up-to-date surviving
	// member, or from its newest verified backup when none survived (see
	// RecoverySpec).
	QuorumLossRebuild = "Rebuild"
)

// RecoverySpec opts a cluster into rebuilding itself after losing its
// quorum for good.
//
// A quorum is lost for good when, with persistent storage, fewer than a
// quorum of the voting members last recorded in status.members still have
// their data claim, and at least one does: the others' pods and claims are
// both gone (a lost node with local volumes, claims deleted by hand), so
// they can never come back. As long as a lost member's claim exists the
// operator recreates its pod instead and never rebuilds: delete the claims
// of members that are gone for good to let it. With QuorumLossRebuild the
// operator then asks every surviving member for its raft index, restarts
// the one with the highest (the lowest name among equals) with etcd's
// --force-new-cluster, so that it forms a one-member cluster with its
// data, restarts it once more without the flag (with the operator's
// --restore-image, on its data restored with the revision moved on: see
// status.recovery.revisionBump), deletes the other
// survivors' pods and claims (their data is older), and grows the cluster
// back to spec.size one learner at a time. Writes the lost majority had
// acknowledged and the survivor had not received are lost: that is what
// opting in accepts. Each step is an event and a Progressing reason. No
// rebuild starts while a lost member's pod still exists (Terminating on a
// node cut off by a partition, where its etcd may still serve a
// majority): delete that Node, or taint it
// node.kubernetes.io/out-of-service, to let it.
//
// When no member survives (no member pod exists and no recorded member
// has its data claim; with ephemeral storage, no member pod exists) and
// spec.backup.storeRef is set, QuorumLossRebuild rebuilds the cluster
// from the newest backup of it in that store whose data verifies against
// its manifest's SHA-256 (a backup recording this cluster's UID, or, from
// before UIDs were recorded, taken after the cluster was created): the
// lost members are forgotten and the cluster is bootstrapped again from
// the backup as with spec.restore, then grows back to spec.size. Writes
// after that backup are lost.
type RecoverySpec struct {
	// QuorumLoss is Wait (default: report it and do nothing) or Rebuild:
	// rebuild from the most up-to-date surviving member, or, when no
	// member kept its data, from the newest verified backup of the cluster
	// in spec.backup.storeRef.
	// +kubebuilder:validation:Enum=Wait;Rebuild
	// +kubebuilder:default=Wait
	// +optional
	QuorumLoss string `json:"quorumLoss,omitempty"`
	// NodeLossGracePeriod is how long a node must stay tainted
	// node.kubernetes.io/out-of-service before the members whose data is
	// on its local volumes are replaced (their claims deleted), from when
	// the taint was added or the operator first saw it. The taint says
	// the node is shut down, not that its disks are gone. Default 10m; a
	// deleted Node counts at once.
	// +optional
	NodeLossGracePeriod *metav1.Duration `json:"nodeLossGracePeriod,omitempty"`
}

// RecoveryStatus reports a rebuild after a lost quorum: from a surviving
// member (Member), or, when none survived, from a backup (Backup).
type RecoveryStatus struct {
	// Member is the surviving member the cluster is being rebuilt from.
	// +optional
	Member string `json:"member,omitempty"`
	// RaftIndex is the raft index Member reported when it was chosen.
	// +optional
	RaftIndex uint64 `json:"raftIndex,omitempty"`
	// Backup is the ID, in spec.backup.storeRef, of the backup the
	// cluster is being rebuilt from: the newest verified backup of this
	// cluster when no member kept its data.
	// +optional
	Backup string `json:"backup,omitempty"`
	// Revision is the etcd revision Backup was taken at; for a rebuild
	// from Member, the revision it answered at with --force-new-cluster.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// StartTime is when the rebuild began.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// EndTime is when the rebuilt cluster answered (status.lastRecovery
	// only).
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// RevisionBump is how far the rebuild moved the revision on, with the
	// revisions below marked compacted, so that watchers re-list instead
	// of missing events or seeing a revision twice: past the backup's for
	// a rebuild from Backup; for a rebuild from Member, set once Member
	// answers with --force-new-cluster, before its pod restarts on its
	// data restored with the revision moved on. 0 when etcd could not (a
	// logical restore, an operator without --restore-image, etcd before
	// 3.5.10): watchers must then be restarted.
	// +optional
	RevisionBump int64 `json:"revisionBump,omitempty"`
	// Restarts counts the restarts of Member's pod once more after it
	// answered from its restored data below the revision bump (its
	// database was behind its log). After two the rebuild ends without
	// a bump, and event RevisionNotMoved says to restart the watchers.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`
}

// TLSSpec chooses where a cluster's certificates come from: the operator
// (auto), or Secrets the user keeps, for example with cert-manager. Either
// way the members require TLS client certificates from their peers and
// their clients, and a renewed certificate (or CA) restarts the members
// one at a time, followers first.
//
// Secrets named here are of type kubernetes.io/tls with tls.crt, tls.key
// and ca.crt, as cert-manager writes them. The peer and server
// certificates must be valid for every member, "*.<cluster>.<namespace>.svc",
// and allow server and client auth; the client certificate allows client
// auth and is what the operator dials the members with. All three must be
// signed by a CA in their ca.crt. Members mount the operator's copy
// (status.tls.secretName); a change running members would not trust is
// refused (Stalled, TLSChangeRefused). Rotate a CA in three steps: both
// CAs in every ca.crt, then certificates of the new CA, then it alone.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tls is immutable: to change where a cluster's certificates come from, back it up and restore the backup into a new cluster (spec.restore)"
// +kubebuilder:validation:XValidation:rule="has(self.auto) ? !(has(self.peerSecretName) || has(self.serverSecretName) || has(self.clientSecretName)) : (has(self.peerSecretName) && has(self.serverSecretName) && has(self.clientSecretName))",message="set auto, or all of peerSecretName, serverSecretName and clientSecretName"
type TLSSpec struct {
	// Auto has the operator make a CA and the certificates, in Secrets
	// <cluster>-ca, <cluster>-peer-tls, <cluster>-server-tls and
	// <cluster>-client-tls, and renew each after two thirds of its
	// lifetime. Applications reach the members with <cluster>-client-tls.
	// +optional
	Auto *AutoTLSSpec `json:"auto,omitempty"`

	// PeerSecretName is the members' certificate for their traffic with
	// each other.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	PeerSecretName string `json:"peerSecretName,omitempty"`

	// ServerSecretName is the certificate the members present to their
	// clients (on the client port and through <cluster>-client).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ServerSecretName string `json:"serverSecretName,omitempty"`

	// ClientSecretName is the client certificate the operator presents to
	// the members, for its membership calls, backups and restores.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ClientSecretName string `json:"clientSecretName,omitempty"`
}

// AutoTLSSpec configures the certificates the operator makes.
type AutoTLSSpec struct {
	// CertificateLifetime is the lifetime of the peer, server and client
	// certificates (default 8760h, a year; at least 1h). Each is renewed
	// after two thirds of it. The CA lives ten years and is renewed with
	// its key, so that members keep trusting each other through a renewal.
	// +optional
	CertificateLifetime *metav1.Duration `json:"certificateLifetime,omitempty"`
}

// StoreReference names where backups are kept. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="has(self.s3SecretName) != has(self.pvcName)",message="set exactly one of s3SecretName and pvcName"
type StoreReference struct {
	// S3SecretName names a Secret in the same namespace holding an S3
	// store configuration (see package github.com/opkit-dev/opkit/backup/s3).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	S3SecretName string `json:"s3SecretName,omitempty"`

	// PVCName names a filesystem store: the PersistentVolumeClaim mounted
	// into the operator at <backup root>/<namespace>/<pvcName> (default
	// /backups/<namespace>/<pvcName>), where <namespace> is this object's.
	// A store serves one namespace: the operator's administrator decides
	// which by where the claim is mounted.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	PVCName string `json:"pvcName,omitempty"`
}

// DefragmentationStatus reports a cluster's defragmentations.
type DefragmentationStatus struct {
	// LastRound is when the last scheduled round began.
	// +optional
	LastRound *metav1.Time `json:"lastRound,omitempty"`

	// Pending are the members the current scheduled round has yet to
	// defragment, in order.
	// +listType=atomic
	// +optional
	Pending []string `json:"pending,omitempty"`

	// LastTime is when a member was last defragmented, LastMember which,
	// and LastReclaimedBytes how much its file shrank.
	// +optional
	LastTime *metav1.Time `json:"lastTime,omitempty"`
	// +optional
	LastMember string `json:"lastMember,omitempty"`
	// +optional
	LastReclaimedBytes int64 `json:"lastReclaimedBytes,omitempty"`
}

// NoSpaceStatus is the operator's recovery from a NOSPACE alarm: compact,
// defragment every member, disarm once every database is below the quota.
type NoSpaceStatus struct {
	// Since is when the operator saw the alarm.
	Since metav1.Time `json:"since"`
	// CompactedRevision is the revision the operator compacted at, 0
	// until it has.
	// +optional
	CompactedRevision int64 `json:"compactedRevision,omitempty"`
	// KeptRevisions is how many revisions below the current one that
	// compaction kept, so that watchers a little behind resume without
	// relisting. Only a recovery's first compaction keeps any.
	// +optional
	KeptRevisions int64 `json:"keptRevisions,omitempty"`
	// Rounds is how many times this recovery compacted.
	// +optional
	Rounds int32 `json:"rounds,omitempty"`
}

// TLSStatus reports the certificates a TLS cluster runs with.
type TLSStatus struct {
	// Revision identifies the peer and server certificates and CAs the
	// members run with; it changes when one is renewed or replaced, and the
	// members are then restarted one at a time.
	// +optional
	Revision string `json:"revision,omitempty"`
	// NotAfter is when the first of the peer, server and client
	// certificates expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// RenewAt is when the operator renews the first of its certificates
	// (spec.tls.auto only).
	// +optional
	RenewAt *metav1.Time `json:"renewAt,omitempty"`
	// SecretName is the operator's copy of the accepted certificates:
	// what new members mount and the operator dials with. A change of the
	// Secrets of spec.tls is copied only if members running the current
	// copy and the new certificates trust each other.
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// Retired are earlier copies, each deleted once no member mounts it.
	// +listType=atomic
	// +optional
	Retired []string `json:"retired,omitempty"`
}

// BackupSpec configures a cluster's scheduled backups.
type BackupSpec struct {
	// Schedule is a cron expression ("0 3 * * *", "@every 6h"); empty takes
	// no scheduled backups.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// Retention is how many of the newest scheduled backups are kept. It
	// is applied after each scheduled backup and, when none is due, once
	// per change of the spec and once per operator process, when the
	// cluster is settled. Backups of EtcdBackups and final backups in the
	// same store are neither counted nor deleted.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=7
	// +optional
	Retention int32 `json:"retention,omitempty"`

	// StoreRef is where backups are written.
	// +required
	StoreRef StoreReference `json:"storeRef"`

	// SkipFinalBackup deletes the cluster without taking a last snapshot.
	// +optional
	SkipFinalBackup bool `json:"skipFinalBackup,omitempty"`
}

// DefragmentationSpec says when members are defragmented. Either way one
// member is defragmented at a time, followers first; before the leader's
// turn leadership moves to another member, so that no follower waits on a
// defragmenting leader; and nothing is defragmented while a member is
// unhealthy or the membership changes.
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || has(self.thresholdPercent)",message="set schedule, thresholdPercent, or both"
type DefragmentationSpec struct {
	// Schedule is a cron expression ("0 3 * * 0", "@every 168h") at which
	// every member is defragmented in turn.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// ThresholdPercent defragments a member as soon as free pages make up
	// this share of its database file (100 * (dbSize - dbSizeInUse) /
	// dbSize) and at least minReclaimable bytes would be returned.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	ThresholdPercent int32 `json:"thresholdPercent,omitempty"`

	// MinReclaimable is the least a threshold defragmentation must return
	// to the file system (default 64Mi): defragmenting blocks the member,
	// which a small gain does not justify.
	// +optional
	MinReclaimable *resource.Quantity `json:"minReclaimable,omitempty"`
}

// RestoreSpec names the backup a new cluster starts from.
type RestoreSpec struct {
	// BackupName is the name of an EtcdBackup in the same namespace whose
	// phase is Succeeded.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	BackupName string `json:"backupName"`
}

// PodTemplateOverrides are the parts of the member pods a user may change.
type PodTemplateOverrides struct {
	// Labels are added to every member pod. Keys under etcd.opkit.dev/ and
	// opkit.dev/ are the operator's and are refused.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are added to every member pod.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Resources of the etcd container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeSelector of the member pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the member pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// PriorityClassName of the member pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// MemberStatus is one etcd member as last observed.
type MemberStatus struct {
	// Name is the member's name, which is also its pod's name.
	Name string `json:"name"`
	// ID is the member's ID in hex.
	// +optional
	ID string `json:"id,omitempty"`
	// PeerURL is the member's first peer URL.
	// +optional
	PeerURL string `json:"peerURL,omitempty"`
	// Healthy is true when the member answered a status request.
	Healthy bool `json:"healthy"`
	// Learner is true while the member is a non-voting learner.
	// +optional
	Learner bool `json:"learner,omitempty"`
	// Leader is true for the raft leader.
	// +optional
	Leader bool `json:"leader,omitempty"`
	// Version is the etcd server version the member reported.
	// +optional
	Version string `json:"version,omitempty"`
}

// EtcdClusterStatus is the observed state of an EtcdCluster.
type EtcdClusterStatus struct {
	// ObservedGeneration is the generation the last completed pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Members are the etcd members as last observed.
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []MemberStatus `json:"members,omitempty"`

	// ReadyMembers is the number of healthy voting members.
	// +optional
	ReadyMembers int32 `json:"readyMembers,omitempty"`

	// Version is the lowest etcd version any member runs.
	// +optional
	Version string `json:"version,omitempty"`

	// ClusterToken is the initial-cluster-token of the cluster, fixed at
	// bootstrap.
	// +optional
	ClusterToken string `json:"clusterToken,omitempty"`

	// Restored is true once the data of spec.restore was loaded.
	// +optional
	Restored bool `json:"restored,omitempty"`

	// Backup reports the scheduled backups.
	// +optional
	Backup backup.Status `json:"backup,omitempty"`

	// BackupOperation is the scheduled backup under way, recorded before
	// it runs so that an operator restart resumes it rather than losing
	// or repeating it. It is cleared once its outcome is in Backup.
	// +optional
	BackupOperation *operation.Record `json:"backupOperation,omitempty"`

	// Defragmentation reports the defragmentations of spec.defragmentation.
	// +optional
	Defragmentation DefragmentationStatus `json:"defragmentation,omitempty"`

	// TLS reports the certificates of spec.tls.
	// +optional
	TLS *TLSStatus `json:"tls,omitempty"`

	// LastRecovery is the last completed rebuild after a quorum loss: it
	// stays, as the record that writes were discarded (those after Backup,
	// or those Member had not received) and when.
	// +optional
	LastRecovery *RecoveryStatus `json:"lastRecovery,omitempty"`

	// Alarms are the etcd alarms raised in the cluster ("NOSPACE",
	// "CORRUPT"), as its members last reported them.
	// +listType=atomic
	// +optional
	Alarms []string `json:"alarms,omitempty"`

	// NoSpace is set while the operator recovers from a NOSPACE alarm.
	// +optional
	NoSpace *NoSpaceStatus `json:"noSpace,omitempty"`

	// Recovery is set while the cluster is rebuilt after losing its
	// quorum (spec.recovery): from a surviving member, until that member
	// answers as a new one-member cluster; from a backup, until the
	// backup is restored into the new seed member.
	// +optional
	Recovery *RecoveryStatus `json:"recovery,omitempty"`

	// Conditions: Ready, Available, Progressing, Degraded, Reconciling,
	// Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdCluster is an etcd cluster whose membership the operator changes one
// member at a time without losing quorum.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=etcd
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EtcdClusterSpec `json:"spec,omitempty"`
	// Status starts with observedGeneration -1, so that kstatus (Flux,
	// kpt, kubectl-style waits) reads an object no pass has written yet as
	// InProgress, not Current.
	//
	// +kubebuilder:default={"observedGeneration":-1}
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// GetConditions returns the cluster's conditions.
func (c *EtcdCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the cluster's conditions.
func (c *EtcdCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// GetObservedGeneration returns status.observedGeneration.
func (c *EtcdCluster) GetObservedGeneration() int64 { return c.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (c *EtcdCluster) SetObservedGeneration(g int64) { c.Status.ObservedGeneration = g }

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}
