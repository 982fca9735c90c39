package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	guardpkg "github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/testenv"
)

// TestFinalBackupUnderEveryPropagationPolicy: deleting a cluster takes its
// final backup from its running members whatever the propagation policy
// (kubectl delete --cascade=background|foreground|orphan; Argo CD prunes
// in the foreground), and afterwards nothing of the cluster is left
// behind: the real garbage collector (kube-controller-manager) deletes
// every child once the guard is released. Before the guard, a foreground
// deletion deleted every member pod while the final backup was pending,
// which then waited for a healthy member forever.
func TestFinalBackupUnderEveryPropagationPolicy(t *testing.T) {
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			g := newRig(t)
			g.withRealControllers()
			g.createBackedUp("del", 3, 0, 30)
			want := g.writeKeys("/acked/", 5)
			claims := g.claimsOf("del")
			c := g.get("del")
			if err := g.c.Delete(t.Context(), c, client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
			g.passesUntilGone(c)
			final := g.finalBackups("del")
			if len(final) != 1 {
				t.Fatalf("%d final backups, want 1", len(final))
			}
			if diff := cmp.Diff(want, g.backupKeys("del", final[0])); diff != "" {
				t.Errorf("final backup lacks acknowledged writes (-want +got):\n%s", diff)
			}
			g.waitNothingLeft("del", policy, claims)
		})
	}
}

// withRealControllers runs kube-controller-manager's garbage collector,
// namespace, disruption and claim-protection controllers for the test:
// what decides where a cluster's data goes once it is deleted.
func (g *rig) withRealControllers() {
	g.t.Helper()
	g.realControllers.Store(true)
	env.StartControllerManager(g.t)
}

// passesUntilGone runs passes of c, as the manager's requeues would,
// while the real controllers act, until c is gone (within a minute). A
// member whose pod they deleted stops answering, as its container would;
// a pod the operator recreates is started.
func (g *rig) passesUntilGone(c *v1alpha1.EtcdCluster) {
	g.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var errs []string
	for g.exists(c) {
		if time.Now().After(deadline) {
			last := g.get(c.Name)
			var left []string
			for _, obj := range g.objects() {
				left = append(left, fmt.Sprintf("%s %s (deleting %t, finalizers %q, owners %d)", obj.GetKind(), obj.GetName(), obj.GetDeletionTimestamp() != nil, obj.GetFinalizers(), len(obj.GetOwnerReferences())))
			}
			g.t.Logf("objects left: %s", strings.Join(left, "; "))
			g.t.Fatalf("EtcdCluster %s still exists after a minute: finalizers %v, conditions %+v; pass errors %q",
				c.Name, last.Finalizers, last.Status.Conditions, errs)
		}
		if err := g.pass(c.Name); err != nil && !slices.Contains(errs, err.Error()) {
			errs = append(errs, err.Error())
		}
		g.stopGoneMembers(c)
		g.kubelet(c.Name)
		time.Sleep(50 * time.Millisecond)
	}
}

// stopGoneMembers stops the fake members of c whose pod is gone.
func (g *rig) stopGoneMembers(c *v1alpha1.EtcdCluster) {
	g.t.Helper()
	pods := g.names(&corev1.PodList{})
	for _, m := range g.fake.Members() {
		if !slices.Contains(pods, m.Name) {
			g.fake.SetHealthy(controller.PeerURL(c, m.Name), false)
		}
	}
}

// waitNothingLeft waits until no object of dependentKinds labelled with
// cluster, nor its guard, is left: the garbage collector deletes what no
// existing owner holds. After an orphan deletion it waits instead until
// the guard is gone and the objects it held, claims among them, are left
// without owners, as kubectl delete --cascade=orphan asks.
// claims are cluster's claims before its deletion.
func (g *rig) waitNothingLeft(cluster string, policy metav1.DeletionPropagation, claims []string) {
	g.t.Helper()
	eventually(g.t, "the real controllers to finish the cluster's deletion", func() (bool, string) {
		left := g.residue(cluster, policy, claims)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// claimsOf names cluster's claims.
func (g *rig) claimsOf(cluster string) []string {
	g.t.Helper()
	var claims corev1.PersistentVolumeClaimList
	if err := g.c.List(g.t.Context(), &claims, client.InNamespace(g.ns), client.MatchingLabels{controller.LabelCluster: cluster}); err != nil {
		g.t.Fatal(err)
	}
	var names []string
	for _, c := range claims.Items {
		names = append(names, c.Name)
	}
	if len(names) == 0 {
		g.t.Fatalf("EtcdCluster %s has no claims", cluster)
	}
	return names
}

// residue is what of cluster's deletion under policy is not done yet: an
// object of cluster, its guard or cascade marker left; under Orphan, the
// guard or marker left, an object still owned, or one of claims gone.
func (g *rig) residue(cluster string, policy metav1.DeletionPropagation, claims []string) []string {
	g.t.Helper()
	var left []string
	kept := map[string]bool{}
	for _, obj := range g.objects() {
		guardMade := obj.GetName() == controller.GuardName(cluster) || obj.GetName() == controller.GuardName(cluster)+"-cascade"
		if obj.GetLabels()[controller.LabelCluster] != cluster && !guardMade {
			continue
		}
		if obj.GetKind() == "PersistentVolumeClaim" && obj.GetDeletionTimestamp() == nil {
			kept[obj.GetName()] = true
		}
		if policy != metav1.DeletePropagationOrphan || guardMade || len(obj.GetOwnerReferences()) > 0 {
			left = append(left, fmt.Sprintf("%s %s (finalizers %q, owners %d)", obj.GetKind(), obj.GetName(), obj.GetFinalizers(), len(obj.GetOwnerReferences())))
		}
	}
	if policy == metav1.DeletePropagationOrphan {
		for _, c := range claims {
			if !kept[c] {
				left = append(left, "orphaned claim "+c+" deleted")
			}
		}
	}
	return left
}

// dependentKinds are the kinds of the objects an EtcdCluster's deletion
// concerns.
var dependentKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("Pod"),
	corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"),
}

// objects returns every object of dependentKinds in the rig's namespace.
func (g *rig) objects() []*unstructured.Unstructured {
	g.t.Helper()
	var out []*unstructured.Unstructured
	for _, gvk := range dependentKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := g.c.List(g.t.Context(), list, client.InNamespace(g.ns)); err != nil {
			g.t.Fatal(err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

func (g *rig) exists(c *v1alpha1.EtcdCluster) bool {
	g.t.Helper()
	err := g.c.Get(g.t.Context(), client.ObjectKeyFromObject(c), &v1alpha1.EtcdCluster{})
	if err != nil && !apierrors.IsNotFound(err) {
		g.t.Fatal(err)
	}
	return err == nil
}

// TestChildrenMadeBeforeGuardsAreHeld: pods and claims made by an operator
// before guards get the guard as an owner in the next pass, and so do the
// Services and the budget; an object the cluster does not control does
// not.
func TestChildrenMadeBeforeGuardsAreHeld(t *testing.T) {
	g := newRig(t)
	g.create(cluster("old", 3))
	g.converge("old", 30)
	c := g.get("old")
	guard := &corev1.ConfigMap{}
	if err := g.c.Get(t.Context(), types.NamespacedName{Namespace: g.ns, Name: controller.GuardName("old")}, guard); err != nil {
		t.Fatalf("the cluster's guard: %v", err)
	}
	if diff := cmp.Diff(map[string]string{controller.LabelGuardOf: string(c.UID), guardpkg.LabelGuard: "true"}, guard.Labels); diff != "" {
		t.Errorf("guard labels (-want +got):\n%s", diff)
	}
	if len(guard.OwnerReferences) != 0 {
		t.Errorf("the guard has owners %v: a foreground deletion of the cluster would delete it with the members", guard.OwnerReferences)
	}
	// As an operator before guards left them.
	for _, obj := range g.objects() {
		refs := obj.GetOwnerReferences()
		kept := slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool { return r.UID == guard.UID })
		if len(kept) == len(refs) {
			continue
		}
		obj.SetOwnerReferences(kept)
		labels := obj.GetLabels()
		delete(labels, guardpkg.LabelHeldBy)
		obj.SetLabels(labels)
		if err := g.c.Update(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: g.ns, Labels: map[string]string{controller.LabelCluster: "old"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if err := g.c.Create(t.Context(), stranger); err != nil {
		t.Fatal(err)
	}
	if err := g.pass("old"); err != nil {
		t.Fatal(err)
	}
	var unheld []string
	for _, obj := range g.objects() {
		if obj.GetLabels()[controller.LabelCluster] != "old" || obj.GetKind() == "ConfigMap" || obj.GetName() == "stranger" {
			continue
		}
		if !guardpkg.IsHeld(obj, guard) {
			unheld = append(unheld, obj.GetKind()+" "+obj.GetName())
		}
	}
	if len(unheld) != 0 {
		t.Errorf("children without the guard as an owner after a pass: %v", unheld)
	}
	if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(stranger), stranger); err != nil {
		t.Fatal(err)
	}
	if len(stranger.OwnerReferences) != 0 {
		t.Errorf("a pod the cluster does not control got owners %v", stranger.OwnerReferences)
	}
}

// TestForeignGuardIsRefused: a ConfigMap with the guard's name that is not
// the cluster's guard (left by an earlier cluster of the same name, or
// someone else's) is not taken over, and nothing of the cluster is created
// before its own guard exists.
func TestForeignGuardIsRefused(t *testing.T) {
	g := newRig(t)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: controller.GuardName("f"), Namespace: g.ns}}
	if err := g.c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	g.create(cluster("f", 1))
	if err := g.pass("f"); err != nil {
		t.Fatal(err)
	}
	rc := statusutil.Get(g.get("f"), statusutil.ConditionReconciling)
	if rc == nil || rc.Reason != controller.ReasonChildConflict || !strings.Contains(rc.Message, foreign.Name) {
		t.Errorf("Reconciling = %+v, want reason %s naming %s", rc, controller.ReasonChildConflict, foreign.Name)
	}
	if got := g.names(&corev1.PodList{}); len(got) != 0 {
		t.Errorf("pods created without the cluster's guard: %v", got)
	}
	if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign); err != nil {
		t.Fatal(err)
	}
	if len(foreign.Labels) != 0 || len(foreign.OwnerReferences) != 0 {
		t.Errorf("the foreign ConfigMap was changed: labels %v, owners %v", foreign.Labels, foreign.OwnerReferences)
	}
}

// TestGuardCollector: a guard is deleted once its cluster is gone (not
// found, or replaced by a new cluster of the same name), and kept while
// its cluster exists, even while it is being deleted.
func TestGuardCollector(t *testing.T) {
	g := newRig(t)
	collector, err := controller.NewGuardCollector(g.c, g.c)
	if err != nil {
		t.Fatal(err)
	}
	live := cluster("live", 1)
	g.create(live)
	guardFor := func(name string, uid types.UID) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: controller.GuardName(name), Namespace: g.ns,
			Labels: map[string]string{controller.LabelCluster: name, controller.LabelGuardOf: string(uid)}}}
		if err := g.c.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	deleting := cluster("deleting", 1)
	deleting.Finalizers = []string{"test.opkit.dev/hold"}
	g.create(deleting)
	if err := g.c.Delete(t.Context(), deleting); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var d v1alpha1.EtcdCluster
		if err := g.c.Get(context.Background(), client.ObjectKeyFromObject(deleting), &d); err == nil {
			d.Finalizers = nil
			_ = g.c.Update(context.Background(), &d)
		}
	})
	replaced := cluster("replaced", 1)
	g.create(replaced)
	guards := map[string]*corev1.ConfigMap{
		"live":     guardFor("live", g.get("live").UID),
		"deleting": guardFor("deleting", g.get("deleting").UID),
		"gone":     guardFor("gone", "uid-of-a-deleted-cluster"),
		"replaced": guardFor("replaced", "uid-of-an-earlier-cluster"),
	}
	for _, cm := range guards {
		if _, err := collector.Reconcile(t.Context(), crreconcile.Request{NamespacedName: client.ObjectKeyFromObject(cm)}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for name, cm := range guards {
		err := g.c.Get(t.Context(), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		got[name] = err == nil
	}
	want := map[string]bool{"live": true, "deleting": true, "gone": false, "replaced": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("guards kept (-want +got):\n%s", diff)
	}
}

// TestDeletionRecreatesAMissingMemberForTheFinalBackup: a cluster deleted
// while its only member's pod is gone (a rolling restart, an eviction)
// recreates the pod on its data, takes the final backup from it and goes,
// whatever the propagation policy. Before, the deletion waited for a
// healthy member forever, since only Reconcile, which a deleted cluster
// no longer runs, recreates pods. Found by the fault campaign (seed 1,
// schedule 168). Under foreground and orphan deletion the real garbage
// collector takes the cluster's owner reference off the claim, which the
// guard still holds: the recreate refused it as not the cluster's and
// retried forever (issue #80, M2).
func TestDeletionRecreatesAMissingMemberForTheFinalBackup(t *testing.T) {
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(policy), func(t *testing.T) {
			g := newRig(t)
			g.withRealControllers()
			g.createBackedUp("gone", 1, 0, 10)
			want := g.writeKeys("/acked/", 5)
			g.deletePodAndStop("gone", "gone-0")
			c := g.get("gone")
			if err := g.c.Delete(t.Context(), c, client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
			g.passesUntilGone(c)
			final := g.finalBackups("gone")
			if len(final) != 1 {
				t.Fatalf("%d final backups, want 1", len(final))
			}
			if diff := cmp.Diff(want, g.backupKeys("gone", final[0])); diff != "" {
				t.Errorf("final backup lacks acknowledged writes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNamespaceDeletionKeepsMembersForTheFinalBackup: deleting a
// cluster's namespace deletes its pods, claims, Services and Secrets
// directly, not through the garbage collector, so only the guard's
// admission policy keeps the members running for the final backup,
// whether the namespace controller deletes the cluster at once or, with
// ordered namespace deletion, only after the pods. The backup holds every
// acknowledged write; the children can be deleted once it is taken. Before package guard, the namespace controller
// deleted the members at once and the cluster went without its final
// backup (a Warning event).
func TestNamespaceDeletionKeepsMembersForTheFinalBackup(t *testing.T) {
	for _, tc := range []struct {
		name string
		// podsFirst: ordered namespace deletion (Kubernetes 1.34+) deletes
		// the cluster only once its pods are gone.
		podsFirst bool
	}{{"the cluster deleted with the pods", false}, {"the pods first", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			withGuardPolicy(t)
			c := g.createBackedUp("ns", 3, 0, 20)
			want := g.writeKeys("/acked/", 5)
			guardName := g.guard("ns").Name
			g.drain()
			if err := g.c.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}}); err != nil {
				t.Fatal(err)
			}
			if !tc.podsFirst {
				if err := g.c.Delete(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			// The policy reaches admission through informers.
			eventually(t, "the guard's policy to refuse deleting a member", func() (bool, string) {
				err := g.c.Delete(t.Context(), g.pod("ns-0"), client.DryRunAll)
				return apierrors.IsForbidden(err), fmt.Sprint(err)
			})
			refused := g.deleteChildren("ns")
			for _, p := range g.names(&corev1.PodList{}) {
				if msg := refused["*v1.Pod "+p]; !strings.Contains(msg, "held by guard "+guardName) {
					t.Errorf("deleting pod %s in a namespace being deleted: %q, want refused by guard %s", p, msg, guardName)
				}
			}
			if tc.podsFirst {
				// Passes of the live cluster take the final backup and
				// release the guard, the Reconciler reporting it as for a
				// deletion (reconcile.WithNamespaceDeletion); then the
				// pods go, then the cluster. No event: the namespace
				// would refuse it (checked below).
				for i := range 4 {
					if err := g.pass("ns"); err != nil {
						t.Logf("pass: %v", err)
					}
					got := statusutil.Get(g.get("ns"), statusutil.ConditionReady)
					if i == 0 && (got.Status != metav1.ConditionFalse || got.Reason != reconcile.ReasonFinalizing || !strings.Contains(got.Message, "final backup")) {
						t.Errorf("Ready %s (%s: %s) while the namespace is being deleted, want False, %s, naming the final backup",
							got.Status, got.Reason, got.Message, reconcile.ReasonFinalizing)
					}
				}
				eventually(t, "the pods to be deletable", func() (bool, string) {
					left := g.deleteChildren("ns")
					return len(left) == 0, fmt.Sprint(left)
				})
				if err := g.c.Delete(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 10 && g.exists(c); i++ {
				if err := g.pass("ns"); err != nil {
					t.Logf("pass: %v", err)
				}
			}
			if g.exists(c) {
				t.Fatalf("EtcdCluster still exists after 10 passes: %+v", g.get("ns").Status.Conditions)
			}
			final := g.finalBackups("ns")
			if len(final) != 1 {
				t.Fatalf("%d final backups, want 1; events %q", len(final), g.drain())
			}
			if diff := cmp.Diff(want, g.backupKeys("ns", final[0])); diff != "" {
				t.Errorf("final backup lacks acknowledged writes (-want +got):\n%s", diff)
			}
			// The namespace refuses new events; the operator logs instead.
			if events := g.drain(); len(events) != 0 {
				t.Errorf("events %q into a namespace being deleted, want none", events)
			}
			eventually(t, "the children to be deletable once the guard is released", func() (bool, string) {
				left := g.deleteChildren("ns")
				return len(left) == 0, fmt.Sprint(left)
			})
		})
	}
}

// TestNamespaceDeletionWaitsForTheFinalBackup: a cluster whose namespace
// is being deleted waits for its final backup when it cannot be taken yet
// (no member answers, the store cannot be opened): Reconciling says why,
// a Warning on the Namespace too, the guard keeps the members and claims,
// and the backup is taken once the cause heals, or the cluster goes
// without it once spec.backup.skipFinalBackup is set. Before, the first
// such pass released the guard and the data went without a backup.
func TestNamespaceDeletionWaitsForTheFinalBackup(t *testing.T) {
	for _, tc := range []struct {
		name string
		// block makes the final backup impossible, heal possible again.
		block, heal func(g *rig, c *v1alpha1.EtcdCluster)
		why         string
		// skip: the way out rather than heal.
		skip bool
	}{{
		name: "no member answers",
		block: func(g *rig, c *v1alpha1.EtcdCluster) {
			for _, p := range g.names(&corev1.PodList{}) {
				g.fake.SetHealthy(controller.PeerURL(c, p), false)
			}
		},
		heal: func(g *rig, c *v1alpha1.EtcdCluster) {
			for _, p := range g.names(&corev1.PodList{}) {
				g.fake.SetHealthy(controller.PeerURL(c, p), true)
			}
		},
		why: "no healthy voting member answers",
	}, {
		name: "the store is not mounted",
		block: func(g *rig, _ *v1alpha1.EtcdCluster) {
			if err := os.Rename(g.pvcStoreDir("backups"), g.pvcStoreDir("backups")+".away"); err != nil {
				g.t.Fatal(err)
			}
		},
		heal: func(g *rig, _ *v1alpha1.EtcdCluster) {
			if err := os.Rename(g.pvcStoreDir("backups")+".away", g.pvcStoreDir("backups")); err != nil {
				g.t.Fatal(err)
			}
		},
		why: "pvcName backups is not mounted",
	}, {
		name: "the user gives up the backup",
		block: func(g *rig, c *v1alpha1.EtcdCluster) {
			for _, p := range g.names(&corev1.PodList{}) {
				g.fake.SetHealthy(controller.PeerURL(c, p), false)
			}
		},
		heal: func(g *rig, c *v1alpha1.EtcdCluster) {
			c = g.get(c.Name)
			c.Spec.Backup.SkipFinalBackup = true
			if err := g.c.Update(g.t.Context(), c); err != nil {
				g.t.Fatal(err)
			}
		},
		why:  "no healthy voting member answers",
		skip: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t)
			rec := &regardingRecorder{EventRecorder: g.events}
			g.hooks.Recorder = rec
			c := g.createBackedUp("ns", 3, 0, 20)
			if err := g.c.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}}); err != nil {
				t.Fatal(err)
			}
			if err := g.c.Delete(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			tc.block(g, c)
			g.drain()
			for range 5 {
				if err := g.pass("ns"); err != nil {
					t.Logf("pass: %v", err)
				}
			}
			if !g.exists(c) {
				t.Fatalf("the cluster went while its final backup could not be taken; events %q", g.drain())
			}
			got := statusutil.Get(g.get("ns"), statusutil.ConditionReconciling)
			if got.Reason != controller.ReasonFinalBackupBlocked || !strings.Contains(got.Message, tc.why) || !strings.Contains(got.Message, "skipFinalBackup") {
				t.Errorf("Reconciling %s %s: %q, want reason %s naming %q and skipFinalBackup", got.Status, got.Reason, got.Message, controller.ReasonFinalBackupBlocked, tc.why)
			}
			if got := rec.regarding(controller.EventFinalBackupBlocked); !slices.Equal(got, []string{"Namespace/" + g.ns}) {
				t.Errorf("%s events regarding %v, want the Namespace %s (deduplicated)", controller.EventFinalBackupBlocked, got, g.ns)
			}
			g.guard("ns") // still holds the members and claims

			tc.heal(g, c)
			for i := 0; i < 10 && g.exists(c); i++ {
				if err := g.pass("ns"); err != nil {
					t.Logf("pass: %v", err)
				}
			}
			if g.exists(c) {
				t.Fatalf("EtcdCluster still exists after 10 passes once healed: %+v", g.get("ns").Status.Conditions)
			}
			want := 1
			if tc.skip {
				want = 0
			}
			if n := len(g.finalBackups("ns")); n != want {
				t.Errorf("%d final backups, want %d", n, want)
			}
			if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: controller.GuardName("ns")}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Errorf("the guard after the cluster went: %v, want NotFound", err)
			}
		})
	}
}

// TestFinalBackupOutlivesTheStoreSecret: the namespace is deleted and the
// S3 store's Secret with it; the real namespace controller deletes the
// cluster only once the member pods, which the guard's policy keeps, are
// gone (Kubernetes 1.34+ orders its work). The final backup, with
// every acknowledged write, is written with the operator's copy of the
// Secret, which the guard holds; then the guard goes and so does the
// namespace, with nothing left. Before, the store could not be opened and
// the cluster went without its final backup.
func TestFinalBackupOutlivesTheStoreSecret(t *testing.T) {
	g := newRig(t)
	withGuardPolicy(t)
	g.withRealControllers()
	c, sec := g.createS3Cluster("s", 3)
	g.converge("s", 20)
	want := g.writeKeys("/acked/", 5)
	if err := g.pass("s"); err != nil {
		t.Fatal(err)
	}
	var cp corev1.Secret
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: controller.StoreCredentialsName("s")}, &cp); err != nil {
		t.Fatalf("the copy of the store's Secret: %v", err)
	}
	if diff := cmp.Diff(map[string][]byte{"bucket": []byte("b")}, cp.Data); diff != "" {
		t.Errorf("the copy's data (-want +got):\n%s", diff)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}}
	if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(ns), ns); err != nil {
		t.Fatal(err)
	}
	if err := g.c.Delete(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	// Ordering its work, the namespace controller deletes the Secret
	// only after the pods; without ordering (before 1.34, or the feature
	// off) it goes within seconds. The test deletes it first.
	if err := g.c.Delete(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	g.passesUntilGone(c)
	var final []backup.Manifest
	for _, m := range s3StandInBackups(g, "b", "s") {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			final = append(final, m)
		}
	}
	if len(final) != 1 {
		t.Fatalf("%d final backups in the store, want 1; events %q", len(final), g.drain())
	}
	if diff := cmp.Diff(want, g.storeKeys(s3StandInStore(g, "b", "s"), final[0])); diff != "" {
		t.Errorf("final backup lacks acknowledged writes (-want +got):\n%s", diff)
	}
	testenv.WaitForDeletion(t, g.c, ns, 2*time.Minute)
}

// TestNamespaceDeletionAfterTheFinalBackup: with ordered namespace
// deletion, passes of the live cluster take the final backup and release
// the guard; the namespace controller then deletes the pods, the Secrets
// (the store's and its copy) and the cluster. The deleted cluster's
// Finalize must let it go: its final backup is taken and nothing is held.
// Before, it tried the backup again, could not open the store without a
// Secret, and waited for good (found by TestFinalBackupOutlivesTheStoreSecret
// under the race detector).
func TestNamespaceDeletionAfterTheFinalBackup(t *testing.T) {
	g := newRig(t)
	c, _ := g.createS3Cluster("r", 1)
	g.converge("r", 10)
	if err := g.pass("r"); err != nil { // copies the Secret
		t.Fatal(err)
	}
	if err := g.c.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}}); err != nil {
		t.Fatal(err)
	}
	guardKey := client.ObjectKey{Namespace: g.ns, Name: controller.GuardName("r")}
	for i := 0; i < 10 && !apierrors.IsNotFound(g.c.Get(t.Context(), guardKey, &corev1.ConfigMap{})); i++ {
		if err := g.pass("r"); err != nil {
			t.Logf("pass: %v", err)
		}
	}
	if err := g.c.Get(t.Context(), guardKey, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the guard after 10 passes in a namespace being deleted: %v, want NotFound; conditions %+v", err, g.get("r").Status.Conditions)
	}
	// The namespace controller's part, once nothing is held.
	for _, name := range []string{"s3", controller.StoreCredentialsName("r")} {
		if err := g.c.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns}}); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	if err := g.c.Delete(t.Context(), g.get("r")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5 && g.exists(c); i++ {
		if err := g.pass("r"); err != nil {
			t.Logf("pass: %v", err)
		}
	}
	if g.exists(c) {
		t.Fatalf("EtcdCluster still exists after 5 passes: %+v", g.get("r").Status.Conditions)
	}
	if n := len(s3StandInBackups(g, "b", "r")); n != 1 {
		t.Errorf("%d backups in the store, want the one final backup", n)
	}
}

// s3StandIn resolves S3 references as DefaultStores does, through their
// Secret, to a directory per bucket; PVC references as DefaultStores.
func s3StandIn(g *rig) controller.StoreResolver {
	pvc := controller.DefaultStores(g.c, g.fsRoot)
	return func(ctx context.Context, ns string, ref v1alpha1.StoreReference) (backup.Store, error) {
		if ref.S3SecretName == "" {
			return pvc(ctx, ns, ref)
		}
		var sec corev1.Secret
		if err := g.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.S3SecretName}, &sec); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: secret %s/%s", controller.ErrStoreNotFound, ns, ref.S3SecretName)
			}
			return nil, err
		}
		dir := filepath.Join(g.fsRoot, "s3", string(sec.Data["bucket"]))
		if err := os.MkdirAll(dir, 0o700); err != nil { // a bucket exists before a backup
			return nil, err
		}
		return fsstore.New(dir)
	}
}

// createS3Cluster restarts the operator with the S3 stand-in as its
// store, creates the store's Secret "s3" (bucket "b") and the cluster
// name of size members backed up to it, and returns both.
func (g *rig) createS3Cluster(name string, size int32) (*v1alpha1.EtcdCluster, *corev1.Secret) {
	g.t.Helper()
	g.stores = s3StandIn(g)
	g.startOperator()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: g.ns}, StringData: map[string]string{"bucket": "b"}}
	if err := g.c.Create(g.t.Context(), sec); err != nil {
		g.t.Fatal(err)
	}
	c := cluster(name, size)
	c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{S3SecretName: "s3"}}
	g.create(c)
	return c, sec
}

// s3StandInStore is the part of bucket of s3StandIn holding cluster's
// backups.
func s3StandInStore(g *rig, bucket, cluster string) backup.Store {
	g.t.Helper()
	return g.clusterPart(filepath.Join(g.fsRoot, "s3", bucket), cluster)
}

// s3StandInBackups lists the backups of cluster in bucket of s3StandIn.
func s3StandInBackups(g *rig, bucket, cluster string) []backup.Manifest {
	g.t.Helper()
	list, err := backup.List(g.t.Context(), s3StandInStore(g, bucket, cluster))
	if err != nil {
		g.t.Fatal(err)
	}
	return list
}

// regardingRecorder records the kind and name each event regards, once
// per reason and object, and passes the event on.
type regardingRecorder struct {
	events.EventRecorder
	mu   sync.Mutex
	seen map[string][]string
}

func (r *regardingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string][]string{}
	}
	o, _ := meta.Accessor(regarding)
	id := regarding.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetName()
	if !slices.Contains(r.seen[reason], id) {
		r.seen[reason] = append(r.seen[reason], id)
	}
	r.mu.Unlock()
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r *regardingRecorder) regarding(reason string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[reason]
}

// finalBackups returns the final backups of cluster in its store.
func (g *rig) finalBackups(cluster string) []backup.Manifest {
	g.t.Helper()
	var final []backup.Manifest
	for _, m := range g.storedBackups(cluster) {
		if m.Snapshot.Extra[controller.ExtraTrigger] == controller.TriggerFinal {
			final = append(final, m)
		}
	}
	return final
}

// TestFinalBackupSurvivesRestart kills the operator at each step of a
// deleted cluster's final backup (status.backupOperation): the cluster
// goes with exactly one final backup, reported once, and it is taken again
// only when the attempt that was cut short took none.
func TestFinalBackupSurvivesRestart(t *testing.T) {
	for _, cut := range clusterCuts("f") {
		t.Run(cut.name, func(t *testing.T) {
			g := newRig(t)
			c := g.createBackedUp("f", 1, 0, 10)
			g.drain()
			if err := g.c.Delete(t.Context(), g.get("f")); err != nil {
				t.Fatal(err)
			}
			cut.at(g)
			if err := g.operationPass("f"); err != nil {
				t.Fatal(err)
			}
			if g.exists(c) {
				t.Fatalf("the cluster is still there: %+v", g.get("f").Status.BackupOperation)
			}
			var triggers []string
			for _, m := range g.storedBackups("f") {
				triggers = append(triggers, m.Snapshot.Extra[controller.ExtraTrigger])
			}
			var taken int
			for _, e := range g.drain() {
				if strings.Contains(e, controller.EventFinalBackupTaken) {
					taken++
				}
			}
			got := []any{triggers, g.snapshots(), taken}
			want := []any{[]string{controller.TriggerFinal}, 1, 1}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("backups stored by trigger, snapshots, FinalBackupTaken events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStoreCredentialsCopyGoesWithItsStore: the operator's copy of an S3
// store's Secret exists only while the cluster's final backup may need
// it: once spec.backup names another store, or none, it is deleted.
// Before, it stayed, holding credentials nothing used any more.
func TestStoreCredentialsCopyGoesWithItsStore(t *testing.T) {
	for _, tt := range []struct {
		name string
		to   *v1alpha1.BackupSpec
	}{
		{"no backup", nil},
		{"skipFinalBackup", &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{S3SecretName: "s3"}, SkipFinalBackup: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			_, sec := g.createS3Cluster("k", 1)
			g.converge("k", 20)
			key := client.ObjectKey{Namespace: g.ns, Name: controller.StoreCredentialsName("k")}
			if err := g.c.Get(t.Context(), key, &corev1.Secret{}); err != nil {
				t.Fatalf("the copy of the store's Secret: %v", err)
			}
			c := g.get("k")
			c.Spec.Backup = tt.to
			if err := g.c.Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				_ = g.pass("k")
			}
			if err := g.c.Get(t.Context(), key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("the copy after spec.backup changed: %v, want it deleted", err)
			}
			if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(sec), &corev1.Secret{}); err != nil {
				t.Errorf("the user's Secret: %v, want it kept", err)
			}
		})
	}
}
