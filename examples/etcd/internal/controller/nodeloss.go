package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// EventMemberNodeLost (Warning): a member's data claim is on a volume
// pinned to a node that was deleted, or tainted out-of-service for
// spec.recovery.nodeLossGracePeriod; the claim is deleted, and the member
// replaced.
const EventMemberNodeLost = "MemberNodeLost"

// TaintOutOfService is the taint by which a person declares a node shut
// down (Kubernetes' non-graceful node shutdown); they remove it once the
// node is back.
const TaintOutOfService = "node.kubernetes.io/out-of-service"

// DefaultNodeLossGracePeriod is spec.recovery.nodeLossGracePeriod when
// unset.
const DefaultNodeLossGracePeriod = 10 * time.Minute

// lostNode returns the node the volume of claim is pinned to (a local
// volume), and why that node is gone, when it was deleted or has been
// tainted out-of-service for grace; "" otherwise, and for a claim not
// bound or a volume that any node may mount.
func (h *ClusterHooks) lostNode(ctx context.Context, claim *corev1.PersistentVolumeClaim, grace time.Duration) (node, why string, err error) {
	if claim.Spec.VolumeName == "" {
		return "", "", nil
	}
	var pv corev1.PersistentVolume
	if err := h.apiReader().Get(ctx, client.ObjectKey{Name: claim.Spec.VolumeName}, &pv); err != nil {
		return "", "", client.IgnoreNotFound(err)
	}
	node = pinnedNode(&pv)
	if node == "" {
		return "", "", nil
	}
	var n corev1.Node
	err = h.apiReader().Get(ctx, client.ObjectKey{Name: node}, &n)
	switch {
	case apierrors.IsNotFound(err):
		h.outOfService.forget(node)
		return node, "was deleted", nil
	case err != nil:
		return "", "", err
	}
	i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintOutOfService })
	if i < 0 {
		h.outOfService.forget(node)
		return "", "", nil
	}
	since := h.outOfService.since(node, n.Spec.Taints[i].TimeAdded, h.now())
	if h.now().Sub(since) < grace {
		return "", "", nil
	}
	return node, fmt.Sprintf("has been tainted %s since %s", TaintOutOfService, since.UTC().Format(time.RFC3339)), nil
}

// taintClock remembers, by node, when an out-of-service taint was first
// seen, for taints that carry no time. A restart forgets: the grace then
// ends later, never sooner.
type taintClock struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// since is when node's taint was added: added if set, else when it was
// first seen (now, the first time).
func (tc *taintClock) since(node string, added *metav1.Time, now time.Time) time.Time {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.seen == nil {
		tc.seen = map[string]time.Time{}
	}
	first, ok := tc.seen[node]
	if !ok {
		first = now
		tc.seen[node] = now
	}
	if added != nil {
		return added.Time
	}
	return first
}

// forget ends node's record: its next taint starts a new grace.
func (tc *taintClock) forget(node string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.seen, node)
}

// pinnedNode is the one node pv's node affinity allows, "" when it
// allows any other.
func pinnedNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	node := ""
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		pinned := false
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				if node != "" && node != e.Values[0] {
					return ""
				}
				node, pinned = e.Values[0], true
			}
		}
		if !pinned {
			return ""
		}
	}
	return node
}

// releaseLostClaims deletes, with its pod, the data claim of one member
// whose pod does not run and whose volume is on a node declared gone
// (deleted, or tainted out-of-service for the grace), so that it is replaced
// like one that lost its data. Only while a quorum is healthy: without
// one, a rebuild's rules decide. It reports whether it deleted one.
func (h *ClusterHooks) releaseLostClaims(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) (bool, error) {
	if !persistent(c) || !hasQuorum(c, obs) {
		return false, nil
	}
	grace := DefaultNodeLossGracePeriod
	if r := c.Spec.Recovery; r != nil && r.NodeLossGracePeriod != nil {
		grace = r.NodeLossGracePeriod.Duration
	}
	for _, name := range slices.Sorted(maps.Keys(obs.claimObjects)) {
		if pod, ok := obs.pods[name]; ok && pod.Status.Phase == corev1.PodRunning {
			continue
		}
		node, why, err := h.lostNode(ctx, obs.claimObjects[name], grace)
		if err != nil {
			return false, fmt.Errorf("reading where the data of %s is: %w", name, err)
		}
		if node == "" {
			continue
		}
		if err := h.deleteMember(ctx, c, obs, name, true); err != nil {
			return false, err
		}
		msg := fmt.Sprintf("member %s's data (claim %s) is on node %s, which %s: the claim is deleted and the member replaced",
			name, dataClaimName(name), node, why)
		ctrl.LoggerFrom(ctx).Info("member's node lost", "etcdcluster", klog.KObj(c), "member", name, "node", node)
		emit(h.Recorder, c, warning, EventMemberNodeLost, "DeleteClaim", msg)
		return true, nil
	}
	return false, nil
}
