// Package shard spreads one controller's objects over several replicas.
// Each replica is a member of a Ring while it holds a Lease (Member); a
// Sharder labels every object with the live member that owns it
// (rendezvous hashing, Owner, so a member joining or leaving moves only
// its share); each member's cache selects its label (Ring.Selector), so
// it holds only its objects; and Handoff wraps the member's reconciler so
// that an object moves only after its old member acknowledged, or after
// that member's Lease ran out: no object is reconciled by two members at
// once.
//
//	ring := shard.Ring{Name: "widgets", Namespace: "widgets-system"}
//	mgr, _ := ctrl.NewManager(cfg, ctrl.Options{Cache: cache.Options{
//		ByObject: map[client.Object]cache.ByObject{&Widget{}: {Label: ring.Selector(pod)}}}})
//	leases, _ := coordinationv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
//	mgr.Add(ring.Member(leases, pod))
//	(&shard.Sharder{Ring: ring, Identity: pod, GVK: widgetGVK}).SetupWithManager(mgr)
//	ctrl.NewControllerManagedBy(mgr).For(&Widget{}).
//		Complete(shard.Handoff(ring, pod, mgr, &Widget{}, r))
//
// Children (Sharder.Children) move with their owner: the Sharder labels
// them with its member, before the owner when it moves.
package shard
