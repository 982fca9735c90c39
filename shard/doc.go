// Package shard spreads one controller's objects over several replicas:
// each replica announces itself with a Lease, and every object belongs to
// one live replica, chosen by rendezvous hashing so that a replica joining
// or leaving moves only its own share.
//
//	ring := shard.Ring{Name: "memcached", Namespace: "memcached-system"}
//	mgr.Add(ring.Member(mgr.GetClient(), podName))
//	view := ring.View()
//	members, err := view.Members(ctx, mgr.GetAPIReader(), time.Now())
//	owner := shard.Owner(string(obj.GetUID()), members)
//
// This is the membership and assignment under sharding; labelling objects
// and handing them over are built on it.
package shard
