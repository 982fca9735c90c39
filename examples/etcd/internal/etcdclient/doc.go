// Package etcdclient is the etcd example operator's one seam to etcd: the
// Client interface holds every etcd call the operator makes (membership,
// member status, snapshots and the batched writes of a restore), and a
// Factory builds a Client for a list of endpoints.
//
// # Reaching members
//
// The operator never dials etcd directly; it asks a Factory for a Client on
// the client URLs of the members it wants to talk to. Which URLs those are is
// decided by the caller (see the controller's endpoint function):
//
//   - In-cluster, members are reached through their pod DNS names on the
//     cluster's headless Service, http://<pod>.<cluster>.<namespace>.svc:2379.
//   - In development (go run . in examples/etcd, outside the cluster) the same
//     names do not resolve. PortForwardFactory takes the same URLs, opens a
//     port-forward through the API server to each member's pod (as kubectl
//     port-forward does) and dials etcd at the forward's local port; the
//     operator's --member-access=port-forward. An endpoint function mapping
//     members to addresses of your own (--client-url-template) works too.
//   - In tests, Real dials local etcd processes on 127.0.0.1 and Fake stands
//     in for a cluster entirely.
//
// Real (NewFactory) is the production implementation on
// go.etcd.io/etcd/client/v3. PortForwardFactory wraps it for an operator
// outside the cluster. Fake is an in-memory cluster for controller tests,
// with hooks to inject failures between an etcd call and the Kubernetes write
// that follows it.
//
// # Footguns
//
//   - MemberRemove must be sent through the members that stay: a Client built
//     on the departing member's endpoint may lose its connection half-way.
//   - Status is per endpoint, not per Client: ask each member for its own
//     status to judge health; a Client with several endpoints answers
//     MemberList from whichever member it reaches first.
//   - A snapshot stream from etcd ends with a SHA-256 of the database; Snapshot
//     checks it and fails when it does not match, so a truncated or corrupted
//     stream never becomes a backup.
//   - client-go ends a whole port-forward when one connection through it
//     fails, for example while etcd is not listening in the pod yet. The
//     clients using it then fail; the next New opens a new forward.
//   - A PortForwardFactory must be closed (the operator closes it when its
//     manager stops); its forwards hold a connection to the API server each.
package etcdclient
