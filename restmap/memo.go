package restmap

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Provider is a ctrl.Options.MapperProvider: controller-runtime's
// dynamic mapper, memoized.
func Provider(config *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(config, httpClient)
	if err != nil {
		return nil, err
	}
	return Memoize(m), nil
}

// Memoize returns m with each mapping RESTMapping finds for a kind at one
// version kept. Misses, and calls with no or several versions, go to m
// every time. The *meta.RESTMapping returned is shared: do not modify it.
// Reset forgets, and resets m if m can.
func Memoize(m meta.RESTMapper) meta.ResettableRESTMapper {
	return &memo{RESTMapper: m, mappings: map[key]*meta.RESTMapping{}}
}

type memo struct {
	meta.RESTMapper
	// A map under a lock rather than a sync.Map: a key boxed into an
	// interface would allocate on every lookup.
	mu       sync.RWMutex
	mappings map[key]*meta.RESTMapping
}

type key struct{ group, kind, version string }

func (m *memo) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 || versions[0] == "" {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	k := key{gk.Group, gk.Kind, versions[0]}
	m.mu.RLock()
	r, ok := m.mappings[k]
	m.mu.RUnlock()
	if ok {
		return r, nil
	}
	r, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.mappings[k] = r
	m.mu.Unlock()
	return r, nil
}

func (m *memo) Reset() {
	m.mu.Lock()
	clear(m.mappings)
	m.mu.Unlock()
	if r, ok := m.RESTMapper.(meta.ResettableRESTMapper); ok {
		r.Reset()
	}
}
