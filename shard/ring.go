package shard

import (
	"cmp"
	"time"
)

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
	// another replica saw; members renew at a third of it.
	LeaseDuration time.Duration
}

func (r Ring) leaseDuration() time.Duration {
	return cmp.Or(r.LeaseDuration, DefaultLeaseDuration)
}

func (r Ring) leaseName(identity string) string { return r.Name + "-" + identity }
