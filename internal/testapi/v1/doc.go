// Package v1 is the test.opkit.dev/v1 API group used by opkit's tests.
//
// +kubebuilder:object:generate=true
// +groupName=test.opkit.dev
package v1
