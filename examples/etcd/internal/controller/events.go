package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Event reasons, besides those of membership steps: every membership step
// the operator carries out is one Normal event whose reason is the step's
// (Bootstrapping, ScalingUp, PromotingLearner, ScalingDown, MemberAdded,
// MemberRemoved, MemberRecreated, MemberFailed, MemberLost, Upgrading,
// RollingOut) and whose note is the step's message. Events are emitted
// once per step, not per pass: a wait emits none (conditions say what the
// cluster waits for).
const (
	// EventBackupTaken (Normal): a scheduled backup of an EtcdCluster, or
	// an EtcdBackup's backup, is in its store.
	EventBackupTaken = "BackupTaken"
	// EventBackupFailed (Warning): a scheduled backup failed (it is taken
	// again at the next scheduled time), or an EtcdBackup failed for good.
	EventBackupFailed = "BackupFailed"
	// EventBackupsPruned (Normal): spec.backup.retention deleted older
	// scheduled backups of an EtcdCluster; the note names them.
	EventBackupsPruned = "BackupsPruned"
	// EventFinalBackupTaken (Normal): a deleted EtcdCluster's final backup
	// is in its store; its members go next. Not emitted while the
	// namespace is being deleted (it refuses events): logged then.
	EventFinalBackupTaken = "FinalBackupTaken"
	// EventFinalBackupBlocked (Warning, on the Namespace): a deleted
	// EtcdCluster's namespace is being deleted and waits for its final
	// backup, which cannot be taken yet; the message says why and that
	// spec.backup.skipFinalBackup lets it go without one.
	EventFinalBackupBlocked = "FinalBackupBlocked"
	// EventRestored (Normal): spec.restore's backup, or the one a rebuild
	// after every member was lost chose, is in the seed.
	EventRestored = "Restored"
	// EventLogicalRestore (Warning): the backup is loaded logically, since
	// the operator runs without --restore-image. Until the restore is
	// recorded, a client that addresses the seed pod by name reads part of
	// the backup; revisions and leased keys are not restored.
	EventLogicalRestore = "LogicalRestore"
	// EventDefragmented (Normal): a member was defragmented; the note says how much
	// its file shrank.
	EventDefragmented = "Defragmented"
	// EventDefragmentationFailed (Warning): a defragmentation failed; it is retried.
	EventDefragmentationFailed = "DefragmentationFailed"
	// EventLeaderMoved (Normal): leadership moved away from a member whose turn to
	// be defragmented came.
	EventLeaderMoved = "LeaderMoved"
	// EventNoSpace (Warning): etcd raised NOSPACE and refuses writes; the
	// operator compacted at the revision the note names and defragments.
	EventNoSpace = "NoSpace"
	// EventAlarmDisarmed (Normal): the operator disarmed NOSPACE once every
	// database was below the quota; writes go through again.
	EventAlarmDisarmed = "AlarmDisarmed"
	// EventCorrupt (Warning): etcd raised CORRUPT; the operator makes no
	// change to the cluster until a person has dealt with it.
	EventCorrupt = "Corrupt"
	// EventRevisionNotMoved (Warning): a rebuild from a survivor ended
	// without moving the revision on; watchers must be restarted.
	EventRevisionNotMoved = "RevisionNotMoved"
)

// emit emits one event about obj through rec, if there is one. note is
// not a format: it is passed as the argument of "%s".
func emit(rec events.EventRecorder, obj runtime.Object, eventtype, reason, action, note string) {
	if rec == nil {
		return
	}
	rec.Eventf(obj, nil, eventtype, reason, action, "%s", note)
}

// The event types, for brevity.
const (
	normal  = corev1.EventTypeNormal
	warning = corev1.EventTypeWarning
)
