package guard_test

import (
	"testing"

	"github.com/opkit-dev/opkit/shard"
)

// TestEnsureCarriesTheOwnersSlot: under sharding, a guard carries its
// owner's slot label, and follows it when the owner's slot changes, so
// that the replica holding the owner's slot caches the guard (its
// Collector and the next Ensure see it). Before, guards had no slot
// label: a sharded cache of ConfigMaps never showed one, Ensure created
// it again (AlreadyExists) on every pass, and no Collector saw it.
func TestEnsureCarriesTheOwnersSlot(t *testing.T) {
	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	slot := shard.Ring{Name: "widgets"}.SlotLabel()
	w.Labels = map[string]string{slot: "3", "team": "a"}
	must(t, env.Client.Update(t.Context(), w))
	cm, err := g.Ensure(t.Context(), w)
	must(t, err)
	if got := cm.Labels[slot]; got != "3" {
		t.Errorf("guard's %s = %q, want the owner's 3", slot, got)
	}
	if _, ok := cm.Labels["team"]; ok {
		t.Error("the guard took an owner label that is not a slot")
	}
	w.Labels[slot] = "5"
	must(t, env.Client.Update(t.Context(), w))
	cm, err = g.Ensure(t.Context(), w)
	must(t, err)
	must(t, get(t, cm))
	if got := cm.Labels[slot]; got != "5" {
		t.Errorf("guard's %s = %q after the owner moved, want 5", slot, got)
	}
}
