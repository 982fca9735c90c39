package controller

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
)

// observation is what a pass saw.
type observation struct {
	// guard is the cluster's guard; nil in a deletion of a cluster made
	// before guards.
	guard *corev1.ConfigMap
	pods  map[string]*corev1.Pod
	// claims are the members with a data claim not being deleted, and
	// claimObjects those claims.
	claims       map[string]bool
	claimObjects map[string]*corev1.PersistentVolumeClaim
	planned      membership.Observed
	// endpoints of the members that answered, by member name.
	healthy map[string]string
	// statuses are the Status replies of the healthy members, by name.
	statuses map[string]etcdclient.Status
	// dialed are the endpoints of the running member pods, sorted.
	dialed []string
	// unreachable is why no running member answered, nil when one did or
	// none runs.
	unreachable error
	// tls is the operator's TLS configuration for the members of a TLS
	// cluster, nil otherwise.
	tls *tls.Config
}

// observe reads c's member pods and claims and asks etcd about its
// members. A pod counts when c controls it, or when guard is one of its
// owners: a deletion in the foreground or orphaning removes c from the
// owners of its children, which the guard keeps for the final backup.
func (h *ClusterHooks) observe(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, tlsConfig *tls.Config) (*observation, error) {
	obs := &observation{guard: guard, tls: tlsConfig, pods: map[string]*corev1.Pod{}, claims: map[string]bool{},
		claimObjects: map[string]*corev1.PersistentVolumeClaim{}, healthy: map[string]string{},
		statuses: map[string]etcdclient.Status{}}
	var pods corev1.PodList
	if err := h.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c))); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var claims corev1.PersistentVolumeClaimList
	if err := h.Client.List(ctx, &claims, client.InNamespace(c.Namespace), client.MatchingLabels(selectorLabels(c))); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	deleting := map[string]bool{}
	for i := range claims.Items {
		if member := claims.Items[i].Labels[LabelMember]; claims.Items[i].DeletionTimestamp == nil {
			obs.claims[member] = true
			obs.claimObjects[member] = &claims.Items[i]
		} else {
			deleting[member] = true
		}
	}
	p := &obs.planned
	// A cluster is bootstrapped once it has answered: its members are in
	// the status, or its member list is read below. A seed pod alone is
	// not enough; its member may still be starting.
	*p = membership.Observed{Cluster: c.Name, Size: plannedSize(c), Version: targetVersion(c), Revision: PodRevision(c), Persistent: persistent(c),
		Bootstrapped: len(c.Status.Members) > 0, Timeouts: h.timeouts(), Claims: obs.claims, ClaimsDeleting: deleting,
		Rebuild:     c.Spec.Recovery != nil && c.Spec.Recovery.QuorumLoss == v1alpha1.QuorumLossRebuild,
		BackupStore: c.Spec.Backup != nil}
	if r := c.Status.Recovery; r != nil && r.RevisionBump == 0 {
		// Once set, the member answered with --force-new-cluster.
		p.RebuildingFrom = r.Member
	}
	for _, ms := range c.Status.Members {
		id, _ := strconv.ParseUint(ms.ID, 16, 64) // 0 if unreadable: a failed pod is then not deleted
		p.Recorded = append(p.Recorded, membership.Member{ID: id, Name: ms.Name, Learner: ms.Learner})
	}
	now := h.now()
	var endpoints []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !metav1.IsControlledBy(pod, c) && !isHeldBy(pod, guard) {
			continue
		}
		if pod.DeletionTimestamp != nil {
			if p.Terminating == nil {
				p.Terminating = map[string]bool{}
			}
			p.Terminating[pod.Name] = true
			continue
		}
		obs.pods[pod.Name] = pod
		phase := membership.PodPending
		switch pod.Status.Phase {
		case corev1.PodRunning:
			phase = membership.PodRunning
			endpoints = append(endpoints, h.Endpoints.clientURL(c, pod.Name))
		case corev1.PodFailed, corev1.PodSucceeded:
			phase = membership.PodFailed
		}
		p.Pods = append(p.Pods, membership.Pod{Name: pod.Name, Phase: phase, Ready: podReady(pod), Version: pod.Labels[LabelVersion],
			Revision: pod.Annotations[AnnotationPodRevision], Age: max(now.Sub(pod.CreationTimestamp.Time), 0),
			ForceNewCluster: pod.Annotations[AnnotationForceNewCluster] == "true"})
	}
	if len(endpoints) == 0 {
		return obs, nil
	}
	slices.Sort(endpoints)
	obs.dialed = endpoints
	ec, err := h.dial(ctx, obs, endpoints)
	if err != nil {
		obs.unreachable = err
		return obs, nil //nolint:nilerr // unreachable members are an observation, not an error
	}
	defer func() { _ = ec.Close() }()
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	list, err := ec.MemberList(lctx)
	cancel()
	if err != nil {
		obs.unreachable = err
		if p.Rebuild {
			// Without a quorum there is no member list, but each member
			// still reports its own raft index: what a rebuild chooses by.
			p.RaftIndexes = h.raftIndexes(ctx, ec, c, obs)
		}
		return obs, nil //nolint:nilerr // as above
	}
	p.Reached = true
	p.Bootstrapped = true
	eps := map[string]string{}
	for _, em := range list {
		m := membership.Member{ID: em.ID, Name: MemberName(em.PeerURLs[0]), Started: em.Started(), Learner: em.IsLearner}
		if m.Name == "" {
			m.Name = "unknown-" + em.IDString()
		}
		if pod, ok := obs.pods[m.Name]; ok && pod.Status.Phase == corev1.PodRunning && m.Started {
			eps[m.Name] = h.Endpoints.clientURL(c, m.Name)
		}
		p.Members = append(p.Members, m)
	}
	statuses := statusOf(ctx, ec, eps)
	for i, m := range p.Members {
		if st, ok := statuses[m.Name]; ok && st.Healthy() {
			p.Members[i].Healthy = true
			p.Members[i].Leader = st.Leader == m.ID
			obs.healthy[m.Name] = eps[m.Name]
			obs.statuses[m.Name] = st
		}
	}
	return obs, nil
}

// statusOf asks each endpoint (by member name) for its member's status,
// all at once: a frozen member holds its call until statusTimeout, and
// one after the other each would. Members that do not answer are left
// out.
func statusOf(ctx context.Context, ec etcdclient.Client, eps map[string]string) map[string]etcdclient.Status {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]etcdclient.Status{}
	for name, ep := range eps {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			if st, err := ec.Status(sctx, ep); err == nil {
				mu.Lock()
				out[name] = st
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// raftIndexes asks every running member pod for its raft index, by name;
// members that do not answer are left out.
func (h *ClusterHooks) raftIndexes(ctx context.Context, ec etcdclient.Client, c *v1alpha1.EtcdCluster, obs *observation) map[string]uint64 {
	eps := map[string]string{}
	for name, pod := range obs.pods {
		if pod.Status.Phase == corev1.PodRunning {
			eps[name] = h.Endpoints.clientURL(c, name)
		}
	}
	out := map[string]uint64{}
	for name, st := range statusOf(ctx, ec, eps) {
		out[name] = st.RaftIndex
	}
	return out
}
