package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/operation"
)

// BackupPhase is where an EtcdBackup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type BackupPhase string

// The phases of an EtcdBackup.
const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupSucceeded BackupPhase = "Succeeded"
	BackupFailed    BackupPhase = "Failed"
)

// EtcdBackupSpec says which cluster to back up and where to.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="an EtcdBackup's spec is immutable; create a new one"
type EtcdBackupSpec struct {
	// ClusterName is the EtcdCluster in the same namespace to back up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ClusterName string `json:"clusterName"`

	// StoreRef is where the backup is written.
	// +required
	StoreRef StoreReference `json:"storeRef"`
}

// EtcdBackupStatus is the result of an EtcdBackup.
type EtcdBackupStatus struct {
	// ObservedGeneration is the generation the last completed pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is Pending, Running, Succeeded or Failed. Succeeded and Failed
	// are final. A backup fails when retrying cannot help: its cluster or
	// store is still missing a grace period after its creation, its store
	// is misconfigured, etcd refuses the snapshot, or every attempt
	// failed; the Complete condition says why. Create a new EtcdBackup to
	// try again.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// Operation records the backup's attempts, so that an operator
	// restart resumes the backup rather than forgetting it or taking it
	// twice.
	// +optional
	Operation *operation.Record `json:"operation,omitempty"`
	// BackupID is the backup's ID in its store.
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Location is where the backup's data is, as "<store>/<key>".
	// +optional
	Location string `json:"location,omitempty"`
	// SizeBytes is the size of the snapshot in bytes.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// SHA256 is the hex SHA-256 of the snapshot.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Revision is the etcd revision the snapshot is consistent at.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// EtcdVersion is the version of the member the snapshot was taken from.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// StartTime is when the backup started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the backup was committed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EtcdBackup is an on-demand snapshot of an EtcdCluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.sizeBytes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EtcdBackupSpec `json:"spec,omitempty"`
	// Status starts with observedGeneration -1, so that kstatus (Flux,
	// kpt, kubectl-style waits) reads an object no pass has written yet as
	// InProgress, not Current.
	//
	// +kubebuilder:default={"observedGeneration":-1}
	Status EtcdBackupStatus `json:"status,omitempty"`
}

// GetConditions returns the backup's conditions.
func (b *EtcdBackup) GetConditions() []metav1.Condition { return b.Status.Conditions }

// SetConditions replaces the backup's conditions.
func (b *EtcdBackup) SetConditions(conds []metav1.Condition) { b.Status.Conditions = conds }

// GetObservedGeneration returns status.observedGeneration.
func (b *EtcdBackup) GetObservedGeneration() int64 { return b.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (b *EtcdBackup) SetObservedGeneration(g int64) { b.Status.ObservedGeneration = g }

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}
