package controller_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// livenessPasses bounds the passes the operator takes, with a member
// stranded, for work that does not need that member: a scheduled backup
// once due, a NOSPACE recovery.
const livenessPasses = 12

// strand makes a member's pod stay Pending from now on, as on a node gone
// for good: its pod is killed, and the kubelet starts no pod of its name
// again until the liveness check is done. The operator may replace the
// member under another name.
func (s *schedule) strand() {
	pods := s.g.names(&corev1.PodList{})
	p := pods[s.rp.IntN(len(pods))]
	s.logf("pod %s killed; no pod of its name starts again (its node is gone for good)", p)
	s.stuck = p
	s.killPod(p, true)
}

// checkLiveness runs once faults stop, with a member still stranded:
// the rest of the cluster must take a scheduled backup once due and
// recover from NOSPACE, each within livenessPasses. Then the stranded
// pod may start again.
func (s *schedule) checkLiveness() {
	s.logf("liveness, member %s stranded", s.stuck)
	for range 4 {
		s.pass()
	}
	if s.scheduled {
		before := s.g.get(s.name).Status.Backup.LastBackupID
		s.logf("an hour passes: a scheduled backup is due")
		s.g.clock.advance(time.Hour + time.Minute)
		if !s.within(func() bool { return s.g.get(s.name).Status.Backup.LastBackupID != before }) {
			s.violate("no scheduled backup within %d passes of its time while pod %s stays Pending: %+v",
				livenessPasses, s.stuck, s.g.get(s.name).Status.Conditions)
		}
	}
	s.noSpace()
	if !s.within(func() bool { return len(s.fakeAlarms()) == 0 }) {
		s.violate("NOSPACE not recovered within %d passes while pod %s stays Pending: alarms %v, %+v",
			livenessPasses, s.stuck, s.fakeAlarms(), s.g.get(s.name).Status.Conditions)
	}
	s.logf("pod %s may start again", s.stuck)
	s.stuck = ""
}

// within runs passes until done, at most livenessPasses; it reports
// whether done came true.
func (s *schedule) within(done func() bool) bool {
	for range livenessPasses {
		s.pass()
		if done() {
			return true
		}
	}
	return false
}

// fakeAlarms lists the fake etcd's alarms.
func (s *schedule) fakeAlarms() []string {
	ctx, cancel := context.WithTimeout(s.g.t.Context(), 5*time.Second)
	defer cancel()
	ec, err := s.g.fake.Factory().New(ctx, nil)
	if err != nil {
		s.g.t.Fatal(err)
	}
	defer func() { _ = ec.Close() }()
	as, err := ec.Alarms(ctx)
	if err != nil {
		s.g.t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%x %s", a.MemberID, a.Type))
	}
	return out
}
