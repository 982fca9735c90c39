package reconcile

import "context"

// passKey is the context key of a Reconciler's pass.
type passKey struct{}

// pass is what a Reconciler tells Children and the hooks through the
// context of its pass; one per Reconciler, so a pass allocates nothing.
type pass struct {
	fieldOwner string
	unseen     *unseenCreates
}

func withPass(ctx context.Context, p *pass) context.Context {
	return context.WithValue(ctx, passKey{}, p)
}

func passFrom(ctx context.Context) *pass {
	p, _ := ctx.Value(passKey{}).(*pass)
	return p
}

// FieldOwnerFrom returns the server-side-apply field manager of the
// Reconciler whose pass ctx belongs to (WithFieldOwner, default
// "opkit-<kind>"), and false for a ctx that is not a pass's. Hooks that
// apply objects with their own client calls use it so that every write of
// a Reconciler is made as one field manager; Children does so itself.
func FieldOwnerFrom(ctx context.Context) (string, bool) {
	p := passFrom(ctx)
	if p == nil {
		return "", false
	}
	return p.fieldOwner, p.fieldOwner != ""
}

// unseenCreatesFrom returns the unseenCreates of ctx's pass, or nil.
func unseenCreatesFrom(ctx context.Context) *unseenCreates {
	if p := passFrom(ctx); p != nil {
		return p.unseen
	}
	return nil
}
