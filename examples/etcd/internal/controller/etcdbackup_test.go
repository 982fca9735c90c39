package controller_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/operation"
	"github.com/opkit-dev/opkit/statusutil"
)

// backupRig is a rig with a converged one-member cluster "src" and a PVC
// store "backups".
func backupRig(t *testing.T) *rig {
	t.Helper()
	g := newRig(t)
	g.mountPVCStore("backups")
	g.create(cluster("src", 1))
	g.converge("src", 10)
	return g
}

// createBackup creates EtcdBackup name with spec.
func (g *rig) createBackup(name string, spec v1alpha1.EtcdBackupSpec) {
	g.t.Helper()
	eb := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns}, Spec: spec}
	if err := g.c.Create(g.t.Context(), eb); err != nil {
		g.t.Fatal(err)
	}
}

// backupPass runs passes of the EtcdBackup reconciler while the backup's
// attempt is under way, as the requeues of a manager would, and returns
// the last pass's error: it ends Succeeded, Failed, waiting to start, or
// on a failed pass. An operator that dies (g.crash) is restarted and the
// passes go on.
func (g *rig) backupPass(name string) error {
	g.t.Helper()
	key := client.ObjectKey{Namespace: g.ns, Name: name}
	for range 1000 {
		_, _, err := g.reconcileOrDie(g.br, name)
		var eb v1alpha1.EtcdBackup
		if gerr := g.c.Get(g.t.Context(), key, &eb); gerr != nil {
			g.t.Fatal(gerr)
		}
		if err != nil || eb.Status.Operation == nil || !eb.Status.Operation.Active() {
			return err
		}
	}
	g.t.Fatalf("EtcdBackup %s still running after 1000 passes", name)
	return nil
}

func (g *rig) getBackup(name string) *v1alpha1.EtcdBackup {
	g.t.Helper()
	var eb v1alpha1.EtcdBackup
	if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: name}, &eb); err != nil {
		g.t.Fatal(err)
	}
	return &eb
}

// storeOf is the part of the PVC store "backups" holding cluster's
// backups, as the operator opens it.
func (g *rig) storeOf(cluster string) backup.Store {
	g.t.Helper()
	return g.clusterPart(g.pvcStoreDir("backups"), cluster)
}

// clusterPart is the part of the filesystem store at dir holding
// cluster's backups: its prefix is the namespace and the cluster's name.
func (g *rig) clusterPart(dir, cluster string) backup.Store {
	g.t.Helper()
	store, err := fsstore.New(dir)
	if err != nil {
		g.t.Fatal(err)
	}
	sub, err := backup.Sub(store, g.ns+"/"+cluster)
	if err != nil {
		g.t.Fatal(err)
	}
	return sub
}

// storedBackups lists the complete backups of cluster in the PVC store
// "backups".
func (g *rig) storedBackups(cluster string) []backup.Manifest {
	g.t.Helper()
	list, err := backup.List(g.t.Context(), g.storeOf(cluster))
	if err != nil {
		g.t.Fatal(err)
	}
	return list
}

// snapshots counts the Snapshot calls the fake etcd received.
func (g *rig) snapshots() int {
	n := 0
	for _, c := range g.fake.Calls() {
		if strings.HasPrefix(c, "Snapshot") {
			n++
		}
	}
	return n
}

// backupState is what the tests compare of an EtcdBackup.
type backupState struct {
	Phase    v1alpha1.BackupPhase
	Complete condition
	// Reconciling and Stalled are zero when absent.
	Reconciling, Stalled condition
}

func stateOf(eb *v1alpha1.EtcdBackup) backupState {
	conds := conditionsOf(eb, controller.ConditionComplete, statusutil.ConditionReconciling, statusutil.ConditionStalled)
	return backupState{Phase: eb.Status.Phase, Complete: conds[controller.ConditionComplete],
		Reconciling: conds[statusutil.ConditionReconciling], Stalled: conds[statusutil.ConditionStalled]}
}

// TestBackupFailures: an EtcdBackup whose cluster or store is missing waits
// for it until the grace period after its creation has passed, then fails
// for good; a misconfigured store and a refused snapshot fail it at once;
// a transient snapshot failure is retried. A Failed backup stays Failed,
// with its reason, on later passes and takes no snapshot.
func TestBackupFailures(t *testing.T) {
	pvc := func(name string) v1alpha1.StoreReference { return v1alpha1.StoreReference{PVCName: name} }
	waiting := func(reason string) backupState {
		return backupState{Phase: v1alpha1.BackupPending, Complete: condition{metav1.ConditionFalse, "InProgress"},
			Reconciling: condition{metav1.ConditionTrue, reason}}
	}
	failed := func(reason string) backupState {
		return backupState{Phase: v1alpha1.BackupFailed, Complete: condition{metav1.ConditionFalse, reason},
			Stalled: condition{metav1.ConditionTrue, reason}}
	}
	succeeded := backupState{Phase: v1alpha1.BackupSucceeded, Complete: condition{metav1.ConditionTrue, controller.ReasonBackupSucceeded}}
	tests := []struct {
		name string
		// prepare changes the world and returns the backup's spec.
		prepare func(g *rig) v1alpha1.EtcdBackupSpec
		// before is the state after the first pass, after the state once
		// the grace period has passed.
		before, after backupState
		// wantText is in the Complete message after the grace period.
		wantText string
		// wantSnapshots is the number of snapshots taken.
		wantSnapshots int
	}{{
		name: "cluster not found",
		prepare: func(*rig) v1alpha1.EtcdBackupSpec {
			return v1alpha1.EtcdBackupSpec{ClusterName: "nope", StoreRef: pvc("backups")}
		},
		before:   waiting(controller.ReasonClusterNotFound),
		after:    failed(controller.ReasonClusterNotFound),
		wantText: `EtcdCluster "nope" not found, 1m0s after`,
	}, {
		name: "store secret not found",
		prepare: func(*rig) v1alpha1.EtcdBackupSpec {
			return v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{S3SecretName: "missing"}}
		},
		before:   waiting(controller.ReasonStoreNotFound),
		after:    failed(controller.ReasonStoreNotFound),
		wantText: "secret " + "%NS%" + "/missing",
	}, {
		name: "store volume not mounted",
		prepare: func(*rig) v1alpha1.EtcdBackupSpec {
			return v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: pvc("absent")}
		},
		before:   waiting(controller.ReasonStoreNotFound),
		after:    failed(controller.ReasonStoreNotFound),
		wantText: "pvcName absent is not mounted",
	}, {
		name: "store secret invalid",
		prepare: func(g *rig) v1alpha1.EtcdBackupSpec {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: g.ns}}
			if err := g.c.Create(g.t.Context(), sec); err != nil {
				g.t.Fatal(err)
			}
			return v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{S3SecretName: "empty"}}
		},
		before:   failed(controller.ReasonStoreMisconfigured),
		after:    failed(controller.ReasonStoreMisconfigured),
		wantText: "/empty",
	}, {
		name: "snapshot refused",
		prepare: func(g *rig) v1alpha1.EtcdBackupSpec {
			g.fake.FailNext("Snapshot", fmt.Errorf("%w: etcdserver: permission denied", etcdclient.ErrRefused), false)
			return v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: pvc("backups")}
		},
		before:        failed(controller.ReasonSnapshotRefused),
		after:         failed(controller.ReasonSnapshotRefused),
		wantText:      "permission denied",
		wantSnapshots: 1,
	}, {
		name: "transient snapshot failure is retried",
		prepare: func(g *rig) v1alpha1.EtcdBackupSpec {
			g.fake.FailNext("Snapshot", errors.New("injected: connection reset"), false)
			return v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: pvc("backups")}
		},
		before:        succeeded,
		after:         succeeded,
		wantText:      "pvc:backups/",
		wantSnapshots: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := backupRig(t)
			g.createBackup("eb", tt.prepare(g))
			_ = g.backupPass("eb") // failures are in the status
			if diff := cmp.Diff(tt.before, stateOf(g.getBackup("eb"))); diff != "" {
				t.Errorf("after the first pass (-want +got):\n%s", diff)
			}

			// The grace runs from the creation, a real time; the clock is
			// frozen at the rig's start.
			created := g.getBackup("eb").CreationTimestamp.Time
			g.clock.advance(created.Add(controller.DefaultNotFoundGrace + time.Second).Sub(g.clock.Now()))
			for range 2 {
				_ = g.backupPass("eb")
				eb := g.getBackup("eb")
				if diff := cmp.Diff(tt.after, stateOf(eb)); diff != "" {
					t.Errorf("after the grace period (-want +got):\n%s", diff)
				}
				want := strings.ReplaceAll(tt.wantText, "%NS%", g.ns)
				if msg := statusutil.Get(eb, controller.ConditionComplete).Message; !strings.Contains(msg, want) {
					t.Errorf("Complete message %q does not mention %q", msg, want)
				}
			}
			if got := g.snapshots(); got != tt.wantSnapshots {
				t.Errorf("%d snapshots taken, want %d", got, tt.wantSnapshots)
			}
		})
	}
}

// onePass runs one pass of the EtcdBackup reconciler.
func (g *rig) onePass(name string) error {
	g.t.Helper()
	_, err := g.br.Reconcile(g.t.Context(), crreconcile.Request{NamespacedName: client.ObjectKey{Namespace: g.ns, Name: name}})
	return err
}

// TestBackupSurvivesRestartAtEveryStep kills the operator, or fails a
// status write, at each step of an EtcdBackup's operation: the backup ends
// Succeeded with exactly one backup of its UID in the store, and is taken
// again only when the attempt that was cut short took none.
func TestBackupSurvivesRestartAtEveryStep(t *testing.T) {
	tests := []struct {
		name string
		// cut runs the passes up to the failure.
		cut func(g *rig)
		// snapshots is the number of Snapshot calls that completed;
		// attempts the Record's at the end.
		snapshots int
		attempts  int32
	}{{
		name: "the attempt's status write fails",
		cut: func(g *rig) {
			g.faults.arm("status-apply", "EtcdBackup")
			if err := g.onePass("eb"); err == nil {
				g.t.Fatal("the status write did not fail")
			}
		},
		snapshots: 1, attempts: 1,
	}, {
		name: "restart with the attempt written, before the run",
		cut: func(g *rig) {
			mustPass(g, "eb")
			g.startOperator()
		},
		snapshots: 1, attempts: 2,
	}, {
		name: "restart during the run",
		cut: func(g *rig) {
			started, release := g.fake.HoldSnapshots()
			mustPass(g, "eb")
			mustPass(g, "eb")
			<-started
			g.startOperator()
			release()
		},
		snapshots: 1, attempts: 2,
	}, {
		name: "restart after the backup's commit, before its status",
		cut: func(g *rig) {
			mustPass(g, "eb")
			mustPass(g, "eb")
			g.waitStored("src", 1)
			g.startOperator()
		},
		snapshots: 1, attempts: 1,
	}, {
		name: "the success's status write fails",
		cut: func(g *rig) {
			mustPass(g, "eb")
			mustPass(g, "eb")
			g.waitStored("src", 1)
			g.faults.arm("status-apply", "EtcdBackup")
			if err := g.onePass("eb"); err == nil {
				g.t.Fatal("the status write did not fail")
			}
		},
		snapshots: 1, attempts: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := backupRig(t)
			g.createBackup("eb", v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}})
			tt.cut(g)
			if err := g.backupPass("eb"); err != nil {
				t.Fatal(err)
			}
			eb := g.getBackup("eb")
			if eb.Status.Phase != v1alpha1.BackupSucceeded {
				t.Fatalf("phase %q, want Succeeded; operation %+v", eb.Status.Phase, eb.Status.Operation)
			}
			stored := g.storedBackups("src")
			var uids []string
			for _, m := range stored {
				uids = append(uids, m.Snapshot.Extra[controller.ExtraBackupUID])
			}
			if diff := cmp.Diff([]string{string(eb.UID)}, uids); diff != "" {
				t.Fatalf("backups in the store, by EtcdBackup UID (-want +got):\n%s", diff)
			}
			got := []any{eb.Status.BackupID, eb.Status.SHA256, eb.Status.Operation.Phase, eb.Status.Operation.Attempts, g.snapshots()}
			want := []any{stored[0].ID, stored[0].SHA256, operation.Succeeded, tt.attempts, tt.snapshots}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (id, sha256, operation phase, attempts), snapshots (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBackupInterruptedAtEveryAttemptFails: a backup whose every attempt
// is cut short by an operator restart ends Failed, SnapshotFailed, after
// its attempts, with no backup taken.
func TestBackupInterruptedAtEveryAttemptFails(t *testing.T) {
	g := backupRig(t)
	g.createBackup("eb", v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}})
	started, release := g.fake.HoldSnapshots()
	defer release()
	for eb := g.getBackup("eb"); eb.Status.Phase != v1alpha1.BackupFailed; eb = g.getBackup("eb") {
		if eb.Status.Operation != nil && eb.Status.Operation.Attempts > 10 {
			t.Fatalf("attempt %d", eb.Status.Operation.Attempts)
		}
		_ = g.onePass("eb") // the last one's error is the failure
		if op := g.getBackup("eb").Status.Operation; op != nil && op.Phase == operation.Running {
			mustPass(g, "eb")
			<-started
			g.startOperator()
		}
	}
	eb := g.getBackup("eb")
	got := []any{stateOf(eb), eb.Status.Operation.Attempts, len(g.storedBackups("src"))}
	want := []any{backupState{Phase: v1alpha1.BackupFailed, Complete: condition{metav1.ConditionFalse, controller.ReasonSnapshotFailed},
		Stalled: condition{metav1.ConditionTrue, controller.ReasonSnapshotFailed}}, int32(5), 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("state, attempts, backups stored (-want +got):\n%s", diff)
	}
	if msg := statusutil.Get(eb, controller.ConditionComplete).Message; !strings.Contains(msg, "interrupted") {
		t.Errorf("Complete message %q does not say the attempts were interrupted", msg)
	}
}

func mustPass(g *rig, name string) {
	g.t.Helper()
	if err := g.onePass(name); err != nil {
		g.t.Fatal(err)
	}
}

// waitStored waits for n complete backups of cluster in the store.
func (g *rig) waitStored(cluster string, n int) {
	g.t.Helper()
	for range 1000 {
		if len(g.storedBackups(cluster)) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatalf("fewer than %d backups of %s in the store", n, cluster)
}
