package testenv

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Namespace creates a namespace of its own for t and returns its name.
// envtest runs no namespace controller (unless StartControllerManager
// runs one), so it is not deleted: tests stay apart by namespace, not by
// cleanup. The managers StartManager builds for t and its subtests see it.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := e.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	e.nsMu.Lock()
	defer e.nsMu.Unlock()
	if e.namespaces == nil {
		e.namespaces = map[string][]string{}
	}
	e.namespaces[t.Name()] = append(e.namespaces[t.Name()], ns.Name)
	return ns.Name
}

// testNamespaces are the namespaces Namespace made for t and the tests it
// runs under, sorted.
func (e *Env) testNamespaces(t testing.TB) []string {
	e.nsMu.Lock()
	defer e.nsMu.Unlock()
	var out []string
	for name, made := range e.namespaces {
		if name == t.Name() || strings.HasPrefix(t.Name(), name+"/") {
			out = append(out, made...)
		}
	}
	slices.Sort(out)
	return out
}
