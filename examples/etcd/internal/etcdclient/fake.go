package etcdclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Fake is an in-memory etcd cluster for controller tests. Members are added
// with MemberAddAsLearner (or Bootstrap) and become started and healthy when
// the test calls Start, standing in for a pod that runs. Every method is
// safe for concurrent use.
//
// Failures are injected with FailNext: the named call fails once, before or
// after taking effect, which is how tests reproduce a crash between an etcd
// call and the Kubernetes write that follows it.
type Fake struct {
	mu      sync.Mutex
	nextID  uint64
	members []*fakeMember
	leader  uint64
	data    map[string]string
	// rev is the store revision: one per key written. writes are the
	// writes in revision order, from which a lagging member's key space is
	// rebuilt.
	rev    int64
	writes []fakeWrite
	fail   map[string]fakeFailure
	calls  []string
	// noQuorum makes MemberList fail and Status report no leader, as a
	// cluster that lost its quorum (LoseQuorum).
	noQuorum bool
	// alarms are raised by RaiseAlarm; compacted is the last Compact.
	alarms    []Alarm
	compacted int64
	// Version is reported by Status; "3.6.16" if empty.
	Version string
	// held makes Snapshot wait (HoldSnapshots).
	held chan struct{}
	// holding receives a value per Snapshot that waits.
	holding chan struct{}
}

type fakeMember struct {
	Member
	clientURL string
	started   bool
	healthy   bool
	// dbSize and dbInUse are the database's size and the part in use.
	dbSize, dbInUse int64
	// raftIndex is what Status reports (SetRaftIndex).
	raftIndex uint64
	// lagging members have applied writes up to applied only (SetApplied).
	lagging bool
	applied int64
	// frozen members answer no Status until its deadline (SetFrozen).
	frozen bool
}

type fakeWrite struct {
	key, value string
	rev        int64
}

type fakeFailure struct {
	err   error
	after bool
}

// NewFake returns an empty fake cluster.
func NewFake() *Fake {
	return &Fake{nextID: 0x1000, data: map[string]string{}, fail: map[string]fakeFailure{}}
}

// Factory returns a Factory whose clients all reach f, whatever the
// endpoints; an endpoint is only used to pick the member in Status.
func (f *Fake) Factory() Factory {
	return FactoryFunc(func(_ context.Context, endpoints []string, _ ...DialOption) (Client, error) {
		if err := f.take("New", false); err != nil {
			return nil, err
		}
		return &fakeClient{f: f, endpoints: endpoints}, nil
	})
}

// FailNext makes the next call of method (a Client method name, or "New"
// for the factory) return err. With after it fails only after the call took
// effect.
func (f *Fake) FailNext(method string, err error, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = fakeFailure{err: err, after: after}
}

// Calls returns the methods called so far, in order, as "Method arg".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *Fake) take(method string, after bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.takeLocked(method, after)
}

func (f *Fake) takeLocked(method string, after bool) error {
	ff, ok := f.fail[method]
	if !ok || ff.after != after {
		return nil
	}
	delete(f.fail, method)
	return ff.err
}

// Start marks the member with peerURL as started and healthy and records
// its name and client URL, as a running pod would. A Start on an empty
// cluster bootstraps it with this member as the voting leader.
func (f *Fake) Start(name, peerURL, clientURL string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.members) == 0 {
		f.nextID++
		f.members = append(f.members, &fakeMember{Member: Member{ID: f.nextID, PeerURLs: []string{peerURL}}})
		f.leader = f.nextID
	}
	for _, m := range f.members {
		if m.PeerURLs[0] == peerURL {
			m.Name, m.clientURL, m.started, m.healthy = name, clientURL, true, true
			m.ClientURLs = []string{clientURL}
		}
	}
}

// onMember calls fn, under the lock, for the member with peerURL, if
// there is one.
func (f *Fake) onMember(peerURL string, fn func(*fakeMember)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if m.PeerURLs[0] == peerURL {
			fn(m)
		}
	}
}

// SetHealthy marks the member with peerURL healthy or not.
func (f *Fake) SetHealthy(peerURL string, healthy bool) {
	f.onMember(peerURL, func(m *fakeMember) { m.healthy = healthy })
}

// SetFrozen makes the member with peerURL hold every Status call until
// the caller's deadline, as a stopped process or a stalled disk does, or
// answer again.
func (f *Fake) SetFrozen(peerURL string, frozen bool) {
	f.onMember(peerURL, func(m *fakeMember) { m.frozen = frozen })
}

// SetLeader makes the member with peerURL the leader, as an election
// would; it does nothing for an unknown peerURL.
func (f *Fake) SetLeader(peerURL string) {
	f.onMember(peerURL, func(m *fakeMember) { f.leader = m.ID })
}

// SetDBSize sets the database size, and the part of it in use, that the
// member with peerURL reports in Status; Defragment shrinks size to
// inUse.
func (f *Fake) SetDBSize(peerURL string, size, inUse int64) {
	f.onMember(peerURL, func(m *fakeMember) { m.dbSize, m.dbInUse = size, inUse })
}

// SetRaftIndex sets the raft index the member with peerURL reports in
// Status.
func (f *Fake) SetRaftIndex(peerURL string, index uint64) {
	f.onMember(peerURL, func(m *fakeMember) { m.raftIndex = index })
}

// SetApplied makes the member with peerURL one that has applied the writes
// up to revision rev only, as a learner catching up or a follower behind:
// its Status and Snapshot show the key space at rev, and it cannot be
// promoted. CatchUp ends it.
func (f *Fake) SetApplied(peerURL string, rev int64) {
	f.onMember(peerURL, func(m *fakeMember) { m.lagging, m.applied = true, rev })
}

// CatchUp makes the member with peerURL apply every write.
func (f *Fake) CatchUp(peerURL string) {
	f.onMember(peerURL, func(m *fakeMember) { m.lagging = false })
}

// MoveRevision moves the store revision on by n, as a restore with
// etcdutl's --bump-revision does.
func (f *Fake) MoveRevision(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev += n
}

// Revision returns the store revision: the number of keys written.
func (f *Fake) Revision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

// revisionLocked is the revision m has applied.
func (f *Fake) revisionLocked(m *fakeMember) int64 {
	if m != nil && m.lagging {
		return min(m.applied, f.rev)
	}
	return f.rev
}

// dataLocked is the key space m has applied: the whole of it unless m
// lags.
func (f *Fake) dataLocked(m *fakeMember) map[string]string {
	if m == nil || !m.lagging {
		return maps.Clone(f.data)
	}
	out := map[string]string{}
	for _, w := range f.writes {
		if w.rev <= m.applied {
			out[w.key] = w.value
		}
	}
	return out
}

// LoseQuorum makes the cluster one that lost its quorum: MemberList fails
// as etcd's does without one, and Status, which each member still
// answers, reports no leader. ForceNewCluster ends it.
func (f *Fake) LoseQuorum() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noQuorum, f.leader = true, 0
}

// ForceNewCluster does what etcd started with --force-new-cluster on the
// data of the member with peerURL does: the member list is that member
// alone, healthy and leader.
func (f *Fake) ForceNewCluster(peerURL string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = slices.DeleteFunc(f.members, func(m *fakeMember) bool { return m.PeerURLs[0] != peerURL })
	for _, m := range f.members {
		m.IsLearner, m.healthy = false, true
		f.leader = m.ID
	}
	f.noQuorum = false
}

// elect makes the first voting member that runs and has applied every
// write the leader, as raft elects only an up-to-date voter; with none,
// the first member.
func (f *Fake) elect() {
	for _, m := range f.members {
		if !m.IsLearner && m.started && m.healthy && !m.lagging {
			f.leader = m.ID
			return
		}
	}
	if len(f.members) > 0 {
		f.leader = f.members[0].ID
	}
}

// Leader returns the leader's member ID, 0 if none.
func (f *Fake) Leader() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

// Members returns the current member list.
func (f *Fake) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listLocked()
}

func (f *Fake) listLocked() []Member {
	out := make([]Member, 0, len(f.members))
	for _, m := range f.members {
		mm := m.Member
		mm.PeerURLs = slices.Clone(mm.PeerURLs)
		mm.ClientURLs = slices.Clone(mm.ClientURLs)
		out = append(out, mm)
	}
	return out
}

// Data returns a copy of the key space.
func (f *Fake) Data() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.data))
	for k, v := range f.data {
		out[k] = v
	}
	return out
}

type fakeClient struct {
	f         *Fake
	endpoints []string
}

// call runs fn under the lock with failure injection before and after.
func (c *fakeClient) call(method, arg string, fn func() error) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.calls = append(c.f.calls, method+" "+arg)
	if err := c.f.takeLocked(method, false); err != nil {
		return err
	}
	// A member answers Status without a leader (reporting none), as
	// etcd's does; the other calls need one.
	if len(c.f.members) == 0 || (c.f.leader == 0 && method != "Status") {
		return fmt.Errorf("%s: %w", method, ErrNoLeader)
	}
	if err := fn(); err != nil {
		return err
	}
	return c.f.takeLocked(method, true)
}

func (c *fakeClient) MemberList(context.Context) ([]Member, error) {
	var out []Member
	err := c.call("MemberList", "", func() error {
		if c.f.noQuorum {
			return errors.New("etcdserver: request timed out")
		}
		out = c.f.listLocked()
		return nil
	})
	return out, err
}

func (c *fakeClient) MemberAddAsLearner(_ context.Context, peerURL string) (Member, []Member, error) {
	var added Member
	var list []Member
	err := c.call("MemberAddAsLearner", peerURL, func() error {
		for _, m := range c.f.members {
			if m.PeerURLs[0] == peerURL {
				return errors.New("etcdserver: peerURL exists")
			}
			if m.IsLearner {
				return errors.New("etcdserver: too many learner members in cluster")
			}
		}
		c.f.nextID++
		m := &fakeMember{Member: Member{ID: c.f.nextID, PeerURLs: []string{peerURL}, IsLearner: true}}
		c.f.members = append(c.f.members, m)
		added, list = m.Member, c.f.listLocked()
		return nil
	})
	return added, list, err
}

func (c *fakeClient) member(id uint64) (*fakeMember, error) {
	for _, m := range c.f.members {
		if m.ID == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("etcdserver: member %s not found", FormatID(id))
}

func (c *fakeClient) MemberPromote(_ context.Context, id uint64) error {
	return c.call("MemberPromote", FormatID(id), func() error {
		m, err := c.member(id)
		if err != nil {
			return err
		}
		if !m.started || !m.healthy || m.lagging {
			return errors.New("etcdserver: can only promote a learner member which is in sync with leader")
		}
		m.IsLearner = false
		return nil
	})
}

func (c *fakeClient) MemberRemove(_ context.Context, id uint64) error {
	return c.call("MemberRemove", FormatID(id), func() error {
		if _, err := c.member(id); err != nil {
			return err
		}
		c.f.members = slices.DeleteFunc(c.f.members, func(m *fakeMember) bool { return m.ID == id })
		if c.f.leader == id {
			c.f.elect()
		}
		return nil
	})
}

func (c *fakeClient) Status(ctx context.Context, endpoint string) (Status, error) {
	c.f.mu.Lock()
	frozen := slices.ContainsFunc(c.f.members, func(m *fakeMember) bool { return m.clientURL == endpoint && m.frozen })
	c.f.mu.Unlock()
	if frozen {
		<-ctx.Done()
		return Status{}, fmt.Errorf("status of %s: %w", endpoint, ctx.Err())
	}
	var s Status
	err := c.call("Status", endpoint, func() error {
		for _, m := range c.f.members {
			if m.clientURL == endpoint && m.started {
				if !m.healthy {
					return fmt.Errorf("status of %s: context deadline exceeded", endpoint)
				}
				v := c.f.Version
				if v == "" {
					v = "3.6.16"
				}
				s = Status{ID: m.ID, Version: v, Leader: c.f.leader, IsLearner: m.IsLearner, Revision: c.f.revisionLocked(m),
					DBSize: m.dbSize, DBSizeInUse: m.dbInUse, RaftIndex: m.raftIndex}
				for _, a := range c.f.alarms {
					if !slices.Contains(s.Alarms, a.Type) {
						s.Alarms = append(s.Alarms, a.Type)
					}
				}
				return nil
			}
		}
		return fmt.Errorf("status of %s: connection refused", endpoint)
	})
	return s, err
}

// HoldSnapshots makes Snapshot calls wait, before they write, until
// release is called or their context ends, as a large snapshot streaming.
// started receives a value as each call starts waiting.
func (f *Fake) HoldSnapshots() (started <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held, holding := make(chan struct{}), make(chan struct{}, 100)
	f.held, f.holding = held, holding
	return holding, sync.OnceFunc(func() { close(held) })
}

// Snapshot writes the key space of the member on the client's one endpoint
// (the whole key space if it is no member's) as an etcd database (a bbolt file with
// the "key" bucket etcd keeps revisions in; key i in sorted order written at
// revision i+1) followed by its SHA-256, like etcd's stream, so that
// snapshot.Restorer can load it.
func (c *fakeClient) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	c.f.mu.Lock()
	held, holding := c.f.held, c.f.holding
	c.f.mu.Unlock()
	if held != nil {
		holding <- struct{}{}
		select {
		case <-held:
		case <-ctx.Done():
			return SnapshotInfo{}, ctx.Err()
		}
	}
	var kvs []KeyValue
	var rev int64
	err := c.call("Snapshot", "", func() error {
		var from *fakeMember
		for _, m := range c.f.members {
			if len(c.endpoints) == 1 && m.clientURL == c.endpoints[0] {
				from = m
			}
		}
		for k, v := range c.f.dataLocked(from) {
			kvs = append(kvs, KeyValue{Key: []byte(k), Value: []byte(v)})
		}
		rev = c.f.revisionLocked(from)
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, err
	}
	slices.SortFunc(kvs, func(a, b KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	body, err := fakeDatabase(kvs)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("fake snapshot: %w", err)
	}
	sum := sha256.Sum256(body)
	body = append(body, sum[:]...)
	n, err := w.Write(body)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return SnapshotInfo{Revision: rev, Version: "3.6.16", Size: int64(n)}, nil
}

// fakeDatabase returns the bytes of a bbolt database holding kvs in etcd's
// layout: bucket "key", keyed by revision (8 bytes big-endian main
// revision, '_', 8 bytes sub revision), values mvccpb.KeyValue.
func fakeDatabase(kvs []KeyValue) ([]byte, error) {
	dir, err := os.MkdirTemp("", "etcd-fake-snapshot-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i, kv := range kvs {
			rev := int64(i + 1)
			v, err := proto.Marshal(&mvccpb.KeyValue{Key: kv.Key, Value: kv.Value,
				CreateRevision: rev, ModRevision: rev, Version: 1})
			if err != nil {
				return err
			}
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k, uint64(rev))
			k[8] = '_'
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

func (c *fakeClient) Put(_ context.Context, kvs []KeyValue) error {
	return c.call("Put", fmt.Sprint(len(kvs)), func() error {
		for _, a := range c.f.alarms {
			if a.Type == AlarmNoSpace {
				return errors.New("etcdserver: mvcc: database space exceeded")
			}
		}
		for _, kv := range kvs {
			c.f.rev++
			c.f.data[string(kv.Key)] = string(kv.Value)
			c.f.writes = append(c.f.writes, fakeWrite{key: string(kv.Key), value: string(kv.Value), rev: c.f.rev})
		}
		return nil
	})
}

func (c *fakeClient) Revision(context.Context) (int64, error) {
	var rev int64
	err := c.call("Revision", "", func() error {
		rev = c.f.rev
		return nil
	})
	return rev, err
}

func (c *fakeClient) Defragment(_ context.Context, endpoint string) error {
	return c.call("Defragment", endpoint, func() error {
		for _, m := range c.f.members {
			if m.clientURL == endpoint && m.started && m.healthy {
				m.dbSize = m.dbInUse
				return nil
			}
		}
		return fmt.Errorf("defragmenting %s: connection refused", endpoint)
	})
}

func (c *fakeClient) Alarms(context.Context) ([]Alarm, error) {
	var out []Alarm
	err := c.call("Alarms", "", func() error {
		out = slices.Clone(c.f.alarms)
		return nil
	})
	return out, err
}

func (c *fakeClient) Disarm(_ context.Context, a Alarm) error {
	return c.call("Disarm", a.Type+" "+FormatID(a.MemberID), func() error {
		c.f.alarms = slices.DeleteFunc(c.f.alarms, func(b Alarm) bool { return a == b })
		return nil
	})
}

func (c *fakeClient) Compact(_ context.Context, rev int64) error {
	return c.call("Compact", fmt.Sprint(rev), func() error {
		if rev > c.f.rev {
			return fmt.Errorf("compacting at revision %d: etcdserver: mvcc: required revision is a future revision", rev)
		}
		c.f.compacted = max(c.f.compacted, rev)
		return nil
	})
}

// RaiseAlarm raises alarm typ on the member with peerURL, as etcd does
// when that member's database reaches its quota (AlarmNoSpace): every
// member reports it, and Put fails while NOSPACE is raised.
func (f *Fake) RaiseAlarm(peerURL, typ string) {
	f.onMember(peerURL, func(m *fakeMember) {
		a := Alarm{MemberID: m.ID, Type: typ}
		if !slices.Contains(f.alarms, a) {
			f.alarms = append(f.alarms, a)
		}
	})
}

// Compacted is the revision of the last Compact, 0 if none.
func (f *Fake) Compacted() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.compacted
}

func (c *fakeClient) MoveLeader(_ context.Context, transferee uint64) error {
	return c.call("MoveLeader", FormatID(transferee), func() error {
		var leader *fakeMember
		for _, m := range c.f.members {
			if m.ID == c.f.leader {
				leader = m
			}
		}
		if leader == nil || len(c.endpoints) != 1 || c.endpoints[0] != leader.clientURL {
			return fmt.Errorf("moving leadership: etcdserver: not leader (client endpoints %v)", c.endpoints)
		}
		for _, m := range c.f.members {
			if m.ID == transferee && m.started && m.healthy && !m.IsLearner {
				c.f.leader = transferee
				return nil
			}
		}
		return fmt.Errorf("moving leadership to %s: %w: not a started, healthy voting member", FormatID(transferee), ErrRefused)
	})
}

func (c *fakeClient) Close() error { return nil }
