// Package controller holds the etcd example operator's hooks for opkit's
// reconcile.Reconciler: ClusterHooks for EtcdCluster and BackupHooks for
// EtcdBackup.
//
// Each EtcdCluster pass observes the member pods and etcd's member list,
// asks membership.Plan for one step, carries it out and records what it saw
// in the status. Members are plain pods (not a StatefulSet) so that every
// membership change is an explicit etcd call followed by one Kubernetes
// write; a crash between the two is finished by the next pass, because the
// planner looks at both sides.
//
// Every child of a cluster is held by the cluster's guard (opkit's package
// guard), which the finalizer releases after the final backup, so that
// neither a propagation policy nor the namespace's deletion deletes the
// members before it; NewGuardCollector releases the guards of clusters
// deleted without their finalizer. SetupWithManager wires the three controllers,
// with a cache restricted by CacheOptions to the operator's own objects.
//
// One topic per file: cluster.go (ClusterHooks and the order of a pass),
// observe.go (what a pass sees), status.go (status and conditions),
// members.go (carrying out membership steps on etcd and pods), pods.go
// (the children's specs), restore.go (both restore paths), backups.go
// (scheduled backups and retention), deletion.go (the finalizer and final
// backup), guard.go (what keeps members until the final backup),
// etcdbackup.go (BackupHooks), stores.go, metrics.go and setup.go
// (SetupWithManager, CacheOptions).
//
// Members are reached through Endpoints (pod DNS names on the headless
// Service by default) and an etcdclient.Factory; see package etcdclient for
// running the operator outside the cluster.
package controller
