package shard

import (
	"cmp"
	"time"

	"k8s.io/apimachinery/pkg/labels"
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
	// Namespaces holds the objects sharded (the manager's
	// cache.Options.DefaultNamespaces); empty: every namespace.
	Namespaces []string
}

func (r Ring) leaseDuration() time.Duration {
	return cmp.Or(r.LeaseDuration, DefaultLeaseDuration)
}

func (r Ring) leaseName(identity string) string { return r.Name + "-" + identity }

// Label is the label whose value names the member an object belongs to:
// shard.opkit.dev/<Name>.
func (r Ring) Label() string { return "shard.opkit.dev/" + r.Name }

// DrainLabel is set on an object its member must hand over: the member
// acknowledges by removing both labels (Handoff).
func (r Ring) DrainLabel() string { return "drain.shard.opkit.dev/" + r.Name }

// Selector selects the objects of member identity, for its cache
// (cache.ByObject's Label): the member holds only its share.
func (r Ring) Selector(identity string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{r.Label(): identity})
}
