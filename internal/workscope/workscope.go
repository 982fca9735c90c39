// Package workscope carries, in a pass's context, the scope that work
// the pass starts may outlive it in: package shard sets a slot's, and
// package operation runs its operations in it, so that a slot changes
// member only once the work started under it has ended.
package workscope

import "context"

// Scope is what work started by a pass may outlive the pass within.
type Scope interface {
	// Go runs f in a goroutine with a context that ends when the scope
	// does; the scope's end waits for f to return. It reports false,
	// running nothing, once the scope has ended.
	Go(f func(ctx context.Context)) bool
}

type key struct{}

// With returns ctx carrying s.
func With(ctx context.Context, s Scope) context.Context { return context.WithValue(ctx, key{}, s) }

// From returns the Scope ctx carries, or nil.
func From(ctx context.Context) Scope {
	s, _ := ctx.Value(key{}).(Scope)
	return s
}
