package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
)

// InitContainerStageMember runs the operator's stage-member-data in the
// pod of a member restarted by a rebuild from it, before the restore and
// finish-restore init containers (package internal/seedrestore).
const InitContainerStageMember = "stage-member-data"

// maxRebuildRestarts bounds the restarts of a rebuild's survivor that
// answers below the bump: one is expected after a kill, as etcd applies
// its log once it runs.
const maxRebuildRestarts = 2

// AnnotationRebuild carries the token of the rebuild whose init
// containers restore the member on its own data.
const AnnotationRebuild = "etcd.opkit.dev/rebuild"

// advanceRecovery moves status.recovery on in a pass that reached the
// cluster. A rebuild from a backup ends once the backup is in the seed. A
// rebuild from a surviving member has two steps: once the member answers
// with --force-new-cluster, status.recovery.revisionBump is set and its
// pod is restarted on its data restored with the revision moved on
// (rebuildRestart); once it answers from that pod past the revision it
// answered at (status.recovery.revision) moved on by the bump, the
// rebuild ends. Answering below it, the member restored nothing (its
// database was behind its log, see seedrestore.StagedBehindLog) and
// advanceRecovery returns true: its pod is to be restarted once more, up to
// maxRebuildRestarts times; then the rebuild ends without a bump and
// notMoved says so. The record stays in status.lastRecovery: writes were
// discarded.
func advanceRecovery(c *v1alpha1.EtcdCluster, obs *observation, now metav1.Time, image string) (restart bool, notMoved string) {
	r := c.Status.Recovery
	if r == nil || !obs.planned.Reached {
		return false, ""
	}
	done := r.DeepCopy()
	switch {
	case r.Backup != "":
		if !c.Status.Restored {
			return false, ""
		}
		done.RevisionBump = revisionBump(obs)
	case r.RevisionBump == 0:
		pod := obs.pods[r.Member]
		st, answers := obs.statuses[r.Member]
		if !answers {
			return false, ""
		}
		if image != "" && pod != nil && canBumpRevision(pod.Labels[LabelVersion]) {
			// The restart must answer past this revision moved on.
			r.Revision = st.Revision
			r.RevisionBump = seedrestore.RevisionBump
			return false, ""
		}
		// Without the operator's image (--restore-image) there is no
		// init container to restore with: watchers must be restarted.
	default:
		pod := obs.pods[r.Member]
		st, answers := obs.statuses[r.Member]
		if pod == nil || !answers || obs.healthy[r.Member] == "" || pod.Annotations[AnnotationForceNewCluster] == "true" {
			return false, ""
		}
		switch {
		case pod.Annotations[AnnotationRebuild] != rebuildToken(r):
			// Restarted without the rebuild's init containers (by an
			// operator without the image, say): the revision was not
			// moved on, and a restore now would split the member from
			// any that joined since.
			done.RevisionBump = 0
		case st.Revision >= r.Revision+r.RevisionBump:
			// Moved on: the rebuild ends with its bump.
		case r.Restarts < maxRebuildRestarts:
			return true, "" // counted once the pod is deleted
		default:
			// Killed at every stop, say: more restarts of the only member
			// would keep the cluster down and move nothing.
			done.RevisionBump = 0
			notMoved = fmt.Sprintf("the rebuild from %s ends without moving the revision on: after %d more restarts it still answers at revision %d, "+
				"below %d (its database stayed behind its log). Restart every watcher: revisions its lost peers served may be served again for other writes",
				r.Member, r.Restarts, st.Revision, r.Revision+r.RevisionBump)
		}
	}
	done.EndTime = &now
	c.Status.LastRecovery = done
	c.Status.Recovery = nil
	return false, notMoved
}

// rebuildRestart returns the init containers' needs of step when it
// recreates the pod of the member a rebuild began from, after it
// answered with --force-new-cluster; nil otherwise. The restore makes a
// one-member cluster of the member's data: never while status.members
// records another member, whatever status.recovery says.
func rebuildRestart(c *v1alpha1.EtcdCluster, step membership.Step, image string) *seedRestore {
	r := c.Status.Recovery
	if r == nil || r.Backup != "" || r.RevisionBump == 0 || image == "" ||
		step.Action != membership.ActionCreatePod || !step.OnData || step.Name != r.Member ||
		len(c.Status.Members) != 1 || c.Status.Members[0].Name != r.Member {
		return nil
	}
	return &seedRestore{image: image, rebuild: rebuildToken(r)}
}

// rebuildToken names the rebuild r: the init containers restore a member's
// data once per token.
func rebuildToken(r *v1alpha1.RecoveryStatus) string {
	var start int64
	if r.StartTime != nil {
		start = r.StartTime.Unix()
	}
	return fmt.Sprintf("%s-%d-%d", r.Member, r.RaftIndex, start)
}

// addRebuildInitContainers makes pod restore its member's own data before
// etcd starts: the operator's stage-member-data stages the member's
// database, the cluster's etcdutl restores it as a one-member cluster
// with the revision moved on, and the operator's finish-restore puts it in
// place of the member's data. All three are no-ops once the rebuild is
// recorded in the data directory (a restarted pod).
func addRebuildInitContainers(c *v1alpha1.EtcdCluster, pod *corev1.Pod, member, etcdImage string, r *seedRestore) {
	pod.Annotations[AnnotationRebuild] = r.rebuild
	flags := []string{"--" + seedrestore.FlagDataDir + "=" + dataDir, "--" + seedrestore.FlagRebuild + "=" + r.rebuild}
	peer := PeerURL(c, member)
	pod.Spec.InitContainers = restoreSteps(c, r, etcdImage,
		corev1.Container{Name: InitContainerStageMember, Args: append([]string{seedrestore.CommandStageMember}, flags...)},
		seedrestore.RebuildArgs(dataDir, member, member+"="+peer, c.Status.ClusterToken, peer),
		append([]string{seedrestore.CommandFinish}, flags...))
}
