package shard

import (
	"cmp"
	"errors"
	"time"
)

// ErrIdentity is returned for a member without an identity.
var ErrIdentity = errors.New("shard: a member needs an identity, such as its pod's name")

// RingLabel labels a member's Lease with its ring's name.
const RingLabel = "shard.opkit.dev/ring"

// DefaultLeaseDuration is a member's lease when Ring.LeaseDuration is 0,
// leader election's default.
const DefaultLeaseDuration = 15 * time.Second

// Ring is the replicas sharing one controller's objects. Each member holds
// a Lease named <Name>-<identity> in Namespace, labelled RingLabel=Name.
type Ring struct {
	// Name names the ring; it must be a valid label value.
	Name string
	// Namespace holds the members' Leases: the operator's own.
	Namespace string
	// LeaseDuration is how long a member counts as live after a renewal
	// another replica saw; members renew at a third of it. Leases state
	// it rounded up to a whole second.
	LeaseDuration time.Duration
	// Namespaces holds the objects sharded (the manager's
	// cache.Options.DefaultNamespaces); empty: every namespace.
	Namespaces []string
	// Slots is how many slots the objects are spread over (default
	// DefaultSlots). Each object's slot is written once into its
	// SlotLabel, so it must not change for the ring's life; no more
	// than Slots members hold objects.
	Slots int
}

func (r Ring) leaseDuration() time.Duration {
	return cmp.Or(r.LeaseDuration, DefaultLeaseDuration)
}

func (r Ring) leaseName(identity string) string { return r.Name + "-" + identity }
