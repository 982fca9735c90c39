package restmap_test

import (
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opkit-dev/opkit/restmap"
)

var (
	widgetGV = schema.GroupVersion{Group: "example.com", Version: "v1"}
	widgetGK = schema.GroupKind{Group: "example.com", Kind: "Widget"}
)

// counting answers from a DefaultRESTMapper and counts RESTMapping calls.
type counting struct {
	*meta.DefaultRESTMapper
	calls atomic.Int32
}

func newCounting(scope meta.RESTScope) *counting {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{widgetGV})
	m.Add(widgetGV.WithKind("Widget"), scope)
	return &counting{DefaultRESTMapper: m}
}

func (c *counting) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.calls.Add(1)
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

// mapping is what a RESTMapping says; its scope is unexported.
type mapping struct {
	Resource schema.GroupVersionResource
	Kind     schema.GroupVersionKind
	Scope    meta.RESTScopeName
}

func summary(m *meta.RESTMapping) *mapping {
	if m == nil {
		return nil
	}
	return &mapping{Resource: m.Resource, Kind: m.GroupVersionKind, Scope: m.Scope.Name()}
}

func TestRESTMapping(t *testing.T) {
	tests := []struct {
		name      string
		gk        schema.GroupKind
		versions  [][]string
		wantCalls int32
		wantErr   bool
	}{
		{name: "one version is asked once", gk: widgetGK, versions: [][]string{{"v1"}, {"v1"}, {"v1"}}, wantCalls: 1},
		{name: "no version is not kept", gk: widgetGK, versions: [][]string{nil, nil}, wantCalls: 2},
		{name: "an empty version is not kept", gk: widgetGK, versions: [][]string{{""}, {""}}, wantCalls: 2},
		{name: "several versions are not kept", gk: widgetGK, versions: [][]string{{"v2", "v1"}, {"v2", "v1"}}, wantCalls: 2},
		{name: "a miss is not kept", gk: schema.GroupKind{Group: "example.com", Kind: "Gadget"}, versions: [][]string{{"v1"}, {"v1"}}, wantCalls: 2, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delegate := newCounting(meta.RESTScopeNamespace)
			m := restmap.Memoize(delegate)
			for _, v := range tt.versions {
				got, err := m.RESTMapping(tt.gk, v...)
				want, wantErr := delegate.DefaultRESTMapper.RESTMapping(tt.gk, v...)
				if (err != nil) != tt.wantErr || (wantErr != nil) != tt.wantErr {
					t.Fatalf("RESTMapping(%v, %q): error %v, delegate's %v; want an error: %v", tt.gk, v, err, wantErr, tt.wantErr)
				}
				if diff := cmp.Diff(summary(want), summary(got)); diff != "" {
					t.Errorf("RESTMapping(%v, %q) (-delegate +memo):\n%s", tt.gk, v, diff)
				}
			}
			if got := delegate.calls.Load(); got != tt.wantCalls {
				t.Errorf("delegate asked %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}

// A kind the delegate learns after a miss (a CRD installed later) is found.
func TestRESTMappingAfterMiss(t *testing.T) {
	delegate := &counting{DefaultRESTMapper: meta.NewDefaultRESTMapper([]schema.GroupVersion{widgetGV})}
	m := restmap.Memoize(delegate)
	if _, err := m.RESTMapping(widgetGK, "v1"); !meta.IsNoMatchError(err) {
		t.Fatalf("before the kind is known: error %v, want a no-match error", err)
	}
	delegate.Add(widgetGV.WithKind("Widget"), meta.RESTScopeNamespace)
	got, err := m.RESTMapping(widgetGK, "v1")
	if err != nil {
		t.Fatalf("after the kind is known: %v", err)
	}
	if got.Resource.Resource != "widgets" {
		t.Errorf("resource %q, want widgets", got.Resource.Resource)
	}
}

// Reset forgets, so a kind created again with another scope is mapped anew.
func TestReset(t *testing.T) {
	delegate := newCounting(meta.RESTScopeNamespace)
	m := restmap.Memoize(delegate)
	if _, err := m.RESTMapping(widgetGK, "v1"); err != nil {
		t.Fatal(err)
	}
	delegate.DefaultRESTMapper = meta.NewDefaultRESTMapper([]schema.GroupVersion{widgetGV})
	delegate.Add(widgetGV.WithKind("Widget"), meta.RESTScopeRoot)
	m.Reset()
	got, err := m.RESTMapping(widgetGK, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("scope after Reset %q, want %q", got.Scope.Name(), meta.RESTScopeNameRoot)
	}
}

// Reset reaches a delegate that can reset.
func TestResetDelegate(t *testing.T) {
	var d resettable
	restmap.Memoize(&d).Reset()
	if !d.reset {
		t.Error("the delegate was not reset")
	}
}

type resettable struct {
	meta.RESTMapper
	reset bool
}

func (r *resettable) Reset() { r.reset = true }

// The point of the package: a remembered mapping costs no allocation
// beyond the variadic slice a call through the interface makes, where
// client-go's discovery mapper allocates 16 times (BenchmarkIsGVKNamespaced).
func TestRememberedMappingAllocatesNothing(t *testing.T) {
	m := restmap.Memoize(discoveryMapper())
	gk := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	if _, err := m.RESTMapping(gk, "v1"); err != nil {
		t.Fatal(err)
	}
	var err error
	if allocs := testing.AllocsPerRun(100, func() { _, err = m.RESTMapping(gk, "v1") }); allocs > 1 {
		t.Errorf("a remembered mapping allocates %.0f times, want at most 1 (the call's variadic slice)", allocs)
	}
	if err != nil {
		t.Fatal(err)
	}
}
