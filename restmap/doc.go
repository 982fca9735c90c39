// Package restmap remembers a RESTMapper's mappings of one version of a
// kind. controller-runtime's cache of several namespaces asks its mapper
// whether a kind is namespaced on every Get and List, and the dynamic
// mapper answers each time through client-go's priority mapper, which
// allocates: 7% of a sharded operator's CPU at N=10 000
// (docs/benchmarks/shards.md).
//
//	mgr, _ := ctrl.NewManager(cfg, ctrl.Options{MapperProvider: restmap.Provider})
//
// A mapping, once found, is kept until Reset: a kind whose CRD is deleted
// and created again with another scope or plural needs a Reset or a
// restart, as controller-runtime's dynamic mapper does until a lookup of
// that group misses.
package restmap
