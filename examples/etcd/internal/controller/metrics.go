package controller

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// Metrics of the operator, registered on controller-runtime's registry (the
// manager's metrics endpoint). Every series carries the labels namespace
// and name of its EtcdCluster; a cluster's series are deleted when its
// finalizer has run.
const (
	// MetricMembers is the number of members in etcd's member list,
	// learners included; the last known number while etcd is unreachable.
	MetricMembers = "opkit_etcd_cluster_members"
	// MetricHealthyMembers is the number of members that answered a status
	// call in the last pass.
	MetricHealthyMembers = "opkit_etcd_cluster_healthy_members"
	// MetricHasQuorum is 1 while a quorum of the voting members is healthy.
	MetricHasQuorum = "opkit_etcd_cluster_has_quorum"
	// MetricLeaderChanges counts changes of the leader this process saw
	// between passes. Changes between two passes are seen as at most one.
	MetricLeaderChanges = "opkit_etcd_cluster_leader_changes_total"
	// MetricBackups counts backup attempts, with the labels trigger
	// (on-demand, scheduled, final) and result (success, failure).
	MetricBackups = "opkit_etcd_backups_total"
	// MetricDBSize is the size of each healthy member's database file in
	// bytes (label member), as of the last pass.
	MetricDBSize = "opkit_etcd_member_db_size_bytes"
	// MetricDBSizeInUse is the part of it that holds data; the rest is
	// what a defragmentation returns to the file system.
	MetricDBSizeInUse = "opkit_etcd_member_db_size_in_use_bytes"
	// MetricLastDefragmentation is when each member was last
	// defragmented by this process (Unix seconds).
	MetricLastDefragmentation = "opkit_etcd_member_last_defragmentation_timestamp_seconds"
	// MetricDefragmentations counts defragmentations by result (success,
	// failure).
	MetricDefragmentations = "opkit_etcd_defragmentations_total"
)

// Values of the trigger and result labels of MetricBackups.
const (
	TriggerOnDemand = "on-demand"
	TriggerSchedule = "scheduled"
	TriggerFinal    = "final"
	ResultSuccess   = "success"
	ResultFailure   = "failure"
)

var (
	clusterLabels = []string{"namespace", "name"}

	membersGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricMembers,
		Help: "Members in etcd's member list, learners included.",
	}, clusterLabels)
	healthyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricHealthyMembers,
		Help: "Members that answered a status call in the last pass.",
	}, clusterLabels)
	quorumGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricHasQuorum,
		Help: "1 while a quorum of the voting members is healthy, else 0.",
	}, clusterLabels)
	leaderChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricLeaderChanges,
		Help: "Leader changes seen by this process between passes.",
	}, clusterLabels)
	backups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricBackups,
		Help: "Backup attempts by trigger (on-demand, scheduled, final) and result (success, failure).",
	}, []string{"namespace", "name", "trigger", "result"})

	memberLabels = []string{"namespace", "name", "member"}

	dbSizeGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricDBSize,
		Help: "Size of the member's database file in bytes, as of the last pass.",
	}, memberLabels)
	dbInUseGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricDBSizeInUse,
		Help: "Bytes of the member's database file that hold data; the rest is free pages a defragmentation returns.",
	}, memberLabels)
	lastDefragGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricLastDefragmentation,
		Help: "When the member was last defragmented by this process, in Unix seconds.",
	}, memberLabels)
	defrags = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricDefragmentations,
		Help: "Defragmentations by result (success, failure).",
	}, []string{"namespace", "name", "result"})

	registerOnce sync.Once
	registerErr  error
)

// RegisterMetrics registers the operator's metrics on controller-runtime's
// registry. It is idempotent and safe to call concurrently; the hooks call
// it on their first pass, and main calls it to fail early. A collector of
// the same name and shape registered by someone else is adopted.
func RegisterMetrics() error {
	registerOnce.Do(func() {
		for _, g := range []**prometheus.GaugeVec{&membersGauge, &healthyGauge, &quorumGauge, &dbSizeGauge, &dbInUseGauge, &lastDefragGauge} {
			if registerErr == nil {
				*g, registerErr = register(*g)
			}
		}
		for _, c := range []**prometheus.CounterVec{&leaderChanges, &backups, &defrags} {
			if registerErr == nil {
				*c, registerErr = register(*c)
			}
		}
	})
	return registerErr
}

// register registers c, or returns the equal collector already registered.
func register[C prometheus.Collector](c C) (C, error) {
	err := crmetrics.Registry.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("registering etcd operator metrics: %w", err)
}

// leaders remembers the last leader seen per cluster, to count changes.
type leaders struct {
	mu   sync.Mutex
	last map[string]string
}

// observe records leader (a member ID, "" when none was seen) for key and
// reports whether it differs from the last leader seen. previous seeds the
// memory after a restart of the operator (the leader in the status).
func (l *leaders) observe(key, previous, leader string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]string{}
	}
	last, ok := l.last[key]
	if !ok {
		last = previous
	}
	if leader == "" {
		if !ok && previous != "" {
			l.last[key] = previous
		}
		return false
	}
	l.last[key] = leader
	return last != "" && last != leader
}

func (l *leaders) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, key)
}

func leaderID(members []v1alpha1.MemberStatus) string {
	for _, m := range members {
		if m.Leader {
			return m.ID
		}
	}
	return ""
}

// recordMetrics sets the gauges of c from the status of this pass and
// counts a leader change; previousLeader is the leader in the status read
// at the start of the pass.
func (h *ClusterHooks) recordMetrics(c *v1alpha1.EtcdCluster, obs *observation, previousLeader string) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	membersGauge.With(l).Set(float64(len(c.Status.Members)))
	healthyGauge.With(l).Set(float64(len(obs.healthy)))
	q := 0.0
	if hasQuorum(c, obs) {
		q = 1
	}
	quorumGauge.With(l).Set(q)
	changes := leaderChanges.With(l)
	if h.leaders.observe(c.Namespace+"/"+c.Name, previousLeader, leaderID(c.Status.Members)) {
		changes.Inc()
	}
	// A member's sizes are current or absent: members that left or did
	// not answer this pass have no series.
	dbSizeGauge.DeletePartialMatch(l)
	dbInUseGauge.DeletePartialMatch(l)
	for name, st := range obs.statuses {
		ml := prometheus.Labels{"namespace": c.Namespace, "name": c.Name, "member": name}
		dbSizeGauge.With(ml).Set(float64(st.DBSize))
		dbInUseGauge.With(ml).Set(float64(st.DBSizeInUse))
	}
}

// forgetMetrics deletes the series of a deleted cluster.
func (h *ClusterHooks) forgetMetrics(c *v1alpha1.EtcdCluster) {
	l := prometheus.Labels{"namespace": c.Namespace, "name": c.Name}
	membersGauge.Delete(l)
	healthyGauge.Delete(l)
	quorumGauge.Delete(l)
	leaderChanges.Delete(l)
	backups.DeletePartialMatch(l)
	dbSizeGauge.DeletePartialMatch(l)
	dbInUseGauge.DeletePartialMatch(l)
	lastDefragGauge.DeletePartialMatch(l)
	defrags.DeletePartialMatch(l)
	h.leaders.forget(c.Namespace + "/" + c.Name)
}

// countDefragmentation counts one defragmentation of member of cluster
// namespace/name, and records its time when it succeeded.
func countDefragmentation(namespace, name, member string, at time.Time, err error) {
	result := ResultSuccess
	if err != nil {
		result = ResultFailure
	} else {
		lastDefragGauge.WithLabelValues(namespace, name, member).Set(float64(at.Unix()))
	}
	defrags.WithLabelValues(namespace, name, result).Inc()
}

// countBackup counts one backup attempt of cluster namespace/name.
func countBackup(namespace, name, trigger string, err error) {
	result := ResultSuccess
	if err != nil {
		result = ResultFailure
	}
	backups.WithLabelValues(namespace, name, trigger, result).Inc()
}
