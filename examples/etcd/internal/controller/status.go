package controller

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/statusutil"
)

func (h *ClusterHooks) recordStatus(c *v1alpha1.EtcdCluster, obs *observation) {
	if !obs.planned.Reached {
		// Keep the last known members, marked unhealthy.
		for i := range c.Status.Members {
			c.Status.Members[i].Healthy = false
			c.Status.Members[i].Leader = false
		}
		c.Status.ReadyMembers = 0
		return
	}
	// A member without a labelled pod (deleted, evicted, being
	// recreated) holds data of the version it last ran.
	recorded := map[string]string{}
	for _, m := range c.Status.Members {
		recorded[m.ID] = m.Version
	}
	members := make([]v1alpha1.MemberStatus, 0, len(obs.planned.Members))
	var ready int32
	version := ""
	for _, m := range obs.planned.Members {
		ms := v1alpha1.MemberStatus{Name: m.Name, ID: etcdclient.FormatID(m.ID), PeerURL: PeerURL(c, m.Name),
			Healthy: m.Healthy, Learner: m.Learner, Leader: m.Leader}
		if pod, ok := obs.pods[m.Name]; ok {
			ms.Version = pod.Labels[LabelVersion]
		}
		if ms.Version == "" {
			ms.Version = recorded[ms.ID]
		}
		// Every member counts, healthy or not, with a pod or not:
		// status.version is what the next spec.version is checked
		// against.
		if ms.Version != "" && (version == "" || lessVersion(ms.Version, version)) {
			version = ms.Version
		}
		if m.Healthy && !m.Learner {
			ready++
		}
		members = append(members, ms)
	}
	slices.SortFunc(members, func(a, b v1alpha1.MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	c.Status.Members = members
	c.Status.ReadyMembers = ready
	c.Status.Alarms = alarmsOf(obs)
	if version != "" {
		c.Status.Version = version
	}
}

// recordStep makes status.members, recorded from the pass's observation,
// say what etcd has after step: a quorum-loss rebuild reads it when no
// member answers.
func recordStep(c *v1alpha1.EtcdCluster, step membership.Step) {
	id := etcdclient.FormatID(step.ID)
	i := slices.IndexFunc(c.Status.Members, func(m v1alpha1.MemberStatus) bool { return m.ID == id })
	if i < 0 {
		return
	}
	m := &c.Status.Members[i]
	switch step.Action {
	case membership.ActionPromote:
		if m.Learner && m.Healthy {
			c.Status.ReadyMembers++
		}
		m.Learner = false
	case membership.ActionRemove:
		if !m.Learner && m.Healthy {
			c.Status.ReadyMembers--
		}
		c.Status.Members = slices.Delete(c.Status.Members, i, i+1)
	}
}

// lessVersion reports a < b for MAJOR.MINOR.PATCH strings.
func lessVersion(a, b string) bool {
	var x, y [3]int
	_, _ = fmt.Sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2])
	_, _ = fmt.Sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2])
	return slices.Compare(x[:], y[:]) < 0
}

// voters returns the number of voting members etcd reported.
func voters(obs *observation) int {
	n := 0
	for _, m := range obs.planned.Members {
		if !m.Learner {
			n++
		}
	}
	return n
}

// hasQuorum reports whether etcd answered and a quorum of its voting members
// is healthy; recordStatus must have run.
func hasQuorum(c *v1alpha1.EtcdCluster, obs *observation) bool {
	v := voters(obs)
	return obs.planned.Reached && v > 0 && int(c.Status.ReadyMembers) >= membership.Quorum(v)
}

func setConditions(c *v1alpha1.EtcdCluster, obs *observation, step membership.Step) {
	if hasQuorum(c, obs) {
		statusutil.MarkTrue(c, v1alpha1.ConditionAvailable, "QuorumHealthy",
			fmt.Sprintf("%d of %d voting members healthy", c.Status.ReadyMembers, voters(obs)))
	} else {
		statusutil.MarkFalse(c, v1alpha1.ConditionAvailable, "NoQuorum", step.Message)
	}
	if step.Action == membership.ActionNone {
		statusutil.MarkFalse(c, v1alpha1.ConditionProgressing, "Converged", step.Message)
	} else {
		statusutil.MarkTrue(c, v1alpha1.ConditionProgressing, step.Reason, step.Message)
	}
	// A learner is starting by definition: it degrades nothing until it
	// is stuck (below).
	var unhealthy []string
	for _, m := range obs.planned.Members {
		if !m.Healthy && !m.Learner {
			unhealthy = append(unhealthy, m.Name)
		}
	}
	switch {
	case step.Stuck:
		msg := step.Message
		if obs.unreachable != nil {
			msg += fmt.Sprintf("; dialed %s: %v", strings.Join(obs.dialed, ", "), obs.unreachable)
		}
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, step.Reason, msg)
	case step.Reason == membership.ReasonQuorumLost || step.Reason == membership.ReasonRebuilding || step.Reason == membership.ReasonRebuildingFromBackup,
		// Members gone with their data: no member to be unhealthy, and
		// the cluster is lost.
		step.Reason == membership.ReasonMemberDataLost || step.Reason == membership.ReasonClusterLost:
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, step.Reason, step.Message)
	case rebuildingFromBackup(c):
		// Not a new cluster starting: a lost one coming back from a backup.
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, membership.ReasonRebuildingFromBackup,
			fmt.Sprintf("rebuilding from backup %s (revision %d): %s", c.Status.Recovery.Backup, c.Status.Recovery.Revision, step.Message))
	case !obs.planned.Bootstrapped:
		// A new cluster whose seed is starting is not degraded, whether
		// or not its pod runs yet.
		statusutil.MarkFalse(c, v1alpha1.ConditionDegraded, ReasonBootstrapping, step.Message)
	case obs.unreachable != nil:
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, ReasonUnreachable,
			fmt.Sprintf("member pods run but no member answers at %s: %v", strings.Join(obs.dialed, ", "), obs.unreachable))
	case len(unhealthy) > 0:
		statusutil.MarkTrue(c, v1alpha1.ConditionDegraded, "MembersUnhealthy", "unhealthy members: "+strings.Join(unhealthy, ", "))
	default:
		statusutil.MarkFalse(c, v1alpha1.ConditionDegraded, "MembersHealthy", "")
	}
}
