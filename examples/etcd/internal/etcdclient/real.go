package etcdclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout bounds how long NewFactory's clients wait for a first
// connection.
const DefaultDialTimeout = 5 * time.Second

// NewFactory returns the production Factory: clients on
// go.etcd.io/etcd/client/v3, over TLS when WithTLS is given and plain HTTP
// otherwise, dialing with dialTimeout (DefaultDialTimeout if <= 0).
func NewFactory(dialTimeout time.Duration) Factory {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return FactoryFunc(func(ctx context.Context, endpoints []string, opts ...DialOption) (Client, error) {
		if len(endpoints) == 0 {
			return nil, errors.New("etcd client: no endpoints")
		}
		o := Dial(opts...)
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: dialTimeout,
			Context:     ctx,
			Logger:      zap.NewNop(),
			TLS:         o.TLS,
		})
		if err != nil {
			return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
		}
		return &real{c: c}, nil
	})
}

type real struct {
	c *clientv3.Client
}

func members(in []*pb.Member) []Member {
	out := make([]Member, 0, len(in))
	for _, m := range in {
		out = append(out, Member{
			ID:         m.ID,
			Name:       m.Name,
			PeerURLs:   append([]string(nil), m.PeerURLs...),
			ClientURLs: append([]string(nil), m.ClientURLs...),
			IsLearner:  m.IsLearner,
		})
	}
	return out
}

// leader makes a call fail at once on a member without a leader (cut from
// its peers, or of a cluster without quorum), so that the client tries the
// next endpoint: such a member otherwise holds a cluster-wide call until
// the caller's deadline. Not for calls about one member, which a
// leaderless member still answers.
func leader(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// noLeader wraps err with ErrNoLeader when the member had no leader, and
// with ErrNotYet when etcd refused a membership change for now.
func noLeader(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrNoLeader):
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	case errors.Is(err, rpctypes.ErrUnhealthy), errors.Is(err, rpctypes.ErrMemberNotEnoughStarted),
		errors.Is(err, rpctypes.ErrMemberLearnerNotReady):
		return fmt.Errorf("%w: %w", ErrNotYet, err)
	}
	return err
}

func (r *real) MemberList(ctx context.Context) ([]Member, error) {
	resp, err := r.c.MemberList(leader(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", noLeader(err))
	}
	return members(resp.Members), nil
}

func (r *real) MemberAddAsLearner(ctx context.Context, peerURL string) (Member, []Member, error) {
	resp, err := r.c.MemberAddAsLearner(leader(ctx), []string{peerURL})
	if err != nil {
		return Member{}, nil, fmt.Errorf("adding learner %s: %w", peerURL, noLeader(err))
	}
	added := members([]*pb.Member{resp.Member})[0]
	return added, members(resp.Members), nil
}

func (r *real) MemberPromote(ctx context.Context, id uint64) error {
	if _, err := r.c.MemberPromote(leader(ctx), id); err != nil {
		return fmt.Errorf("promoting learner %s: %w", FormatID(id), noLeader(err))
	}
	return nil
}

func (r *real) MemberRemove(ctx context.Context, id uint64) error {
	if _, err := r.c.MemberRemove(leader(ctx), id); err != nil {
		return fmt.Errorf("removing member %s: %w", FormatID(id), noLeader(err))
	}
	return nil
}

func (r *real) Status(ctx context.Context, endpoint string) (Status, error) {
	resp, err := r.c.Status(ctx, endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	st := Status{
		ID:               resp.Header.GetMemberId(),
		Version:          resp.Version,
		Leader:           resp.Leader,
		IsLearner:        resp.IsLearner,
		Revision:         resp.Header.GetRevision(),
		RaftIndex:        resp.RaftIndex,
		RaftAppliedIndex: resp.RaftAppliedIndex,
		DBSize:           resp.DbSize,
		DBSizeInUse:      resp.DbSizeInUse,
	}
	for _, e := range resp.Errors {
		// etcd reports an alarm as its protobuf text: "memberID:... alarm:NOSPACE".
		if m := alarmText.FindStringSubmatch(e); m != nil {
			if !slices.Contains(st.Alarms, m[1]) {
				st.Alarms = append(st.Alarms, m[1])
			}
			continue
		}
		st.Errors = append(st.Errors, e)
	}
	return st, nil
}

var alarmText = regexp.MustCompile(`\balarm:([A-Z]+)`)

func (r *real) Alarms(ctx context.Context) ([]Alarm, error) {
	resp, err := r.c.AlarmList(leader(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing alarms: %w", noLeader(err))
	}
	out := make([]Alarm, 0, len(resp.Alarms))
	for _, a := range resp.Alarms {
		out = append(out, Alarm{MemberID: a.MemberID, Type: a.Alarm.String()})
	}
	return out, nil
}

func (r *real) Disarm(ctx context.Context, a Alarm) error {
	t, ok := pb.AlarmType_value[a.Type]
	if !ok {
		return fmt.Errorf("disarming alarm %s of member %s: unknown alarm type: %w", a.Type, FormatID(a.MemberID), ErrRefused)
	}
	if _, err := r.c.AlarmDisarm(leader(ctx), &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType(t)}); err != nil {
		return fmt.Errorf("disarming alarm %s of member %s: %w", a.Type, FormatID(a.MemberID), noLeader(refusal(err)))
	}
	return nil
}

func (r *real) Compact(ctx context.Context, rev int64) error {
	_, err := r.c.Compact(leader(ctx), rev, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compacting at revision %d: %w", rev, noLeader(err))
	}
	return nil
}

func (r *real) Revision(ctx context.Context) (int64, error) {
	resp, err := r.c.Get(leader(ctx), "\x00", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("linearizable read: %w", noLeader(err))
	}
	return resp.Header.GetRevision(), nil
}

func (r *real) Defragment(ctx context.Context, endpoint string) error {
	if _, err := r.c.Defragment(ctx, endpoint); err != nil {
		return fmt.Errorf("defragmenting %s: %w", endpoint, refusal(err))
	}
	return nil
}

func (r *real) MoveLeader(ctx context.Context, transferee uint64) error {
	if _, err := r.c.MoveLeader(ctx, transferee); err != nil {
		return fmt.Errorf("moving leadership to %s: %w", FormatID(transferee), refusal(err))
	}
	return nil
}

func (r *real) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	eps := r.c.Endpoints()
	if len(eps) != 1 {
		return SnapshotInfo{}, fmt.Errorf("snapshot needs a client on exactly one endpoint, have %v", eps)
	}
	// Callers give no deadline (a snapshot may take minutes) and the
	// client waits for a dead member forever: a watchdog ends it instead.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(SnapshotStallTimeout, func() { cancel(ErrSnapshotStalled) })
	defer stall.Stop()
	stalled := func(err error) error {
		if errors.Is(context.Cause(ctx), ErrSnapshotStalled) {
			return fmt.Errorf("%w: %w", ErrSnapshotStalled, err)
		}
		return refusal(err)
	}
	// etcd 3.6 sends no revision with the stream and reports its storage
	// version; ask the member first for its server version and revision.
	st, err := r.Status(ctx, eps[0])
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("before snapshot: %w", stalled(err))
	}
	stall.Reset(SnapshotStallTimeout)
	resp, err := r.c.SnapshotWithVersion(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("starting snapshot: %w", stalled(err))
	}
	defer func() { _ = resp.Snapshot.Close() }()
	cw := NewChecksumWriter(progressWriter{w: w, progress: func() { stall.Reset(SnapshotStallTimeout) }})
	n, err := io.Copy(cw, resp.Snapshot)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("streaming snapshot after %d bytes: %w", n, stalled(err))
	}
	if err := cw.Verify(); err != nil {
		return SnapshotInfo{}, err
	}
	return SnapshotInfo{Revision: max(resp.Header.GetRevision(), st.Revision), Version: st.Version, Size: n}, nil
}

// SnapshotStallTimeout is how long a snapshot waits for its member's
// status, its first byte or its next one before it fails with
// ErrSnapshotStalled.
const SnapshotStallTimeout = 20 * time.Second

// ErrSnapshotStalled is returned (wrapped) by Snapshot when the member
// stopped answering for SnapshotStallTimeout.
var ErrSnapshotStalled = errors.New("etcd snapshot stalled")

// progressWriter calls progress on every write.
type progressWriter struct {
	w        io.Writer
	progress func()
}

func (p progressWriter) Write(b []byte) (int, error) {
	p.progress()
	return p.w.Write(b)
}

// refusals are the answers of a member that a retry gets again: the
// client is not allowed to make the request, or the cluster cannot serve
// it at all.
var refusals = []error{
	rpctypes.ErrPermissionDenied, rpctypes.ErrPermissionNotGranted, rpctypes.ErrRoleNotGranted,
	rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound, rpctypes.ErrAuthFailed, rpctypes.ErrInvalidAuthToken,
	rpctypes.ErrNotCapable,
}

// refusal wraps err with ErrRefused when err, or an error it wraps, is one
// of refusals, as a gRPC status or as the client's rpctypes.EtcdError.
func refusal(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		// rpctypes.Error maps a gRPC status from etcd to its EtcdError
		// and returns other errors as they are.
		etcdErr := rpctypes.Error(e)
		for _, r := range refusals {
			if etcdErr == r { //nolint:errorlint // EtcdErrors are comparable values
				return fmt.Errorf("%w: %w", ErrRefused, err)
			}
		}
	}
	return err
}

func (r *real) Put(ctx context.Context, kvs []KeyValue) error {
	ops := make([]clientv3.Op, 0, len(kvs))
	for _, kv := range kvs {
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
	}
	if _, err := r.c.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("writing %d keys: %w", len(kvs), err)
	}
	return nil
}

func (r *real) Close() error { return r.c.Close() }

// ErrSnapshotChecksum is returned (wrapped) when a snapshot stream's trailing
// SHA-256 does not match its data, or the stream is too short to carry one.
var ErrSnapshotChecksum = errors.New("etcd snapshot checksum mismatch")

// ChecksumWriter passes an etcd snapshot stream through to an io.Writer and
// checks the SHA-256 of the database that etcd appends to the stream.
type ChecksumWriter struct {
	w    io.Writer
	h    hash.Hash
	tail []byte // the last sha256.Size bytes seen, not yet hashed
	n    int64
}

// NewChecksumWriter returns a ChecksumWriter writing to w.
func NewChecksumWriter(w io.Writer) *ChecksumWriter {
	return &ChecksumWriter{w: w, h: sha256.New()}
}

// Write writes p to the underlying writer and hashes everything but the last
// sha256.Size bytes seen so far.
func (c *ChecksumWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	buf := make([]byte, 0, len(c.tail)+n)
	buf = append(buf, c.tail...)
	buf = append(buf, p[:n]...)
	if len(buf) > sha256.Size {
		cut := len(buf) - sha256.Size
		c.h.Write(buf[:cut])
		buf = buf[cut:]
	}
	c.tail = buf
	return n, err
}

// Verify reports whether the bytes written so far end with the SHA-256 of the
// bytes before it.
func (c *ChecksumWriter) Verify() error {
	if len(c.tail) < sha256.Size {
		return fmt.Errorf("%w: stream of %d bytes has no checksum", ErrSnapshotChecksum, c.n)
	}
	if sum := c.h.Sum(nil); !bytes.Equal(sum, c.tail) {
		return fmt.Errorf("%w: data hashes to %x, stream says %x", ErrSnapshotChecksum, sum, c.tail)
	}
	return nil
}
