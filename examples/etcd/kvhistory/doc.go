// Package kvhistory records what concurrent clients of an etcd cluster
// put and read, and checks with porcupine that the history is
// linearizable: no acknowledged write lost, no stale read.
//
// It is shared by the etcd example's fault campaign and its e2e suites.
package kvhistory
