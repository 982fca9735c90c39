package etcd

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
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
)

// Condition reasons of the operator (examples/etcd/internal/controller,
// which this suite cannot import).
const (
	reasonFinalBackup      = "FinalBackupFailed"
	reasonBootstrapping    = "Bootstrapping"
	reasonBootstrapTimeout = "BootstrapTimeout"
	// reasonFinalBackupBlocked is also the reason of the Warning event on
	// the Namespace.
	reasonFinalBackupBlocked = "FinalBackupBlocked"
)

const (
	clusterName = "e2e"
	timeout     = 3 * time.Minute
	pollEvery   = time.Second
)

// cond is the part of a condition the suite asserts.
type cond struct {
	Status metav1.ConditionStatus
	Reason string
}

// TestClusterKubernetesSide creates an EtcdCluster of size 3 whose members
// cannot be reached, scales it 3 -> 5 -> 3 and deletes it.
func TestClusterKubernetesSide(t *testing.T) {
	var ns, class string
	key := func() *v1alpha1.EtcdCluster {
		return &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns}}
	}

	f := features.New("etcd cluster, Kubernetes side").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			ns = envconf.RandomName("etcd", 16)
			testkit.Must(t, r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			// The PVC store "backups" of ns, as mounting a claim into the
			// operator at <backup root>/<ns>/backups would make it.
			testkit.Must(t, os.MkdirAll(filepath.Join(backupRoot, ns, "backups"), 0o700))
			// kwok has no provisioner: a class without one and a
			// pre-made volume for the seed member's claim.
			class = ns + "-static"
			testkit.Must(t, r.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class},
				Provisioner:       "kubernetes.io/no-provisioner",
				VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}))
			testkit.Must(t, r.Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: ns + "-0"},
				Spec: corev1.PersistentVolumeSpec{
					StorageClassName:              class,
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/" + ns}},
				}}))
			return ctx
		}).
		Assess("size 3: seed member, claim, services and PDB; Bootstrapping, then BootstrapTimeout", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			degraded := watchDegraded(ctx, t, cfg, ns, clusterName)
			c := key()
			c.Spec = v1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16",
				Storage: v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: &class},
				Backup:  &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}
			testkit.Must(t, r.Create(ctx, c))

			waitFor(ctx, t, "pod e2e-0 Running", func(ctx context.Context) (bool, string) {
				var p corev1.Pod
				if err := r.Get(ctx, clusterName+"-0", ns, &p); err != nil {
					return false, err.Error()
				}
				return p.Status.Phase == corev1.PodRunning, "phase " + string(p.Status.Phase)
			})
			var claim corev1.PersistentVolumeClaim
			testkit.Must(t, r.Get(ctx, clusterName+"-0-data", ns, &claim))
			if claim.Status.Phase != corev1.ClaimBound {
				t.Errorf("claim %s is %s, want Bound", claim.Name, claim.Status.Phase)
			}
			if ref := metav1.GetControllerOf(&claim); ref == nil || ref.Name != clusterName {
				t.Errorf("claim controller = %v, want the EtcdCluster", ref)
			}
			for _, svc := range []string{clusterName, clusterName + "-client"} {
				testkit.Must(t, r.Get(ctx, svc, ns, &corev1.Service{}))
			}
			// The budget counts etcd's voting members, not spec.size: none
			// has answered yet.
			waitPDB(ctx, t, r, ns, 1)
			waitBootstrapTimeout(ctx, t, r, key())
			// Every Degraded condition the operator wrote, in order: never
			// Degraded before the timeout, whatever the seed pod's phase.
			want := []string{"False " + reasonBootstrapping, "True " + reasonBootstrapTimeout}
			// The GET above may see the status before the watch
			// delivers it (CI run of 2026-12-06 under load).
			waitFor(ctx, t, "the watch to deliver Degraded True "+reasonBootstrapTimeout, func(context.Context) (bool, string) {
				seen := degraded.seen()
				return len(seen) > 0 && seen[len(seen)-1] == want[len(want)-1], fmt.Sprint(seen)
			})
			if diff := cmp.Diff(want, degraded.seen()); diff != "" {
				t.Errorf("Degraded conditions written (-want +got):\n%s", diff)
			}
			assertOnlySeed(ctx, t, r, ns)
			return ctx
		}).
		Assess("scale 3 -> 5 -> 3: the PDB stays with etcd's members, no unreachable member is added", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			for _, size := range []int32{5, 3} {
				updateSpec(ctx, t, r, ns, func(s *v1alpha1.EtcdClusterSpec) { s.Size = size })
				waitBootstrapTimeout(ctx, t, r, key())
				waitPDB(ctx, t, r, ns, 1)
				assertOnlySeed(ctx, t, r, ns)
			}
			return ctx
		}).
		Assess("deletion waits for the final backup until it is skipped, then removes the children", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			testkit.Must(t, r.Delete(ctx, key()))
			waitFor(ctx, t, "Reconciling=True FinalBackupFailed", func(ctx context.Context) (bool, string) {
				c := key()
				if err := r.Get(ctx, c.Name, ns, c); err != nil {
					return false, err.Error()
				}
				got := statusutil.Get(c, statusutil.ConditionReconciling)
				return c.DeletionTimestamp != nil && got != nil && got.Status == metav1.ConditionTrue &&
					got.Reason == reasonFinalBackup, fmt.Sprintf("%+v", got)
			})
			// The members are kept while deletion waits.
			assertOnlySeed(ctx, t, r, ns)

			updateSpec(ctx, t, r, ns, func(s *v1alpha1.EtcdClusterSpec) { s.Backup.SkipFinalBackup = true })
			gone := []struct {
				obj  k8s.Object
				name string
			}{
				{key(), clusterName},
				{&corev1.Pod{}, clusterName + "-0"},
				{&corev1.PersistentVolumeClaim{}, clusterName + "-0-data"},
				{&corev1.Service{}, clusterName},
				{&corev1.Service{}, clusterName + "-client"},
				{&policyv1.PodDisruptionBudget{}, clusterName},
			}
			for _, g := range gone {
				waitFor(ctx, t, fmt.Sprintf("%T %s deleted", g.obj, g.name), func(ctx context.Context) (bool, string) {
					err := r.Get(ctx, g.name, ns, g.obj)
					return apierrors.IsNotFound(err), fmt.Sprint(err)
				})
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if t.Failed() {
				t.Logf("operator log (end):\n%s", operator.Log())
			}
			r := cfg.Client().Resources()
			_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			_ = r.Delete(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: ns + "-0"}})
			_ = r.Delete(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}})
			return ctx
		}).Feature()

	testEnv.Test(t, f)
	if exited, err := operator.Exited(); exited {
		t.Errorf("the operator exited during the test: %v\n%s", err, operator.Log())
	}
}

// waitFor polls check until it reports true, failing the test with what
// and check's last note after the timeout.
func waitFor(ctx context.Context, t *testing.T, what string, check func(context.Context) (bool, string)) {
	t.Helper()
	harness.WaitFor(ctx, t, what, timeout, pollEvery, check)
}

// waitPDB waits until the cluster's PDB keeps minAvailable members.
func waitPDB(ctx context.Context, t *testing.T, r *resources.Resources, ns string, minAvailable int) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("PDB minAvailable %d", minAvailable), func(ctx context.Context) (bool, string) {
		var pdb policyv1.PodDisruptionBudget
		if err := r.Get(ctx, clusterName, ns, &pdb); err != nil {
			return false, err.Error()
		}
		if pdb.Spec.MinAvailable == nil {
			return false, "no minAvailable"
		}
		return pdb.Spec.MinAvailable.IntValue() == minAvailable, pdb.Spec.MinAvailable.String()
	})
}

// waitBootstrapTimeout waits until the cluster reports, for its current
// generation, that its seed member has not answered within the bootstrap
// timeout: Degraded and Progressing True with reason BootstrapTimeout,
// Available and Ready False, and a Degraded message naming the seed, the
// timeout and the endpoint dialed.
func waitBootstrapTimeout(ctx context.Context, t *testing.T, r *resources.Resources, c *v1alpha1.EtcdCluster) {
	t.Helper()
	want := map[string]cond{
		v1alpha1.ConditionDegraded:    {metav1.ConditionTrue, reasonBootstrapTimeout},
		v1alpha1.ConditionProgressing: {metav1.ConditionTrue, reasonBootstrapTimeout},
		v1alpha1.ConditionAvailable:   {metav1.ConditionFalse, "NoQuorum"},
		statusutil.ConditionReady:     {metav1.ConditionFalse, ""},
	}
	waitFor(ctx, t, "conditions of a seed member past the bootstrap timeout", func(ctx context.Context) (bool, string) {
		if err := r.Get(ctx, c.Name, c.Namespace, c); err != nil {
			return false, err.Error()
		}
		got := map[string]cond{}
		for typ, w := range want {
			if cc := statusutil.Get(c, typ); cc != nil {
				got[typ] = cond{cc.Status, cc.Reason}
				if w.Reason == "" {
					got[typ] = cond{cc.Status, ""}
				}
			}
		}
		if c.Status.ObservedGeneration != c.Generation {
			return false, fmt.Sprintf("observedGeneration %d, generation %d", c.Status.ObservedGeneration, c.Generation)
		}
		diff := cmp.Diff(want, got)
		return diff == "", "(-want +got)\n" + diff
	})
	msg := statusutil.Get(c, v1alpha1.ConditionDegraded).Message
	for _, w := range []string{clusterName + "-0", bootstrapTimeout.String(), "dialed http://" + refuser.Addr().String()} {
		if !strings.Contains(msg, w) {
			t.Errorf("Degraded message %q does not mention %q", msg, w)
		}
	}
}

// degradedWatch records the Degraded conditions an EtcdCluster carries,
// as "<status> <reason>", each time it changes.
type degradedWatch struct {
	mu  sync.Mutex
	got []string
}

func (d *degradedWatch) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// watchDegraded starts recording the Degraded conditions of EtcdCluster
// ns/name from a watch, so that no state is missed however briefly it
// lasts. Call it before the cluster is created; the watch ends with the
// test.
func watchDegraded(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) *degradedWatch {
	t.Helper()
	wc, err := client.NewWithWatch(cfg.Client().RESTConfig(), client.Options{Scheme: cfg.Client().Resources().GetScheme()})
	testkit.Must(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.EtcdClusterList{}, client.InNamespace(ns))
	testkit.Must(t, err)
	t.Cleanup(w.Stop)
	d := &degradedWatch{}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*v1alpha1.EtcdCluster)
			if !ok || c.Name != name {
				continue
			}
			cc := statusutil.Get(c, v1alpha1.ConditionDegraded)
			if cc == nil {
				continue
			}
			s := string(cc.Status) + " " + cc.Reason
			d.mu.Lock()
			if len(d.got) == 0 || d.got[len(d.got)-1] != s {
				d.got = append(d.got, s)
			}
			d.mu.Unlock()
		}
	}()
	return d
}

// assertOnlySeed checks that the seed member is the cluster's only pod and
// claim: the operator adds no member while none answers.
func assertOnlySeed(ctx context.Context, t *testing.T, r *resources.Resources, ns string) {
	t.Helper()
	var pods corev1.PodList
	testkit.Must(t, r.List(ctx, &pods))
	var claims corev1.PersistentVolumeClaimList
	testkit.Must(t, r.List(ctx, &claims))
	var got []string
	for _, p := range pods.Items {
		if p.Namespace == ns {
			got = append(got, "pod/"+p.Name)
		}
	}
	for _, c := range claims.Items {
		if c.Namespace == ns {
			got = append(got, "claim/"+c.Name)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"claim/" + clusterName + "-0-data", "pod/" + clusterName + "-0"}, got); diff != "" {
		t.Errorf("pods and claims (-want +got):\n%s", diff)
	}
}

// updateSpec changes the EtcdCluster's spec, retrying on conflicts.
func updateSpec(ctx context.Context, t *testing.T, r *resources.Resources, ns string, change func(*v1alpha1.EtcdClusterSpec)) {
	t.Helper()
	err := wait.For(func(ctx context.Context) (bool, error) {
		c := &v1alpha1.EtcdCluster{}
		if err := r.Get(ctx, clusterName, ns, c); err != nil {
			return false, err
		}
		change(&c.Spec)
		err := r.Update(ctx, c)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	}, wait.WithContext(ctx), wait.WithTimeout(30*time.Second), wait.WithInterval(pollEvery))
	if err != nil {
		t.Fatalf("updating the EtcdCluster: %v", err)
	}
}
