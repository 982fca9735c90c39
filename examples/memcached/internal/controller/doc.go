// Package controller is the domain logic of the memcached example operator:
// the opkit reconcile hooks for the Memcached kind and the controller wiring.
//
// Each pass of Hooks.Reconcile
//
//   - applies the Deployment, the headless Service and (for more than one pod)
//     the PodDisruptionBudget through reconcile.Children, which writes only
//     when one of the fields built here differs from the cluster;
//   - lists the Memcached's pods from the cache (metadata only) into
//     status.nodes;
//   - derives Available, Progressing and Degraded from the Deployment and
//     returns Waiting while a rollout is under way.
//
// The Reconciler from package reconcile does the rest: fetching,
// Ready/Reconciling/Stalled, observedGeneration and a single status write
// per pass, none when nothing changed. A Memcached carries no finalizer:
// the garbage collector deletes its children, which are all it has.
package controller
