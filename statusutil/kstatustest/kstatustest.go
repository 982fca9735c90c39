package kstatustest

import (
	"fmt"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Compute returns kstatus's result for obj, a typed object or an
// *unstructured.Unstructured, as Flux or kpt would compute it from the
// object read from the API server.
func Compute(obj client.Object) (*status.Result, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("converting %T to unstructured: %w", obj, err)
		}
		u = &unstructured.Unstructured{Object: m}
	}
	res, err := status.Compute(u)
	if err != nil {
		return nil, fmt.Errorf("kstatus of %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return res, nil
}

// AssertStatus reports an error on t unless kstatus computes want for obj,
// naming kstatus's message and the object's generation and status.
func AssertStatus(t testing.TB, obj client.Object, want status.Status) bool {
	t.Helper()
	res, err := Compute(obj)
	if err != nil {
		t.Errorf("%v", err)
		return false
	}
	if res.Status != want {
		u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		st, _, _ := unstructured.NestedMap(u, "status")
		t.Errorf("kstatus of %T %s = %s (%q), want %s; generation %d, status %v",
			obj, client.ObjectKeyFromObject(obj), res.Status, res.Message, want, obj.GetGeneration(), st)
		return false
	}
	return true
}
