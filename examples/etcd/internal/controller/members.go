package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/ownership"
)

// labelServing gives every member pod of a serving cluster LabelServing
// (a metadata patch: no restart): the seed of a restored cluster once the
// restore is recorded, and pods made by an operator before the label.
func (h *ClusterHooks) labelServing(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) error {
	if !serving(c) {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		changed, err := h.setPodLabel(ctx, obs.pods[name], LabelServing, "true")
		if err != nil {
			return fmt.Errorf("letting clients reach member %s: %w", name, err)
		}
		if changed {
			ctrl.LoggerFrom(ctx).Info("member serves clients", "etcdcluster", klog.KObj(c), "pod", name)
		}
	}
	return nil
}

// labelVoters gives the pods of voting members LabelVoter and takes it
// from every other pod, once etcd's member list was read: the disruption
// budget selects by it.
func (h *ClusterHooks) labelVoters(ctx context.Context, obs *observation) error {
	if !obs.planned.Reached {
		return nil
	}
	voting := map[string]bool{}
	for _, m := range obs.planned.Members {
		voting[m.Name] = !m.Learner
	}
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		value := ""
		if voting[name] {
			value = "true"
		}
		if _, err := h.setPodLabel(ctx, obs.pods[name], LabelVoter, value); err != nil {
			return fmt.Errorf("labelling member %s for the disruption budget: %w", name, err)
		}
	}
	return nil
}

// isVoter reports whether member id votes: in etcd's member list when it
// was read, else as last recorded.
func isVoter(obs *observation, id uint64) bool {
	if obs.planned.Reached {
		return slices.ContainsFunc(obs.planned.Members, func(m membership.Member) bool { return m.ID == id && !m.Learner })
	}
	return slices.ContainsFunc(obs.planned.Recorded, func(m membership.Member) bool { return m.ID == id && !m.Learner })
}

// setPodLabel sets label key of pod to value, or removes it for "", with
// a metadata patch (no restart) when it differs, and reports whether it
// did.
func (h *ClusterHooks) setPodLabel(ctx context.Context, pod *corev1.Pod, key, value string) (bool, error) {
	if pod.Labels[key] == value {
		return false, nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	if value == "" {
		delete(pod.Labels, key)
	} else {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[key] = value
	}
	if err := h.Client.Patch(ctx, pod, patch); err != nil {
		return false, err
	}
	return true, nil
}

// execute carries out one planned step: the etcd call first, then the
// Kubernetes write. A failure between the two is finished by the planner on
// the next pass.
// A seed pod, or the pod of a member a rebuild restarts, is created with
// seed's init containers when seed is not nil.
func (h *ClusterHooks) execute(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, step membership.Step, seed *seedRestore) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch step.Action {
	case membership.ActionBootstrap:
		return h.createMember(ctx, c, obs, step, step.Name+"="+PeerURL(c, step.Name), "new", seed)
	case membership.ActionAddLearner:
		ec, err := h.clientOn(ctx, obs, "")
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		_, list, err := ec.MemberAddAsLearner(ctx, PeerURL(c, step.Name))
		if err != nil {
			return err
		}
		return h.createMember(ctx, c, obs, step, initialCluster(list), "existing", nil)
	case membership.ActionCreatePod:
		if len(obs.healthy) == 0 {
			// No member answers: the member is recreated on its claim
			// (membership.Plan does so only with persistent storage),
			// where its data directory makes etcd ignore the initial
			// cluster; it is built from the members last recorded.
			return h.createMember(ctx, c, obs, step, recordedCluster(c), "existing", seed)
		}
		ec, err := h.clientOn(ctx, obs, "")
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		list, err := ec.MemberList(ctx)
		if err != nil {
			return err
		}
		return h.createMember(ctx, c, obs, step, initialCluster(list), "existing", seed)
	case membership.ActionPromote:
		ec, err := h.clientOn(ctx, obs, "")
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		if err := ec.MemberPromote(ctx, step.ID); err != nil {
			return err
		}
		recordStep(c, step)
		// Into the disruption budget at once, not on the next pass.
		if pod, ok := obs.pods[step.Name]; ok {
			_, err := h.setPodLabel(ctx, pod, LabelVoter, "true")
			return err
		}
		return nil
	case membership.ActionRemove:
		// Its pod stays in the disruption budget, sized for the removal
		// (podDisruptionBudget): unselected, a refused removal would
		// leave a voter any drain may evict.
		ec, err := h.clientOn(ctx, obs, step.Name)
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		if err := ec.MemberRemove(ctx, step.ID); err != nil {
			return err
		}
		recordStep(c, step)
		return h.deleteMember(ctx, c, obs, step.Name, true)
	case membership.ActionDeletePod:
		// A failed pod of a known member keeps its data; a pod etcd no
		// longer knows loses it.
		return h.deleteMember(ctx, c, obs, step.Name, step.ID == 0)
	case membership.ActionUpgrade:
		return h.restartMember(ctx, c, obs, step.Name)
	case membership.ActionForceNewCluster:
		if r := c.Status.Recovery; r == nil || r.Member != step.Name || r.RevisionBump != 0 {
			// A new rebuild: a record of another, left over, goes.
			c.Status.Recovery = &v1alpha1.RecoveryStatus{Member: step.Name, RaftIndex: obs.planned.RaftIndexes[step.Name],
				StartTime: ptr.To(metav1.NewTime(h.now()))}
		}
		if _, ok := obs.pods[step.Name]; ok {
			// Its pod runs without the flag: deleted first, its data kept.
			return h.deleteMember(ctx, c, obs, step.Name, false)
		}
		return h.createMember(ctx, c, obs, step, recordedCluster(c), "existing", nil, forceNewCluster)
	}
	return nil
}

// clientOn returns a client on the healthy members other than except.
func (h *ClusterHooks) clientOn(ctx context.Context, obs *observation, except string) (etcdclient.Client, error) {
	var eps []string
	for name, ep := range obs.healthy {
		if name != except {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("no healthy member to talk to")
	}
	slices.Sort(eps)
	return h.dial(ctx, obs, eps)
}

// dial returns a client on eps, over TLS for a TLS cluster.
func (h *ClusterHooks) dial(ctx context.Context, obs *observation, eps []string) (etcdclient.Client, error) {
	return h.Etcd.New(ctx, eps, etcdclient.WithTLS(obs.tls))
}

func initialCluster(list []etcdclient.Member) string {
	parts := make([]string, 0, len(list))
	for _, m := range list {
		parts = append(parts, MemberName(m.PeerURLs[0])+"="+m.PeerURLs[0])
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// recordedCluster is --initial-cluster built from status.members.
func recordedCluster(c *v1alpha1.EtcdCluster) string {
	parts := make([]string, 0, len(c.Status.Members))
	for _, ms := range c.Status.Members {
		url := ms.PeerURL
		if url == "" {
			url = PeerURL(c, ms.Name)
		}
		parts = append(parts, ms.Name+"="+url)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// forceNewCluster makes createMember start the member with
// --force-new-cluster (AnnotationForceNewCluster).
const forceNewCluster = true

// createMember creates the claim (persistent storage) and pod of
// step's member, with seed's init containers when seed is not nil, and
// with --force-new-cluster when force is given as true. A member
// recreated on its data (step.OnData) gets no claim: its existing one,
// read from the API server, must be there. The pod of a voting member is
// in the disruption budget from its creation.
func (h *ClusterHooks) createMember(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, step membership.Step, initial, state string, seed *seedRestore, force ...bool) error {
	guard := obs.guard
	name := step.Name
	if persistent(c) {
		var old corev1.PersistentVolumeClaim
		err := h.apiReader().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: dataClaimName(name)}, &old)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("reading claim of %s: %w", name, err)
		case err == nil && old.DeletionTimestamp != nil:
			// Applying to a claim being deleted would "succeed" and
			// leave the pod waiting for a claim that is gone.
			return fmt.Errorf("claim %s of member %s is being deleted; the member's pod waits for it to go", old.Name, name)
		case step.OnData && err != nil:
			return fmt.Errorf("claim %s of member %s is gone, so the member cannot be recreated under its ID; it is removed and replaced once the operator's cache sees the claim gone",
				dataClaimName(name), name)
		case step.OnData:
			// Recreated on this claim, not applied to it: it must be c's.
			// Foreground and orphan deletions take c's reference off
			// while c's guard still holds the claim for the final backup.
			if ref := metav1.GetControllerOf(&old); ref == nil && c.DeletionTimestamp != nil && guard != nil && isHeldBy(&old, guard) {
				break
			} else if ref == nil {
				return &ownership.NotControlledError{Object: &old}
			} else if ref.UID != c.UID {
				return &ownership.AlreadyControlledError{Object: &old, Owner: *ref}
			}
		default:
			if _, err := h.Children.EnsureChild(ctx, c, heldBy(dataClaim(c, name), guard)); err != nil {
				return fmt.Errorf("creating claim of %s: %w", name, err)
			}
		}
	}
	pod := memberPod(c, name, step.Version, initial, state, seed)
	if step.ID != 0 && isVoter(obs, step.ID) {
		pod.Labels[LabelVoter] = "true"
	}
	if len(force) > 0 && force[0] {
		pod.Annotations[AnnotationForceNewCluster] = "true"
		pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--force-new-cluster")
	}
	if _, err := h.Children.EnsureChild(ctx, c, heldBy(pod, guard)); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	return nil
}

// restartMember restarts member name on its data. With three voters or
// more it evicts the pod, so that the disruption budget, which a node
// drain shares, decides: a member that a drain takes down meanwhile is not
// joined by a second. With fewer, the budget never allows one, and a
// restart loses the quorum anyway: the pod is deleted. So is the pod of
// a member that neither answers nor is Ready, which the rollout repairs:
// it holds up no quorum, and the budget, which counts only Ready pods
// (a voter whose probe timed out under load is one), may have no room.
func (h *ClusterHooks) restartMember(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, name string) error {
	seen, ok := obs.pods[name]
	unwell := ok && obs.healthy[name] == "" && !podReady(seen)
	if n := voters(obs); !ok || unwell || membership.Quorum(n) >= n {
		return h.deleteMember(ctx, c, obs, name, false)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, UID: seen.UID}}
	if _, err := h.Children.EvictChild(ctx, c, pod); err != nil {
		return fmt.Errorf("evicting pod %s: %w", name, err)
	}
	return nil
}

// deleteMember deletes member name's pod, and its data claim if withData,
// as obs saw them.
func (h *ClusterHooks) deleteMember(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, name string, withData bool) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	if seen, ok := obs.pods[name]; ok {
		// The pod the step was planned on, not one that replaced it since.
		pod.UID = seen.UID
	}
	if _, err := h.Children.DeleteChild(ctx, c, pod); err != nil {
		// Replaced since: its claim is the replacement's now.
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	if withData && persistent(c) {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: dataClaimName(name), Namespace: c.Namespace}}
		if seen, ok := obs.claimObjects[name]; ok {
			claim.UID = seen.UID
		}
		if _, err := h.Children.DeleteChild(ctx, c, claim); err != nil {
			return fmt.Errorf("deleting claim of %s: %w", name, err)
		}
	}
	return nil
}

// deleteOrphanClaims deletes the data claims of members that are neither
// pods nor etcd members any more: a removal interrupted after the pod was
// deleted. It does nothing unless etcd's member list was read.
func (h *ClusterHooks) deleteOrphanClaims(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) error {
	if !obs.planned.Reached {
		return nil
	}
	for name := range obs.claims {
		if _, ok := obs.pods[name]; ok {
			continue
		}
		if slices.ContainsFunc(obs.planned.Members, func(m membership.Member) bool { return m.Name == name }) {
			continue
		}
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: dataClaimName(name), Namespace: c.Namespace}}
		if seen, ok := obs.claimObjects[name]; ok {
			claim.UID = seen.UID
		}
		if _, err := h.Children.DeleteChild(ctx, c, claim); err != nil {
			return fmt.Errorf("deleting orphaned claim of %s: %w", name, err)
		}
	}
	return nil
}
