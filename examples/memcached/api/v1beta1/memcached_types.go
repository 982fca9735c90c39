package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a Memcached. Ready summarises Available and Degraded;
// Progressing is informational (True while a rollout or scale is under way).
const (
	ConditionAvailable   = "Available"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
)

// Defaults applied by the API server (CRD defaults), repeated here for code
// that builds a Memcached in Go and for the documentation.
const (
	DefaultImage         = "memcached:1.6"
	DefaultPort          = 11211
	DefaultCacheMemoryMB = 64
)

// MemcachedSpec is the desired state of a Memcached cluster.
//
// The schema and CEL rules reject bad values at admission; the operator
// checks that cache.memoryMB is below resources.limits.memory.
type MemcachedSpec struct {
	// Replicas is the number of memcached pods. 0 keeps the objects but
	// runs no pod.
	//
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +required
	Replicas int32 `json:"replicas"`

	// Image is the memcached container image.
	//
	// +kubebuilder:default="memcached:1.6"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Port is the TCP port memcached listens on (-p), exposed by the headless
	// Service under the name "memcache".
	//
	// +kubebuilder:default=11211
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Cache is how memcached itself runs.
	//
	// +kubebuilder:default={}
	// +optional
	Cache CacheSpec `json:"cache,omitempty"`

	// Resources are the memcached container's compute requests and limits.
	//
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Placement is where the pods run.
	//
	// +optional
	Placement PlacementSpec `json:"placement,omitempty"`
}

// CacheSpec is memcached's own configuration.
type CacheSpec struct {
	// MemoryMB is the memory memcached may use for items, in megabytes
	// (-m). When resources.limits.memory is set it must be larger: memcached
	// needs memory beyond its item cache for connections and bookkeeping.
	//
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MemoryMB int32 `json:"memoryMB,omitempty"`

	// ExtraArgs are appended to memcached's command line, for example
	// ["-v", "-c", "4096"]. They must not set the port or the memory limit:
	// use spec.port and spec.cache.memoryMB.
	//
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.all(a, !(a.startsWith('-p') || a.startsWith('--port') || a.startsWith('-m') || a.startsWith('--memory-limit')))",message="spec.cache.extraArgs must not set the port (-p, --port) or the memory limit (-m, --memory-limit): use spec.port and spec.cache.memoryMB",reason=FieldValueForbidden
	// +listType=atomic
	// +optional
	ExtraArgs []string `json:"extraArgs,omitempty"`
}

// PlacementSpec constrains the nodes the pods run on.
type PlacementSpec struct {
	// Affinity constrains which nodes the pods run on and how they are spread
	// relative to each other.
	//
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints spread the pods across failure domains. Their
	// labelSelector usually matches the pods' app.kubernetes.io/instance label.
	//
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
}

// MemcachedStatus is the observed state of a Memcached cluster.
type MemcachedStatus struct {
	// Nodes are the names of the cluster's pods that are not being deleted,
	// sorted.
	//
	// +listType=atomic
	// +optional
	Nodes []string `json:"nodes,omitempty"`

	// ReadyReplicas is the number of ready memcached pods.
	//
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector is the label selector of the pods, for the scale subresource
	// (kubectl scale, HorizontalPodAutoscaler).
	//
	// +optional
	Selector string `json:"selector,omitempty"`

	// ObservedGeneration is the metadata.generation the conditions describe.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are Ready (the summary), Available, Progressing and
	// Degraded, plus the kstatus conditions Reconciling and Stalled while they
	// apply.
	//
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Memcached is a memcached cluster: a Deployment of memcached pods, a
// headless Service naming them, and a PodDisruptionBudget when there is more
// than one pod.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.readyReplicas,selectorpath=.status.selector
// +kubebuilder:resource:scope=Namespaced,shortName=mc,categories=opkit
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MemcachedSpec `json:"spec"`
	// Status starts with observedGeneration -1, so that kstatus (Flux,
	// kpt, kubectl-style waits) reads an object no pass has written yet as
	// InProgress, not Current.
	//
	// +kubebuilder:default={"observedGeneration":-1}
	Status MemcachedStatus `json:"status,omitempty"`
}

// GetConditions returns the Memcached's conditions.
func (m *Memcached) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the Memcached's conditions.
func (m *Memcached) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (m *Memcached) GetObservedGeneration() int64 { return m.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (m *Memcached) SetObservedGeneration(g int64) { m.Status.ObservedGeneration = g }

// MemcachedList is a list of Memcacheds.
//
// +kubebuilder:object:root=true
type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Memcached `json:"items"`
}
