// Package slotctx carries, in a pass's context, the shard slot label of
// the object the pass is over: package shard sets it, and package
// reconcile stamps it on the children it writes, without importing shard.
package slotctx

import "context"

type ctxKey struct{}

// With returns ctx carrying the slot label label=value.
func With(ctx context.Context, label, value string) context.Context {
	return context.WithValue(ctx, ctxKey{}, [2]string{label, value})
}

// From returns the slot label ctx carries; ok is false if none.
func From(ctx context.Context) (label, value string, ok bool) {
	kv, ok := ctx.Value(ctxKey{}).([2]string)
	return kv[0], kv[1], ok
}
