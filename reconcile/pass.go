package reconcile

import "context"

// fieldOwnerKey is the context key of the field owner of a pass.
type fieldOwnerKey struct{}

// withFieldOwner returns ctx carrying the field owner of a Reconciler's
// pass, for Children and the hooks.
func withFieldOwner(ctx context.Context, fieldOwner string) context.Context {
	return context.WithValue(ctx, fieldOwnerKey{}, fieldOwner)
}

// FieldOwnerFrom returns the server-side-apply field manager of the
// Reconciler whose pass ctx belongs to (WithFieldOwner, default
// "opkit-<kind>"), and false for a ctx that is not a pass's. Hooks that
// apply objects with their own client calls use it so that every write of
// a Reconciler is made as one field manager; Children does so itself.
func FieldOwnerFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(fieldOwnerKey{}).(string)
	return s, ok && s != ""
}
