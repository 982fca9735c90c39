package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/operation"
)

// GroupVersion is the group and version of the test API.
var GroupVersion = schema.GroupVersion{Group: "test.opkit.dev", Version: "v1"}

// AddToScheme registers the test API's types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// WidgetSpec is the desired state of a Widget.
type WidgetSpec struct {
	// Replicas is how many children the widget wants.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Message is free text that tests copy into children or status.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Message string `json:"message,omitempty"`
}

// WidgetStatus is the observed state of a Widget.
type WidgetStatus struct {
	// ObservedGeneration is the generation the last completed pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas mirrors spec.replicas once acted on.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Conditions are the widget's current conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Backup is the widget's last long operation (package operation).
	// +optional
	Backup *operation.Record `json:"backup,omitempty"`

	// Note is written by another controller in the tests: a Reconciler
	// must neither change nor co-own it.
	// +optional
	Note string `json:"note,omitempty"`
}

// Widget is a namespaced test resource with a status subresource.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec WidgetSpec `json:"spec,omitempty"`
	// Status starts with observedGeneration -1, so that kstatus (Flux,
	// kpt, kubectl-style waits) reads an object no pass has written yet as
	// InProgress, not Current.
	//
	// +kubebuilder:default={"observedGeneration":-1}
	Status WidgetStatus `json:"status,omitempty"`
}

// GetConditions returns the widget's conditions.
func (w *Widget) GetConditions() []metav1.Condition { return w.Status.Conditions }

// SetConditions replaces the widget's conditions.
func (w *Widget) SetConditions(c []metav1.Condition) { w.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (w *Widget) GetObservedGeneration() int64 { return w.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (w *Widget) SetObservedGeneration(g int64) { w.Status.ObservedGeneration = g }

// WidgetList is a list of Widgets.
//
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}
