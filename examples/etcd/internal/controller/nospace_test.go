package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
)

// campaignQuota is the campaign clusters' spec.quotaBackendBytes: small,
// so that a NOSPACE fault fills it in a few writes.
const campaignQuota = "8Mi"

// fill rewrites one key with 1 MiB values until etcd refuses with
// NOSPACE: history that nobody compacts fills the quota. It reports
// whether etcd did.
func (s *schedule) fill() (bool, error) {
	value := strings.Repeat("x", 1<<20)
	for i := range 1000 {
		ctx, cancel := context.WithTimeout(s.g.t.Context(), 5*time.Second)
		_, err := s.cli.Put(ctx, "/fill", value)
		timedOut := ctx.Err() != nil && s.g.t.Context().Err() == nil
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) {
			s.logf("NOSPACE after %d MiB", i)
			return true, nil
		}
		// A loaded machine can take longer over a 1 MiB put to three
		// members: filling only needs more history, so write again.
		if err != nil && !timedOut {
			return false, err
		}
	}
	return false, errors.New("1000 MiB written and no NOSPACE: is the quota set?")
}

// noSpace fills the quota on processes; on the fake it raises NOSPACE on
// the leader, as etcd would.
func (s *schedule) noSpace() {
	s.logf("history fills the quota: NOSPACE")
	if s.proc == nil {
		lead := s.etcd.leader()
		for _, m := range s.etcd.members() {
			if m.ID == lead {
				s.g.fake.RaiseAlarm(m.PeerURLs[0], etcdclient.AlarmNoSpace)
			}
		}
		return
	}
	if ok, err := s.fill(); !ok {
		s.logf("  no NOSPACE: %v", err)
	}
}

// alarmList is what etcd lists of its alarms.
func (s *schedule) alarmList() []*etcdserverpb.AlarmMember {
	s.g.t.Helper()
	ctx, cancel := context.WithTimeout(s.g.t.Context(), 5*time.Second)
	defer cancel()
	resp, err := s.cli.AlarmList(ctx)
	if err != nil {
		s.g.t.Fatal(err)
	}
	return resp.Alarms
}

// alarms are the alarms etcd reports, with the members that raised them.
func (s *schedule) alarms() []string {
	s.g.t.Helper()
	var out []string
	for _, a := range s.alarmList() {
		out = append(out, fmt.Sprintf("%x %s", a.MemberID, a.Alarm))
	}
	return out
}

// settle runs passes until one emits no event: the operator, which
// requeues after each step, has nothing left to do.
func (s *schedule) settle() {
	s.g.t.Helper()
	for range 10 {
		n := len(s.log)
		s.pass()
		if len(s.log) == n {
			return
		}
	}
	s.violate("the operator still acts after 10 more passes")
}

// quotaSchedule is schedule index on a converged three-member cluster of
// etcd processes with the campaign's quota, at step 1.
func quotaSchedule(t *testing.T, index int) *schedule {
	t.Helper()
	s := newSchedule(t, "processes", 0, index)
	c := cluster(s.name, 3)
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse(campaignQuota))
	s.g.create(c)
	s.cluster = c
	s.calm = true
	s.converge()
	s.step = 1
	return s
}

// TestNoSpaceAlarm: history that fills a cluster's quota raises NOSPACE
// and etcd refuses writes. The operator compacts, defragments every member
// and disarms: writes go through again, none acknowledged is lost, and
// the alarm shows in the status and events meanwhile. Before, every member
// reported the alarm as an error and counted as unhealthy, so the cluster
// lost its quorum in the operator's eyes and stayed refusing writes.
func TestNoSpaceAlarm(t *testing.T) {
	t.Parallel()
	s := quotaSchedule(t, 1100)
	s.write()
	if ok, err := s.fill(); !ok {
		t.Fatal(err)
	}
	if len(s.alarms()) == 0 {
		t.Fatal("etcd refused a write with NOSPACE but lists no alarm")
	}
	s.pass()
	if got := s.g.get(s.name).Status.Alarms; len(got) != 1 || got[0] != etcdserverpb.AlarmType_NOSPACE.String() {
		t.Errorf("status.alarms = %v, want [NOSPACE]", got)
	}
	s.converge()
	if a := s.alarms(); len(a) > 0 {
		s.violate("alarms still raised: %v", a)
	}
	s.step = 2
	s.write()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, "/campaign/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if len(s.acked) != 6 {
		s.violate("%d of 6 writes acknowledged after the recovery: %v", len(s.acked), s.acked)
	}
	s.checkWrites("the cluster", s.acked, got)
	c := s.g.get(s.name)
	if len(c.Status.Alarms) > 0 || c.Status.NoSpace != nil {
		s.violate("status still reports alarms %v, recovery %+v", c.Status.Alarms, c.Status.NoSpace)
	}
	log := strings.Join(s.log, "\n")
	for _, reason := range []string{controller.EventNoSpace, controller.EventAlarmDisarmed} {
		if !strings.Contains(log, reason) {
			s.violate("no %s event", reason)
		}
	}
	if len(s.violations) > 0 {
		t.Errorf("violations:\n%s\nschedule:\n%s", strings.Join(s.violations, "\n"), log)
	}
	t.Logf("schedule:\n%s", log)
}

// TestNoSpaceDefersScaling: a scale-up asked for while a cluster recovers
// from NOSPACE waits until writes are back, and the members it adds take
// writes. Before the first, the learners joined first, and in campaign
// schedule 019 they were sent the leader's undefragmented database file,
// above the quota: NOSPACE again. Before the second, the new members
// replayed the raft log, which still holds the history that filled the
// quota, and joined with files above it: the next write raised NOSPACE.
//
// A new member may also raise NOSPACE while it replays that log (when its
// backend commits between two of the big puts; CI stop 89): etcd's own
// doing, which no member added later can prevent. A second recovery is
// allowed for that alone: every alarm after the first recovery must be
// raised by a member added after it.
func TestNoSpaceDefersScaling(t *testing.T) {
	t.Parallel()
	s := quotaSchedule(t, 1101)
	original := map[uint64]bool{}
	for _, m := range s.etcd.members() {
		original[m.ID] = true
	}
	if ok, err := s.fill(); !ok {
		t.Fatal(err)
	}
	c := s.g.get(s.name)
	c.Spec.Size = 5
	s.logf("scale to 5")
	s.update(c)
	rounds, raised := 0, false
	// Whether a new member's file reached the ceiling: under load fewer
	// puts fill the quota (the first members' files grow more), and the
	// history replayed may stay below it.
	ceiling, over := int64(8<<20)/100*90, false
	for range s.budget(60) {
		n, before := len(s.etcd.members()), s.alarmList()
		if len(before) > 0 && !raised {
			rounds++
			for _, a := range before {
				if rounds > 1 && original[a.MemberID] {
					s.violate("NOSPACE raised again by %x, a member from before the scale-up: %v", a.MemberID, before)
				}
			}
		}
		raised = len(before) > 0
		s.pass()
		for _, p := range s.proc.answering() {
			if st, err := s.proc.status(p); err == nil && !original[st.Header.MemberId] && st.DbSize >= ceiling {
				over = true
			}
		}
		if got := len(s.etcd.members()); got > n && raised {
			s.violate("member added while etcd still raises %v: %d members", before, got)
			break
		}
		if s.converged() {
			break
		}
	}
	s.converge()
	if n := s.voters(); n != 5 {
		s.violate("%d voting members, want 5", n)
	}
	if a := s.alarms(); len(a) > 0 {
		s.violate("alarms still raised: %v", a)
	}
	s.settle()
	s.step = 2
	s.write()
	if len(s.acked) != 3 {
		s.violate("%d of 3 writes acknowledged after the scale-up: %v", len(s.acked), s.acked)
	}
	if a := s.alarms(); len(a) > 0 {
		s.violate("alarms raised by writes after the scale-up: %v", a)
	}
	log := strings.Join(s.log, "\n")
	if over && rounds <= 1 && !strings.Contains(log, "(NearQuota)") {
		s.violate("a new member's file reached %d bytes, and it was neither defragmented near the quota nor in a second NOSPACE round", ceiling)
	}
	if !over {
		t.Logf("no new member's file reached %d bytes: the history replayed stayed below it", ceiling)
	}
	if n := strings.Count(log, "Warning "+controller.EventNoSpace); n != max(rounds, 1) {
		s.violate("%d NOSPACE compactions, want %d (one per round of alarms)", n, max(rounds, 1))
	}
	if len(s.violations) > 0 {
		t.Errorf("violations:\n%s\nschedule:\n%s", strings.Join(s.violations, "\n"), log)
	}
}
