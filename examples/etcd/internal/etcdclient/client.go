package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"strconv"
)

// ErrNoLeader is returned (wrapped) by a cluster-wide call that reached a
// member without a leader: it cannot be made there now. Reads try the
// client's other endpoints first.
var ErrNoLeader = errors.New("etcd cluster has no leader")

// ErrNotYet is returned (wrapped) by a membership change etcd refused for
// now: a voting member is not connected (its strict reconfiguration
// check), or the learner to promote is not in sync. The same call
// succeeds later.
var ErrNotYet = errors.New("etcd refused the membership change for now")

// ErrRefused is returned (wrapped) when a member answered and refused the
// request itself (permission denied, unauthenticated, unimplemented, an
// invalid argument): sending the same request again gets the same answer.
// Errors without it may be transient.
var ErrRefused = errors.New("etcd refused the request")

// Member is one member of an etcd cluster as reported by MemberList.
type Member struct {
	// ID is the member's ID; it is assigned by etcd when the member is
	// added.
	ID uint64
	// Name is the member's --name. It is empty for a member that was added
	// but has not started yet.
	Name string
	// PeerURLs are the member's peer URLs.
	PeerURLs []string
	// ClientURLs are the member's advertised client URLs; empty until the
	// member has started.
	ClientURLs []string
	// IsLearner is true for a non-voting learner.
	IsLearner bool
}

// Started reports whether the member has joined and published its name.
func (m Member) Started() bool { return m.Name != "" }

// IDString returns the member ID in hex, as etcdctl prints it.
func (m Member) IDString() string { return FormatID(m.ID) }

// FormatID formats a member ID in hex, as etcdctl prints it.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// Status is what one member reports about itself.
type Status struct {
	// ID is the responding member's ID.
	ID uint64
	// Version is the etcd server version of the member.
	Version string
	// Leader is the ID of the member it believes is the leader, 0 if none.
	Leader uint64
	// IsLearner is true for a learner.
	IsLearner bool
	// Revision is the member's current key-value store revision.
	Revision int64
	// RaftIndex is the member's committed raft index.
	RaftIndex uint64
	// RaftAppliedIndex is the member's applied raft index.
	RaftAppliedIndex uint64
	// DBSize is the physical size of the member's database in bytes.
	DBSize int64
	// DBSizeInUse is the part of DBSize that holds data; the rest is free
	// pages left by compaction, which only a defragmentation returns to
	// the file system.
	DBSizeInUse int64
	// Alarms are the types of the alarms raised in the cluster
	// (AlarmNoSpace, AlarmCorrupt), whichever member raised them.
	Alarms []string
	// Errors are the other problems the member reports.
	Errors []string
}

// Healthy reports whether the member has a leader and reports no errors.
// Alarms are the cluster's, not the member's: a member that reports one
// may still be healthy.
func (s Status) Healthy() bool { return s.Leader != 0 && len(s.Errors) == 0 }

// Alarm types, as etcd names them.
const (
	// AlarmNoSpace: a member's database reached its quota; etcd refuses
	// writes until the alarm is disarmed.
	AlarmNoSpace = "NOSPACE"
	// AlarmCorrupt: a member's data differs from the others'.
	AlarmCorrupt = "CORRUPT"
)

// Alarm is one alarm raised by one member.
type Alarm struct {
	MemberID uint64
	Type     string
}

// Reclaimable is how many bytes a defragmentation would return to the file
// system: the database's free pages.
func (s Status) Reclaimable() int64 { return max(s.DBSize-s.DBSizeInUse, 0) }

// SnapshotInfo describes a snapshot written by Client.Snapshot.
type SnapshotInfo struct {
	// Revision is the store revision of the member just before the
	// snapshot started; the snapshot holds at least this revision.
	Revision int64
	// Version is the etcd server version of the member that sent it.
	Version string
	// Size is the number of bytes written, the trailing checksum included.
	Size int64
}

// KeyValue is one key and its value, written by Client.Put in a restore.
type KeyValue struct {
	Key, Value []byte
}

// Client is every etcd call the operator makes. Implementations are safe for
// concurrent use. Errors from an unreachable cluster are returned as they
// come; callers treat any error as transient unless documented otherwise.
type Client interface {
	// MemberList lists the cluster's members, learners included.
	MemberList(ctx context.Context) ([]Member, error)
	// MemberAddAsLearner adds a learner with the given peer URL and returns
	// it (with its new ID) and the member list after the change.
	MemberAddAsLearner(ctx context.Context, peerURL string) (Member, []Member, error)
	// MemberPromote promotes learner id to a voting member. etcd refuses
	// while the learner lags behind the leader; the error says so and the
	// call can be retried.
	MemberPromote(ctx context.Context, id uint64) error
	// MemberRemove removes member id.
	MemberRemove(ctx context.Context, id uint64) error
	// Status asks the member serving endpoint for its status.
	Status(ctx context.Context, endpoint string) (Status, error)
	// Snapshot streams a snapshot of the whole key space into w and checks
	// the SHA-256 that etcd appends to the stream. The Client must have
	// exactly one endpoint, so that it is known which member the snapshot
	// (and its version and revision) came from. A member that refuses the
	// snapshot makes it return an error wrapping ErrRefused.
	Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error)
	// Put writes kvs in one transaction (a restore's batch).
	Put(ctx context.Context, kvs []KeyValue) error
	// Revision returns the cluster's revision through a linearizable read:
	// every write acknowledged before the call is at or below it.
	Revision(ctx context.Context) (int64, error)
	// Alarms lists the alarms raised in the cluster.
	Alarms(ctx context.Context) ([]Alarm, error)
	// Disarm disarms alarm a. etcd raises NOSPACE again at the next write
	// if the database is still at its quota.
	Disarm(ctx context.Context, a Alarm) error
	// Compact discards the revisions before rev and waits until the
	// members' databases have freed them, so that a defragmentation that
	// follows returns them to the file system. Compacting at or below the
	// last compaction is no error.
	Compact(ctx context.Context, rev int64) error
	// Defragment defragments the database of the member serving endpoint,
	// which blocks that member's reads and writes until it is done.
	Defragment(ctx context.Context, endpoint string) error
	// MoveLeader hands leadership to voting member transferee. The Client
	// must reach the current leader only (a Client on its endpoint alone):
	// etcd refuses the call on a follower.
	MoveLeader(ctx context.Context, transferee uint64) error
	// Close releases the client's connections.
	Close() error
}

// Factory builds a Client on endpoints (client URLs).
type Factory interface {
	New(ctx context.Context, endpoints []string, opts ...DialOption) (Client, error)
}

// FactoryFunc adapts a function to Factory.
type FactoryFunc func(ctx context.Context, endpoints []string, opts ...DialOption) (Client, error)

// New calls f(ctx, endpoints, opts...).
func (f FactoryFunc) New(ctx context.Context, endpoints []string, opts ...DialOption) (Client, error) {
	return f(ctx, endpoints, opts...)
}

// DialOption configures one Factory.New call.
type DialOption func(*DialOptions)

// DialOptions are what DialOptions set; Factory implementations read them
// with Dial.
type DialOptions struct {
	// TLS is the client's TLS configuration: its certificate and the CAs
	// it trusts. Nil dials in plain text.
	TLS *tls.Config
}

// WithTLS dials the members over TLS with cfg (nil: plain text). The
// server name is verified against each endpoint's host unless cfg sets
// ServerName; a Factory that dials somewhere else than the endpoint's
// host (a port-forward) sets it to the host of the first endpoint, so the
// members' certificate must be valid for every member's host name (a
// wildcard, "*.<cluster>.<namespace>.svc", as spec.tls asks).
func WithTLS(cfg *tls.Config) DialOption {
	return func(o *DialOptions) { o.TLS = cfg }
}

// Dial returns the options opts set.
func Dial(opts ...DialOption) DialOptions {
	var o DialOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
