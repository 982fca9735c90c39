package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/examples/etcd/internal/snapshot"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// Condition reasons set by ClusterHooks.
const (
	ReasonUnsupportedUpgrade = "UnsupportedUpgrade"
	ReasonRestoreFailed      = "RestoreFailed"
	// ReasonChildConflict (Reconciling=True): an object with the name of
	// one of the cluster's children (a claim, pod, Service or budget)
	// exists and is not the cluster's: nothing is written to it, and no
	// member is placed on a claim of unknown data. Delete or rename it.
	ReasonChildConflict = "ChildConflict"
	// ReasonRestored (Reconciling=True): the backup is in the seed; the
	// cluster grows once status.restored is recorded.
	ReasonRestored    = "Restored"
	ReasonFinalBackup = "FinalBackupFailed"
	// ReasonUnreachable (Degraded=True): member pods are running but none
	// answers the operator, for example because their URLs do not resolve
	// where the operator runs (see Endpoints).
	ReasonUnreachable = "Unreachable"
	// ReasonBootstrapping (Degraded=False, Progressing=True, Reconciling=True):
	// the cluster has never answered yet and its seed member is starting.
	ReasonBootstrapping = membership.ReasonBootstrapping
	// ReasonBootstrapTimeout (Degraded=True): the seed member has not
	// answered within ClusterHooks.BootstrapTimeout of its pod's creation.
	// The message names the endpoint dialed and the last error.
	ReasonBootstrapTimeout = membership.ReasonBootstrapTimeout
	// ReasonMemberPodPending (Degraded=True): a member's pod is still
	// Pending ClusterHooks.MemberStartTimeout after its creation.
	ReasonMemberPodPending = membership.ReasonMemberPodPending
	// ReasonLearnerNotCaughtUp (Degraded=True): a learner has not joined,
	// become healthy or been promoted ClusterHooks.MemberStartTimeout after
	// its pod's creation.
	ReasonLearnerNotCaughtUp = membership.ReasonLearnerNotCaughtUp
)

// Defaults of the timeouts of ClusterHooks.
const (
	// DefaultBootstrapTimeout is ClusterHooks.BootstrapTimeout when it is
	// zero: long enough to pull an image and start etcd on a busy node.
	DefaultBootstrapTimeout = 5 * time.Minute
	// DefaultMemberStartTimeout is ClusterHooks.MemberStartTimeout when it
	// is zero: a new member also copies the leader's data before it is
	// promoted.
	DefaultMemberStartTimeout = 10 * time.Minute
)

// Requeue intervals: membership changes are watched through pods, but etcd
// health is not a Kubernetes event, so a converged cluster is polled.
const (
	stepRequeue   = 2 * time.Second
	healthRequeue = 30 * time.Second
	callTimeout   = 10 * time.Second
)

// ClusterHooks reconciles EtcdClusters. Build it with its fields set; all
// are required except Endpoints, Now, ScratchDir and the timeouts.
type ClusterHooks struct {
	// Client reads and writes pods and claims (the manager's client).
	Client client.Client
	// Children writes services, the PDB, claims and pods.
	Children *reconcile.Children
	// Etcd builds clients on member endpoints.
	Etcd etcdclient.Factory
	// Endpoints maps members to the URLs the operator dials.
	Endpoints Endpoints
	// Stores opens backup stores.
	Stores StoreResolver
	// Now returns the time; time.Now if nil.
	Now func() time.Time
	// ScratchDir is where restores stage snapshots; os.TempDir() if empty.
	ScratchDir string
	// BootstrapTimeout is how long after its pod was created the seed
	// member of a new cluster may take to answer before the cluster is
	// reported Degraded with reason BootstrapTimeout;
	// DefaultBootstrapTimeout if zero. Nothing is deleted on a timeout.
	BootstrapTimeout time.Duration
	// MemberStartTimeout is how long after its pod was created a member's
	// pod may stay Pending, and a learner may take to join, become healthy
	// and be promoted, before the cluster is reported Degraded with reason
	// MemberPodPending or LearnerNotCaughtUp; DefaultMemberStartTimeout if
	// zero. Nothing is deleted on a timeout.
	MemberStartTimeout time.Duration
	// RestoreImage is the operator's own image. When set, a new cluster
	// with spec.restore is restored physically: its seed pod gets init
	// containers that fetch the backup into the data volume with this
	// image, restore it with the cluster's etcdutl and move it into place
	// (package internal/seedrestore), so etcd starts with the backup's
	// keys, revisions and leases. The backup store must be reachable from
	// the seed pod: a PVC store's claim is mounted there read-only (it
	// must allow that next to the operator's mount: ReadOnlyMany,
	// ReadWriteMany, or both pods on one node), an S3 store's Secret as a
	// volume. Empty restores logically through the client API (see
	// package internal/snapshot). Which way a cluster is restored is
	// decided when its seed pod is created and read from the pod after.
	RestoreImage string

	leaders leaders
}

var (
	_ reconcile.Hooks[*v1alpha1.EtcdCluster]     = (*ClusterHooks)(nil)
	_ reconcile.Finalizer[*v1alpha1.EtcdCluster] = (*ClusterHooks)(nil)
	_ reconcile.Validator[*v1alpha1.EtcdCluster] = (*ClusterHooks)(nil)
)

func (h *ClusterHooks) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *ClusterHooks) timeouts() membership.Timeouts {
	t := membership.Timeouts{Bootstrap: h.BootstrapTimeout, MemberStart: h.MemberStartTimeout}
	if t.Bootstrap == 0 {
		t.Bootstrap = DefaultBootstrapTimeout
	}
	if t.MemberStart == 0 {
		t.MemberStart = DefaultMemberStartTimeout
	}
	return t
}

// Validate checks what the schema cannot: the backup schedule, and that the
// requested version is reachable from the running one.
func (h *ClusterHooks) Validate(_ context.Context, c *v1alpha1.EtcdCluster) field.ErrorList {
	var errs field.ErrorList
	if b := c.Spec.Backup; b != nil && b.Schedule != "" {
		if _, err := backup.ParseSchedule(b.Schedule); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "backup", "schedule"), b.Schedule, err.Error()))
		}
	}
	if err := membership.CheckUpgrade(c.Status.Version, c.Spec.Version); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "version"), c.Spec.Version, err.Error()))
	}
	return errs
}

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
	// dialed are the endpoints of the running member pods, sorted.
	dialed []string
	// unreachable is why no running member answered, nil when one did or
	// none runs.
	unreachable error
}

// Reconcile runs one pass: children, observation, one membership step,
// scheduled backups, status.
func (h *ClusterHooks) Reconcile(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	log := ctrl.LoggerFrom(ctx)
	if err := RegisterMetrics(); err != nil {
		return reconcile.Retry(err)
	}
	if c.Status.ClusterToken == "" {
		c.Status.ClusterToken = string(c.UID)
	}
	// The guard comes first: no child of c exists without it.
	guard, err := h.ensureGuard(ctx, c)
	if err != nil {
		return childError(err)
	}
	obs, err := h.observe(ctx, c, guard)
	if err != nil {
		return reconcile.Retry(err)
	}
	if err := h.holdChildren(ctx, c, obs, guard); err != nil {
		return reconcile.Retry(err)
	}
	// Members serve clients (LabelServing) before the client Service
	// selects by it: a Service written by an operator without the label
	// keeps its clients.
	if err := h.labelServing(ctx, c, obs); err != nil {
		return reconcile.Retry(err)
	}
	for _, obj := range []client.Object{headlessService(c), clientService(c), podDisruptionBudget(c)} {
		if _, err := h.Children.EnsureChild(ctx, c, heldBy(obj, guard)); err != nil {
			return childError(fmt.Errorf("ensuring %T %s: %w", obj, obj.GetName(), err))
		}
	}
	previousLeader := leaderID(c.Status.Members)
	h.recordStatus(c, obs)
	h.recordMetrics(c, obs, previousLeader)
	if err := h.deleteOrphanClaims(ctx, c, obs); err != nil {
		return reconcile.Retry(err)
	}

	// A cluster created from a backup is restored while it has one member,
	// before it grows: physically, by its seed pod's init containers,
	// before etcd starts, or logically, by loading the backup into the
	// running seed.
	var seed *seedRestore
	if r := c.Spec.Restore; r != nil && !c.Status.Restored {
		obs.planned.Size = 1
		physical := slices.ContainsFunc(slices.Collect(maps.Values(obs.pods)), restoredPhysically)
		switch {
		case len(obs.healthy) == 1 && len(obs.planned.Members) == 1:
			restore := h.restore
			if physical {
				restore = h.checkPhysicalRestore
			}
			if res := restore(ctx, c, obs); res.Kind() != reconcile.KindDone {
				return res
			}
			// The pass ends here: status.restored is written at its end,
			// and the cluster grows only in a pass that reads it back, so
			// that a lost status write redoes the restore (checked, or
			// loaded again into the lone seed no client reaches) rather
			// than leaving a grown cluster that looks unrestored.
			return reconcile.Waiting(ReasonRestored, "backup "+c.Spec.Restore.BackupName+" restored into the seed; the cluster grows once that is recorded", stepRequeue)
		case physical:
			if res := restoreInitFailed(obs); res != nil {
				return *res
			}
		case len(obs.pods) == 0 && !obs.planned.Bootstrapped && h.RestoreImage != "":
			// The backup must be known before the seed pod is created.
			b, _, res := h.restoreSource(ctx, c)
			if b == nil {
				return res
			}
			seed = &seedRestore{image: h.RestoreImage, backup: b}
		}
	}

	step := membership.Plan(obs.planned)
	log.V(1).Info("membership step", "action", step.Action, "member", step.Name, "reason", step.Reason)
	setConditions(c, obs, step)
	if step.Action == membership.ActionWait {
		return reconcile.Waiting(step.Reason, step.Message, stepRequeue)
	}
	if step.Action != membership.ActionNone {
		if step.Action == membership.ActionBootstrap && c.Spec.Restore != nil && !c.Status.Restored {
			path := "logical (through the client API, once the seed runs)"
			if seed != nil {
				path = "physical (init containers of the seed pod, before etcd starts)"
			}
			log.Info("creating the seed of a restored cluster", "etcdcluster", klog.KObj(c), "backup", c.Spec.Restore.BackupName, "restore", path)
		}
		if err := h.execute(ctx, c, obs, step, seed); err != nil {
			return childError(fmt.Errorf("%s %s: %w", step.Action, step.Name, err))
		}
		return reconcile.Waiting(step.Reason, step.Message, stepRequeue)
	}
	return h.scheduledBackup(ctx, c, obs)
}

// labelServing gives every member pod of a serving cluster LabelServing
// (a metadata patch: no restart): the seed of a restored cluster once the
// restore is recorded, and pods made by an operator before the label.
func (h *ClusterHooks) labelServing(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) error {
	if !serving(c) {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(obs.pods)) {
		pod := obs.pods[name]
		if pod.Labels[LabelServing] == "true" {
			continue
		}
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[LabelServing] = "true"
		if err := h.Client.Patch(ctx, pod, patch); err != nil {
			return fmt.Errorf("letting clients reach member %s: %w", name, err)
		}
		ctrl.LoggerFrom(ctx).Info("member serves clients", "etcdcluster", klog.KObj(c), "pod", name)
	}
	return nil
}

// childError is the result of a failed step: an object in the way that is
// not the cluster's (no controller: never adopted, it may hold an earlier
// cluster's data; or another controller's) waits with ReasonChildConflict
// until a person removes it; anything else is retried.
func childError(err error) reconcile.Result {
	if ownership.IsConflict(err) {
		return reconcile.Waiting(ReasonChildConflict, err.Error(), childConflictRequeue)
	}
	return reconcile.Retry(err)
}

// childConflictRequeue is how often a cluster blocked by an object that is
// not its own looks again.
const childConflictRequeue = 30 * time.Second

// observe reads c's member pods and claims and asks etcd about its
// members. A pod counts when c controls it, or when guard is one of its
// owners: a deletion in the foreground or orphaning removes c from the
// owners of its children, which the guard keeps for the final backup.
func (h *ClusterHooks) observe(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap) (*observation, error) {
	obs := &observation{guard: guard, pods: map[string]*corev1.Pod{}, claims: map[string]bool{},
		claimObjects: map[string]*corev1.PersistentVolumeClaim{}, healthy: map[string]string{}}
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
	*p = membership.Observed{Cluster: c.Name, Size: int(c.Spec.Size), Version: c.Spec.Version, Revision: PodRevision(c), Persistent: persistent(c),
		Bootstrapped: len(c.Status.Members) > 0, Timeouts: h.timeouts(), Claims: obs.claims, ClaimsDeleting: deleting}
	for _, ms := range c.Status.Members {
		id, _ := strconv.ParseUint(ms.ID, 16, 64) // 0 if unreadable: a failed pod is then not deleted
		p.Recorded = append(p.Recorded, membership.Member{ID: id, Name: ms.Name, Learner: ms.Learner})
	}
	now := h.now()
	var endpoints []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || !(metav1.IsControlledBy(pod, c) || isHeldBy(pod, guard)) {
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
			Revision: pod.Annotations[AnnotationPodRevision], Age: max(now.Sub(pod.CreationTimestamp.Time), 0)})
	}
	if len(endpoints) == 0 {
		return obs, nil
	}
	slices.Sort(endpoints)
	obs.dialed = endpoints
	ec, err := h.Etcd.New(ctx, endpoints)
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
		return obs, nil //nolint:nilerr // as above
	}
	p.Reached = true
	p.Bootstrapped = true
	for _, em := range list {
		m := membership.Member{ID: em.ID, Name: MemberName(em.PeerURLs[0]), Started: em.Started(), Learner: em.IsLearner}
		if m.Name == "" {
			m.Name = "unknown-" + em.IDString()
		}
		if pod, ok := obs.pods[m.Name]; ok && pod.Status.Phase == corev1.PodRunning && m.Started {
			ep := h.Endpoints.clientURL(c, m.Name)
			sctx, cancel := context.WithTimeout(ctx, callTimeout)
			st, err := ec.Status(sctx, ep)
			cancel()
			if err == nil && st.Healthy() {
				m.Healthy = true
				m.Leader = st.Leader == em.ID
				obs.healthy[m.Name] = ep
			}
		}
		p.Members = append(p.Members, m)
	}
	return obs, nil
}

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
	members := make([]v1alpha1.MemberStatus, 0, len(obs.planned.Members))
	var ready int32
	version := ""
	for _, m := range obs.planned.Members {
		ms := v1alpha1.MemberStatus{Name: m.Name, ID: etcdclient.FormatID(m.ID), PeerURL: PeerURL(c, m.Name),
			Healthy: m.Healthy, Learner: m.Learner, Leader: m.Leader}
		if pod, ok := obs.pods[m.Name]; ok {
			ms.Version = pod.Labels[LabelVersion]
			// Every member counts, healthy or not: status.version is what
			// the next spec.version is checked against.
			if ms.Version != "" && (version == "" || lessVersion(ms.Version, version)) {
				version = ms.Version
			}
		}
		if m.Healthy && !m.Learner {
			ready++
		}
		members = append(members, ms)
	}
	slices.SortFunc(members, func(a, b v1alpha1.MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	c.Status.Members = members
	c.Status.ReadyMembers = ready
	if version != "" {
		c.Status.Version = version
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

// execute carries out one planned step: the etcd call first, then the
// Kubernetes write. A failure between the two is finished by the planner on
// the next pass.
// A seed pod is created with seed's init containers when seed is not nil.
func (h *ClusterHooks) execute(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation, step membership.Step, seed *seedRestore) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch step.Action {
	case membership.ActionBootstrap:
		return h.createMember(ctx, c, obs.guard, step.Name, step.Version, step.Name+"="+PeerURL(c, step.Name), "new", seed)
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
		return h.createMember(ctx, c, obs.guard, step.Name, step.Version, initialCluster(list), "existing", nil)
	case membership.ActionCreatePod:
		if len(obs.healthy) == 0 {
			// No member answers: the member is recreated on its claim
			// (membership.Plan does so only with persistent storage),
			// where its data directory makes etcd ignore the initial
			// cluster; it is built from the members last recorded.
			return h.createMember(ctx, c, obs.guard, step.Name, step.Version, recordedCluster(c), "existing", nil)
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
		return h.createMember(ctx, c, obs.guard, step.Name, step.Version, initialCluster(list), "existing", nil)
	case membership.ActionPromote:
		ec, err := h.clientOn(ctx, obs, "")
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		return ec.MemberPromote(ctx, step.ID)
	case membership.ActionRemove:
		ec, err := h.clientOn(ctx, obs, step.Name)
		if err != nil {
			return err
		}
		defer func() { _ = ec.Close() }()
		if err := ec.MemberRemove(ctx, step.ID); err != nil {
			return err
		}
		return h.deleteMember(ctx, c, step.Name, true)
	case membership.ActionDeletePod:
		// A failed pod of a known member keeps its data; a pod etcd no
		// longer knows loses it.
		return h.deleteMember(ctx, c, step.Name, step.ID == 0)
	case membership.ActionUpgrade:
		return h.deleteMember(ctx, c, step.Name, false)
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
	return h.Etcd.New(ctx, eps)
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

func (h *ClusterHooks) createMember(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, name, version, initial, state string, seed *seedRestore) error {
	if persistent(c) {
		// Applying to a claim being deleted would "succeed" and leave the
		// pod waiting for a claim that is gone: wait for it to go first.
		var old corev1.PersistentVolumeClaim
		err := h.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: dataClaimName(name)}, &old)
		if err == nil && old.DeletionTimestamp != nil {
			return fmt.Errorf("claim %s of an earlier member %s is still being deleted; the new member's pod waits for it to go", old.Name, name)
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading claim of %s: %w", name, err)
		}
		if _, err := h.Children.EnsureChild(ctx, c, heldBy(dataClaim(c, name), guard)); err != nil {
			return fmt.Errorf("creating claim of %s: %w", name, err)
		}
	}
	if _, err := h.Children.EnsureChild(ctx, c, heldBy(memberPod(c, name, version, initial, state, seed), guard)); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	return nil
}

func (h *ClusterHooks) deleteMember(ctx context.Context, c *v1alpha1.EtcdCluster, name string, withData bool) error {
	if _, err := h.Children.DeleteChild(ctx, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}); err != nil {
		return fmt.Errorf("deleting pod %s: %w", name, err)
	}
	if withData && persistent(c) {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: dataClaimName(name), Namespace: c.Namespace}}
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
		if _, err := h.Children.DeleteChild(ctx, c, claim); err != nil {
			return fmt.Errorf("deleting orphaned claim of %s: %w", name, err)
		}
	}
	return nil
}

// restoreSource returns spec.restore's EtcdBackup once it has Succeeded,
// and the store holding it. Otherwise the backup is nil and the result says
// why: a missing or failed backup, or a store that is missing or
// misconfigured, stalls the cluster; one still running is waited for.
func (h *ClusterHooks) restoreSource(ctx context.Context, c *v1alpha1.EtcdCluster) (*v1alpha1.EtcdBackup, backup.Store, reconcile.Result) {
	var b v1alpha1.EtcdBackup
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.Restore.BackupName}, &b); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.restore.backupName: EtcdBackup %q not found", c.Spec.Restore.BackupName))
		}
		return nil, nil, reconcile.Retry(err)
	}
	if b.Status.Phase == v1alpha1.BackupFailed {
		msg := "no reason recorded"
		if cc := statusutil.Get(&b, ConditionComplete); cc != nil {
			msg = cc.Message
		}
		return nil, nil, reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("spec.restore.backupName: EtcdBackup %s failed: %s", b.Name, msg))
	}
	if b.Status.Phase != v1alpha1.BackupSucceeded {
		return nil, nil, reconcile.Waiting("WaitingForBackup", fmt.Sprintf("EtcdBackup %s is %q, not Succeeded", b.Name, b.Status.Phase), stepRequeue)
	}
	store, err := clusterStore(ctx, h.Stores, b.Namespace, b.Spec.ClusterName, b.Spec.StoreRef)
	if err != nil {
		if errors.Is(err, ErrStoreNotFound) || errors.Is(err, ErrStoreMisconfigured) {
			return nil, nil, reconcile.Terminal(ReasonRestoreFailed, err)
		}
		return nil, nil, reconcile.Retry(err)
	}
	return &b, store, reconcile.Done()
}

// checkPhysicalRestore sets status.restored once the seed restored by its
// init containers answers at the backup's revision or later. A seed below
// it was not restored (its init containers did not run, or restored
// something else), which stalls the cluster: growing it would replicate
// the wrong data.
func (h *ClusterHooks) checkPhysicalRestore(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	var name, ep string
	for n, e := range obs.healthy {
		name, ep = n, e
	}
	pod := obs.pods[name]
	if !restoredPhysically(pod) {
		return reconcile.Retry(fmt.Errorf("the healthy member %s is not the seed restored physically", name))
	}
	want, err := strconv.ParseInt(pod.Annotations[AnnotationRestoreRevision], 10, 64)
	if err != nil {
		return reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("pod %s: annotation %s: %w", name, AnnotationRestoreRevision, err))
	}
	ec, err := h.clientOn(ctx, obs, "")
	if err != nil {
		return reconcile.Retry(err)
	}
	defer func() { _ = ec.Close() }()
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	st, err := ec.Status(sctx, ep)
	cancel()
	if err != nil {
		return reconcile.Retry(fmt.Errorf("reading the revision of the restored member %s: %w", name, err))
	}
	backupName := pod.Annotations[AnnotationRestoreBackup]
	if st.Revision < want {
		return reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf(
			"physical restore: member %s runs at revision %d, EtcdBackup %s was taken at revision %d: the init containers of pod %s did not restore it; see their logs",
			name, st.Revision, backupName, want, name))
	}
	c.Status.Restored = true
	ctrl.LoggerFrom(ctx).Info("restored backup", "restore", "physical", "backup", backupName, "member", name, "revision", st.Revision)
	return reconcile.Done()
}

// restoreInitFailed returns a stalling result when an init container of
// the seed pod restored physically has failed, naming it and its
// termination message (the end of its log), nil otherwise. The kubelet
// retries it; the cluster carries on once the seed answers.
func restoreInitFailed(obs *observation) *reconcile.Result {
	for _, pod := range obs.pods {
		if !restoredPhysically(pod) {
			continue
		}
		for _, st := range pod.Status.InitContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 {
					res := reconcile.Terminal(ReasonRestoreFailed, fmt.Errorf("physical restore: init container %s of pod %s exited with %d: %s",
						st.Name, pod.Name, t.ExitCode, strings.TrimSpace(t.Message)))
					return &res
				}
			}
		}
	}
	return nil
}

// restore loads spec.restore's backup into the single seed member.
func (h *ClusterHooks) restore(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	b, store, res := h.restoreSource(ctx, c)
	if b == nil {
		return res
	}
	ec, err := h.clientOn(ctx, obs, "")
	if err != nil {
		return reconcile.Retry(err)
	}
	defer func() { _ = ec.Close() }()
	r := &snapshot.Restorer{Client: ec, Dir: h.ScratchDir}
	if _, err := backup.Restore(ctx, store, b.Status.BackupID, r); err != nil {
		var ve *backup.VerificationError
		if errors.As(err, &ve) || errors.Is(err, backup.ErrNotFound) || errors.Is(err, snapshot.ErrWrongFormat) {
			return reconcile.Terminal(ReasonRestoreFailed, err)
		}
		return reconcile.Retry(fmt.Errorf("restoring %s: %w", b.Status.BackupID, err))
	}
	c.Status.Restored = true
	ctrl.LoggerFrom(ctx).Info("restored backup", "restore", "logical", "backup", b.Name, "keys", r.Loaded.Keys, "skippedLeased", r.Loaded.SkippedLeased)
	return reconcile.Done()
}

// snapshotInto backs up the first healthy member, by name, into store,
// recording extra in the manifest.
func snapshotInto(ctx context.Context, f etcdclient.Factory, store backup.Store, healthy map[string]string, extra map[string]string) (backup.Manifest, error) {
	names := make([]string, 0, len(healthy))
	for n := range healthy {
		names = append(names, n)
	}
	if len(names) == 0 {
		return backup.Manifest{}, errors.New("no healthy member to snapshot")
	}
	slices.Sort(names)
	ec, err := f.New(ctx, []string{healthy[names[0]]})
	if err != nil {
		return backup.Manifest{}, err
	}
	defer func() { _ = ec.Close() }()
	return backup.Backup(ctx, store, snapshot.Snapshotter{Client: ec, Extra: extra})
}

// scheduledBackup takes the backup spec.backup.schedule asks for, if one is
// due, and applies the retention to scheduled backups. A failed attempt is
// counted and reported, and the next one waits for the next scheduled time.
func (h *ClusterHooks) scheduledBackup(ctx context.Context, c *v1alpha1.EtcdCluster, obs *observation) reconcile.Result {
	b := c.Spec.Backup
	if b == nil || b.Schedule == "" {
		return reconcile.RequeueAfter(healthRequeue)
	}
	sched, err := backup.ParseSchedule(b.Schedule)
	if err != nil {
		return reconcile.Terminal(reconcile.ReasonInvalidSpec, err) // Validate catches this first
	}
	last := c.Status.Backup.LastRun()
	if last.IsZero() {
		last = c.CreationTimestamp.Time
	}
	now := h.now().UTC()
	due, after := sched.Next(last.UTC(), now)
	if !due {
		return reconcile.RequeueAfter(min(after, healthRequeue))
	}
	c.Status.Backup.RecordAttempt(now)
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, b.StoreRef)
	var m backup.Manifest
	if err == nil {
		m, err = snapshotInto(ctx, h.Etcd, store, obs.healthy, map[string]string{ExtraTrigger: TriggerSchedule})
	}
	countBackup(c.Namespace, c.Name, TriggerSchedule, err)
	if err != nil {
		// Kept in status.backup until the next success, beyond the
		// Ready condition of this pass.
		c.Status.Backup.RecordFailure(h.now(), err)
		return reconcile.Retry(fmt.Errorf("scheduled backup: %w", err))
	}
	c.Status.Backup.RecordSuccess(m)
	ctrl.LoggerFrom(ctx).Info("scheduled backup taken", "etcdcluster", klog.KObj(c), "id", m.ID, "size", m.Size)
	unreadable, err := pruneScheduled(ctx, store, int(max(b.Retention, 1)), now)
	for _, u := range unreadable {
		ctrl.LoggerFrom(ctx).Info("a backup in the store is kept: its manifest cannot be read or disagrees with its data; inspect it",
			"etcdcluster", klog.KObj(c), "id", u.ID, "reason", u.Err.Error())
	}
	if err != nil {
		return reconcile.Retry(err)
	}
	return reconcile.RequeueAfter(min(after, healthRequeue))
}

// pruneScheduled keeps the newest keep scheduled backups in store and
// deletes older ones. On-demand and final backups share the store and are
// not counted or deleted: an EtcdBackup's backup lives as long as the
// store keeps it. Leftovers of interrupted backups are removed after
// backup.DefaultIncompleteGrace. Backups whose manifest cannot be read (of
// a newer operator, damaged) are never deleted: they are returned.
func pruneScheduled(ctx context.Context, store backup.Store, keep int, now time.Time) ([]backup.UnreadableBackup, error) {
	list, err := backup.List(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("pruning scheduled backups: %w", err)
	}
	var scheduled []backup.Manifest
	for _, m := range list {
		if m.Snapshot.Extra[ExtraTrigger] == TriggerSchedule {
			scheduled = append(scheduled, m)
		}
	}
	_, drop := backup.Policy{KeepLast: keep}.Select(scheduled, now)
	for _, m := range drop {
		// The manifest first: a backup interrupted half-way is
		// incomplete, never listed without its data.
		for _, key := range []string{backup.ManifestKeyFor(m.ID), m.DataKey} {
			if err := store.Delete(ctx, key); err != nil {
				return nil, fmt.Errorf("pruning scheduled backup %s: %w", m.ID, err)
			}
		}
	}
	// A policy that keeps every complete backup removes only leftovers.
	res, err := backup.Prune(ctx, store, backup.Policy{KeepLast: math.MaxInt}, now)
	if err != nil {
		return res.Unreadable, fmt.Errorf("removing leftovers of interrupted backups: %w", err)
	}
	return res.Unreadable, nil
}

// finalBackupTaken reports whether store holds the final backup of c's
// deletion: a final backup recording c's UID (finalBackupExtra). A UID is
// deleted once, so no clock is compared: the operator's (a manifest's start
// time) and the API server's (deletionTimestamp) may disagree.
func finalBackupTaken(ctx context.Context, store backup.Store, c *v1alpha1.EtcdCluster) (bool, error) {
	if c.DeletionTimestamp == nil {
		return false, nil
	}
	list, err := backup.List(ctx, store)
	if err != nil {
		return false, err
	}
	for _, m := range list {
		if m.Snapshot.Extra[ExtraTrigger] == TriggerFinal && m.Snapshot.Extra[ExtraClusterUID] == string(c.UID) {
			return true, nil
		}
	}
	return false, nil
}

// finalBackupExtra is the snapshot metadata of c's final backup.
func finalBackupExtra(c *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{ExtraTrigger: TriggerFinal, ExtraClusterUID: string(c.UID)}
}

// Finalize takes a final backup before the cluster's data is deleted, when
// spec.backup is set and skipFinalBackup is not, then deletes the
// cluster's guard and metric series. Pods and claims are deleted by the
// garbage collector afterwards, once neither the cluster nor its guard
// exists: the guard keeps them through a deletion in the foreground or
// orphaning (see LabelGuardOf).
func (h *ClusterHooks) Finalize(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	if err := RegisterMetrics(); err != nil {
		return reconcile.Retry(err)
	}
	res := h.finalBackup(ctx, c)
	if k := res.Kind(); k != reconcile.KindDone && k != reconcile.KindRequeueAfter {
		return res
	}
	// The children go only now: see LabelGuardOf.
	if err := h.releaseGuard(ctx, c); err != nil {
		return reconcile.Retry(err)
	}
	h.forgetMetrics(c)
	return res
}

func (h *ClusterHooks) finalBackup(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	b := c.Spec.Backup
	if b == nil || b.SkipFinalBackup {
		return reconcile.Done()
	}
	store, err := clusterStore(ctx, h.Stores, c.Namespace, c.Name, b.StoreRef)
	if err != nil {
		return reconcile.Retry(fmt.Errorf("final backup: %w", err))
	}
	// Idempotent: a final backup recording this cluster's UID is this
	// deletion's (an on-demand or scheduled one taken meanwhile is not: it
	// may predate the last writes).
	if done, err := finalBackupTaken(ctx, store, c); err != nil {
		return reconcile.Retry(fmt.Errorf("final backup: %w", err))
	} else if done {
		return reconcile.Done()
	}
	// A ConfigMap of the guard's name that is not c's guard holds
	// nothing of c: c's children are then found as c's own.
	guard, err := h.getGuard(ctx, c)
	if err != nil && !ownership.IsConflict(err) {
		return reconcile.Retry(err)
	}
	obs, err := h.observe(ctx, c, guard)
	if err != nil {
		return reconcile.Retry(err)
	}
	if len(obs.healthy) == 0 {
		return reconcile.Waiting(ReasonFinalBackup,
			"no healthy member to take the final backup from; set spec.backup.skipFinalBackup to delete without one", stepRequeue)
	}
	m, err := snapshotInto(ctx, h.Etcd, store, obs.healthy, finalBackupExtra(c))
	countBackup(c.Namespace, c.Name, TriggerFinal, err)
	if err != nil {
		return reconcile.Retry(fmt.Errorf("final backup: %w", err))
	}
	ctrl.LoggerFrom(ctx).Info("final backup taken", "id", m.ID, "size", m.Size, "sha256", m.SHA256)
	return reconcile.Done()
}
