package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/ownership"
	"github.com/opkit-dev/opkit/reconcile"
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
	// ReasonFinalBackupBlocked (Reconciling=True, while the namespace is
	// being deleted): the final backup cannot be taken yet and the namespace
	// waits for it; the message says why (EventFinalBackupBlocked).
	ReasonFinalBackupBlocked = "FinalBackupBlocked"
	// ReasonTakingFinalBackup (Reconciling=True, while deleting): the
	// final backup is under way (status.backupOperation).
	ReasonTakingFinalBackup = "TakingFinalBackup"
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
	// statusTimeout bounds a Status call, which a member answers from
	// memory; etcdctl gives its commands 5 s.
	statusTimeout = 5 * time.Second
)

// ClusterConfig is what ClusterHooks work with. Client, Children, Etcd,
// Stores and Runner are required.
type ClusterConfig struct {
	// Client reads and writes pods and claims (the manager's client).
	Client client.Client
	// APIReader reads what must not come from a cache that may lag: the
	// claim a member is recreated on (the manager's API reader); Client if
	// nil.
	APIReader client.Reader
	// Children writes services, the PDB, claims and pods.
	Children *reconcile.Children
	// Etcd builds clients on member endpoints.
	Etcd etcdclient.Factory
	// Endpoints maps members to the URLs the operator dials.
	Endpoints Endpoints
	// Stores opens backup stores.
	Stores StoreResolver
	// Secrets reads the certificates of spec.tls, which Client writes (the
	// manager's API reader: the cache holds only the Secrets' metadata);
	// Client if nil.
	Secrets client.Reader
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
	// Recorder emits the events of membership steps, backups and
	// restores (see EventBackupTaken); none if nil.
	Recorder events.EventRecorder
	// Runner runs scheduled backups beside the passes; add it to the
	// manager.
	Runner *operation.Runner
}

// ClusterHooks reconciles EtcdClusters; build them with NewClusterHooks.
type ClusterHooks struct {
	ClusterConfig

	leaders      leaders
	retained     retention
	outOfService taintClock
	guard        *guard.Guard
}

// NewClusterHooks returns the hooks of the EtcdCluster Reconciler, once
// cfg has what they need, and registers the operator's metrics.
func NewClusterHooks(cfg ClusterConfig) (*ClusterHooks, error) {
	if err := required("NewClusterHooks", "ClusterConfig", map[string]bool{
		"Client": cfg.Client != nil, "Children": cfg.Children != nil, "Etcd": cfg.Etcd != nil, "Stores": cfg.Stores != nil,
		"Runner": cfg.Runner != nil,
	}); err != nil {
		return nil, err
	}
	if cfg.BootstrapTimeout < 0 || cfg.MemberStartTimeout < 0 {
		return nil, fmt.Errorf("controller.NewClusterHooks: negative timeout (BootstrapTimeout %s, MemberStartTimeout %s); zero means the default",
			cfg.BootstrapTimeout, cfg.MemberStartTimeout)
	}
	if err := RegisterMetrics(); err != nil {
		return nil, err
	}
	g, err := newGuard(cfg.Client)
	if err != nil {
		return nil, err
	}
	return &ClusterHooks{ClusterConfig: cfg, guard: g}, nil
}

var (
	_ reconcile.Hooks[*v1alpha1.EtcdCluster]     = (*ClusterHooks)(nil)
	_ reconcile.Finalizer[*v1alpha1.EtcdCluster] = (*ClusterHooks)(nil)
	_ reconcile.Validator[*v1alpha1.EtcdCluster] = (*ClusterHooks)(nil)
)

func (h *ClusterHooks) apiReader() client.Reader {
	if h.APIReader != nil {
		return h.APIReader
	}
	return h.Client
}

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

// Validate refuses extra flags no member may start with; the CRD's rules
// refuse them too, unless it was installed without them.
func (h *ClusterHooks) Validate(_ context.Context, c *v1alpha1.EtcdCluster) field.ErrorList {
	return validateFlags(c)
}

// invalidFields are the fields a pass leaves aside while it does the rest:
// a lost member is still replaced (at the members' version), backups go on
// beside a broken defragmentation schedule. The pass ends Stalled with
// reason InvalidSpec.
func invalidFields(c *v1alpha1.EtcdCluster) field.ErrorList {
	var errs field.ErrorList
	if b := c.Spec.Backup; b != nil && b.Schedule != "" {
		if _, err := backup.ParseSchedule(b.Schedule); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "backup", "schedule"), b.Schedule, err.Error()))
		}
	}
	if d := c.Spec.Defragmentation; d != nil && d.Schedule != "" {
		if _, err := backup.ParseSchedule(d.Schedule); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "defragmentation", "schedule"), d.Schedule, err.Error()))
		}
	}
	if err := membership.CheckUpgrade(c.Status.Version, c.Spec.Version); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "version"), c.Spec.Version, err.Error()))
	}
	return errs
}

// targetVersion is the version members run and are created at:
// spec.version, or while etcd cannot move to it, the newest version a
// member runs (a version an earlier spec asked for).
func targetVersion(c *v1alpha1.EtcdCluster) string {
	if membership.CheckUpgrade(c.Status.Version, c.Spec.Version) == nil {
		return c.Spec.Version
	}
	v := c.Status.Version
	for _, m := range c.Status.Members {
		if m.Version != "" && lessVersion(v, m.Version) {
			v = m.Version
		}
	}
	return v
}

// Reconcile runs one pass; with invalid fields (invalidFields) or Secrets
// of spec.tls the members' copy stands in for, it ends Stalled but is
// looked at again as a healthy pass would be.
func (h *ClusterHooks) Reconcile(ctx context.Context, c *v1alpha1.EtcdCluster) reconcile.Result {
	invalid := invalidFields(c)
	if c.Status.ClusterToken == "" {
		c.Status.ClusterToken = string(c.UID)
	}
	// The guard comes first: no child of c exists without it.
	guard, err := h.ensureGuard(ctx, c)
	if err != nil {
		return childError(err)
	}
	tlsConfig, aside, stop := h.certificates(ctx, c, guard)
	if stop != nil {
		return *stop
	}
	res := h.reconcile(ctx, c, guard, tlsConfig)
	if (len(invalid) == 0 && aside == nil) || res.Outcome() == reconcile.OutcomeRetry || res.Outcome() == reconcile.OutcomeTerminal {
		return res
	}
	after := res.After()
	if after <= 0 {
		after = healthRequeue
	}
	if len(invalid) > 0 {
		return reconcile.Terminal(reconcile.ReasonInvalidSpec, invalid.ToAggregate()).RecheckAfter(after)
	}
	return aside.result(min(after, secretRecheck))
}

// reconcile runs one pass: children, observation, one membership step,
// scheduled backups, status.
func (h *ClusterHooks) reconcile(ctx context.Context, c *v1alpha1.EtcdCluster, guard *corev1.ConfigMap, tlsConfig *tls.Config) reconcile.Result {
	log := ctrl.LoggerFrom(ctx)
	obs, err := h.observe(ctx, c, guard, tlsConfig)
	if err != nil {
		return reconcile.Retry(err)
	}
	restart, notMoved := advanceRecovery(c, obs, metav1.NewTime(h.now()), h.RestoreImage)
	if notMoved != "" {
		log.Info("rebuild ended without moving the revision on", "etcdcluster", klog.KObj(c), "member", c.Status.LastRecovery.Member)
		emit(h.Recorder, c, warning, EventRevisionNotMoved, "Rebuild", notMoved)
	}
	if restart {
		name := c.Status.Recovery.Member
		if err := h.deleteMember(ctx, c, obs, name, false); err != nil {
			return reconcile.Retry(err)
		}
		c.Status.Recovery.Restarts++
		msg := fmt.Sprintf("restarting %s once more: it answers below the revision bump, as its database lacked entries of its log (etcd did not stop gracefully) and was not restored; etcd has applied them now", name)
		emit(h.Recorder, c, normal, membership.ReasonRebuilding, "RestartPod", msg)
		return reconcile.Waiting(membership.ReasonRebuilding, msg, stepRequeue)
	}
	if res := restoreInitFailed(c, obs); res != nil && c.Status.Recovery != nil {
		return *res
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
	if err := h.labelVoters(ctx, obs); err != nil {
		return reconcile.Retry(err)
	}
	step := membership.Plan(obs.planned)
	for _, obj := range []client.Object{headlessService(c), clientService(c), podDisruptionBudget(c, obs, step)} {
		if _, err := h.Children.EnsureChild(ctx, c, heldBy(obj, guard)); err != nil {
			return childError(fmt.Errorf("ensuring %T %s: %w", obj, obj.GetName(), err))
		}
	}
	previousLeader, previousAlarms := leaderID(c.Status.Members), c.Status.Alarms
	h.recordStatus(c, obs)
	h.recordMetrics(c, obs, previousLeader)
	if err := h.deleteOrphanClaims(ctx, c, obs); err != nil {
		return reconcile.Retry(err)
	}
	if err := h.expandClaims(ctx, c, obs); err != nil {
		return reconcile.Retry(err)
	}
	if released, err := h.releaseLostClaims(ctx, c, obs); err != nil || released {
		if err != nil {
			return reconcile.Retry(err)
		}
		return reconcile.Waiting(EventMemberNodeLost, "a member's node is gone: its data claim was deleted, the member is replaced next", stepRequeue)
	}

	if res := h.corrupt(ctx, c, previousAlarms); res != nil {
		return *res
	}
	seed, res := h.restoreStep(ctx, c, obs)
	if res != nil {
		return *res
	}
	if rs := rebuildRestart(c, step, h.RestoreImage); rs != nil {
		seed = rs
		step.Reason = membership.ReasonRebuilding
		step.Message = fmt.Sprintf("restarting %s on its data restored with the revision moved on by %d, so that no client sees a revision twice", step.Name, c.Status.Recovery.RevisionBump)
	}

	log.V(1).Info("membership step", "action", step.Action, "member", step.Name, "reason", step.Reason)
	setConditions(c, obs, step)
	if step.Grows || step.Action == membership.ActionWait || step.Action == membership.ActionNone {
		// Writes wait on the recovery, which goes through the members
		// that answer. A member added before the leader is defragmented
		// may be sent its database file as it is, above the quota; other
		// membership steps go first. A member added since, its file above
		// the quota, is defragmented before the next.
		if res := h.recoverNoSpace(ctx, c, obs); res != nil {
			return *res
		}
		if res := h.defragNearQuota(ctx, c, obs); res != nil {
			return *res
		}
	}
	if step.Action == membership.ActionWait {
		h.backupWhileWaiting(ctx, c, obs)
		return reconcile.Waiting(step.Reason, step.Message, stepRequeue)
	}
	if step.Action == membership.ActionRebuildFromBackup {
		return h.rebuildFromBackup(ctx, c, step)
	}
	if step.Action != membership.ActionNone {
		if step.Action == membership.ActionBootstrap && restorePending(c) {
			path := "logical (through the client API, once the seed runs)"
			if seed != nil {
				path = "physical (init containers of the seed pod, before etcd starts)"
			}
			log.Info("creating the seed of a restored cluster", "etcdcluster", klog.KObj(c), "backup", restoredWhat(c, ""), "restore", path)
		}
		if err := h.execute(ctx, c, obs, step, seed); err != nil {
			if errors.Is(err, etcdclient.ErrNotYet) || errors.Is(err, reconcile.ErrNoDisruptionAllowed) || errors.Is(err, reconcile.ErrChildReplaced) {
				return reconcile.Waiting(step.Reason, fmt.Sprintf("%s: %v; trying again", step.Message, err), stepRequeue)
			}
			return childError(fmt.Errorf("%s %s: %w", step.Action, step.Name, err))
		}
		emit(h.Recorder, c, normal, step.Reason, string(step.Action), step.Message)
		return reconcile.Waiting(step.Reason, step.Message, stepRequeue)
	}
	if res := h.defragment(ctx, c, obs); res != nil {
		return *res
	}
	return h.scheduledBackup(ctx, c, obs)
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

// required returns an error naming, in order, the fields of config that
// set reports unset, for constructor fn; nil when all are set.
func required(fn, config string, set map[string]bool) error {
	var missing []string
	for name, ok := range set {
		if !ok {
			missing = append(missing, config+"."+name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return fmt.Errorf("controller.%s: %s required", fn, strings.Join(missing, ", "))
}
