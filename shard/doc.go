// Package shard spreads one controller's objects over several replicas.
// Each object has a slot (Ring.Slot), written once into its label
// Ring.SlotLabel at admission (Ring.SetupWebhookWithManager) or after by
// the Sharder; children take their owner's. Each
// replica's manager cache (Ring.NewCache) holds a Lease listing the slots
// it holds, takes its share of the slots (rendezvous hashing with
// quotas) once no live member lists them, and caches only their objects.
// Handoff wraps the member's reconciler so that a pass runs only for an
// object of a slot held: a slot is given up after its passes ended, and
// taken once its old member let go of it or its Lease ran out, so no
// object is reconciled by two members at once, and a move writes nothing.
//
//	ring := shard.Ring{Name: "widgets", Namespace: "widgets-system"}
//	mgr, _ := ctrl.NewManager(cfg, ctrl.Options{NewCache: ring.NewCache(pod, &Widget{})})
//	(&shard.Sharder{Ring: ring, GVK: widgetGVK}).SetupWithManager(mgr)
//	ctrl.NewControllerManagedBy(mgr).For(&Widget{}).
//		Complete(shard.Handoff(mgr, &Widget{}, r))
package shard
