package etcdmember

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/e2estatus"
)

// Names and values of the operator (examples/etcd/internal/controller,
// which this suite cannot import).
const (
	conditionComplete = "Complete"
	extraTrigger      = "etcd.opkit.dev/trigger"
	extraBackupUID    = "etcd.opkit.dev/etcdbackup-uid"
	extraClusterUID   = "etcd.opkit.dev/etcdcluster-uid"
	triggerOnDemand   = "on-demand"
	triggerFinal      = "final"
	peerPort          = 2380
)

const (
	// etcdVersion is the EtcdClusters' spec.version: the version of
	// bin/etcd, which the suite checks.
	etcdVersion = "3.6.16"
	// storeName is the PVC store of the backups, the directory
	// backupRoot/storeName.
	storeName    = "backups"
	sourceName   = "source"
	restoredName = "restored"
	// persistentName is the cluster whose member keeps its data on a
	// claim.
	persistentName = "persistent"
	backupName     = "source-backup"
	timeout        = 90 * time.Second
	pollEvery      = time.Second
)

// TestRealSeedMember runs EtcdClusters of size 1 whose seed member is a
// real etcd process: bootstrap to Ready with the member's real ID, never
// Degraded; an EtcdBackup of it in the PVC store; deletion with a final
// backup taken from it; a new cluster restored physically from the
// EtcdBackup (its seed's init containers run locally) with the keys
// written to the first one at the backup's revision; and that cluster's
// deletion with its own final backup; and a cluster with persistent
// storage whose only member pod is deleted: the pod is recreated on its
// claim and the member comes back with its ID and keys. The steps build
// on each other, in this order.
func TestRealSeedMember(t *testing.T) {
	suite := t
	var (
		ns               string
		source, restored *member
		// keys were written to the source cluster; rev is its etcd
		// revision after the writes, restoredRev the restored cluster's
		// after the restore.
		keys             map[string]string
		rev, restoredRev int64
	)

	f := features.New("EtcdCluster on a real etcd member").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := clientPort.reserve(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(clientPort.close)
			startOperator(ctx, t, cfg, "--client-url-template="+clientPort.url(), "--restore-image="+restoreImage)
			ns = envconf.RandomName("etcdm", 16)
			testkit.Must(t, cfg.Client().Resources().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			storeDir(t, ns)
			return ctx
		}).
		Assess("size 1: the seed pod runs real etcd, the cluster is Ready with its member", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			c := newCluster(ns, sourceName)
			degraded := watchDegraded(ctx, t, cfg, ns, sourceName)
			testkit.Must(t, r.Create(ctx, c))
			source = runPod(ctx, t, suite, r, ns, sourceName+"-0", clientPort)
			assertSeedIdentity(t, c, source)
			ec := source.client(t)
			assertReadyWithMember(ctx, t, r, c, source, ec)
			degraded.assertNeverDegraded(t)

			keys = map[string]string{}
			for i := range 20 {
				k, v := fmt.Sprintf("/e2e/key-%02d", i), fmt.Sprintf("value %d", i)
				resp, err := ec.Put(etcdCtx(t), k, v)
				if err != nil {
					t.Fatalf("writing %s to the member: %v", k, err)
				}
				keys[k] = v
				rev = resp.Header.Revision
			}
			if diff := cmp.Diff(keys, readKeys(t, ec)); diff != "" {
				t.Fatalf("keys read back from the member (-want +got):\n%s", diff)
			}
			return ctx
		}).
		Assess("an EtcdBackup snapshots the member into the PVC store", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			backUp(ctx, t, cfg, ns, sourceName, backupName, rev)
			return ctx
		}).
		Assess("deleting the cluster takes a final backup from the member, then releases it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			deleteWithFinalBackup(ctx, t, cfg, ns, sourceName, rev)
			// The next cluster's member takes over the client port.
			if err := source.stop(); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("a cluster restored physically from the EtcdBackup holds its keys and revision in its real member", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			// The seed mounts the backup claim, which must exist for the
			// pod to be scheduled.
			createBackupClaim(ctx, t, r, ns)
			c := newCluster(ns, restoredName)
			c.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: backupName}
			degraded := watchDegraded(ctx, t, cfg, ns, restoredName)
			testkit.Must(t, r.Create(ctx, c))
			restored = runPod(ctx, t, suite, r, ns, restoredName+"-0", clientPort)
			assertSeedIdentity(t, c, restored)
			if diff := cmp.Diff([]string{"fetch-backup", "restore", "finish-restore"}, restored.initContainers); diff != "" {
				t.Errorf("init containers run for the seed of %s (-want +got):\n%s", c.Name, diff)
			}
			ec := restored.client(t)
			assertReadyWithMember(ctx, t, r, c, restored, ec)
			degraded.assertNeverDegraded(t)
			if !c.Status.Restored {
				t.Errorf("EtcdCluster %s is Ready with status.restored false", c.Name)
			}
			if diff := cmp.Diff(keys, readKeys(t, ec)); diff != "" {
				t.Fatalf("keys in the restored member (-want +got):\n%s", diff)
			}

			resp, err := ec.Get(etcdCtx(t), "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatalf("reading the restored member's revision: %v", err)
			}
			restoredRev = resp.Header.Revision
			// A logical restore writes the keys anew and starts over at
			// revision 1: the backup's revision moved on by etcdutl's
			// --bump-revision shows the restore was physical.
			if restoredRev != rev+harness.EtcdRevisionBump {
				t.Errorf("revision of the restored member: %d, want the backup's %d + %d", restoredRev, rev, harness.EtcdRevisionBump)
			}
			return ctx
		}).
		Assess("deleting the restored cluster takes a final backup from its member", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			deleteWithFinalBackup(ctx, t, cfg, ns, restoredName, restoredRev)
			if err := restored.stop(); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("size 1 with persistent storage: its deleted pod is recreated on its claim, the same member with its keys", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			seed := persistentName + "-0"
			claim := seed + "-data"
			createDataVolume(ctx, t, r, ns, claim)
			c := newCluster(ns, persistentName)
			c.Spec.Storage = v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To("")}
			c.Spec.Backup = nil // deleted with the namespace, without a final backup
			testkit.Must(t, r.Create(ctx, c))
			first := runPod(ctx, t, suite, r, ns, seed, clientPort)
			if first.claim != claim {
				t.Fatalf("pod %s: data on claim %q, want %q", seed, first.claim, claim)
			}
			ec := first.client(t)
			assertReadyWithMember(ctx, t, r, c, first, ec)
			id := c.Status.Members[0].ID
			want := map[string]string{}
			for i := range 10 {
				k, v := fmt.Sprintf("/persistent/key-%02d", i), fmt.Sprintf("value %d", i)
				if _, err := ec.Put(etcdCtx(t), k, v); err != nil {
					t.Fatalf("writing %s: %v", k, err)
				}
				want[k] = v
			}
			var pod corev1.Pod
			testkit.Must(t, r.Get(ctx, seed, ns, &pod))

			// kubectl delete pod: the kubelet stops the container, the
			// pod goes; nothing answers the operator any more.
			if err := first.stop(); err != nil {
				t.Fatal(err)
			}
			testkit.Must(t, r.Delete(ctx, &pod, resources.WithGracePeriod(0)))
			waitFor(ctx, t, "pod "+seed+" recreated", func(ctx context.Context) (bool, string) {
				var now corev1.Pod
				if err := r.Get(ctx, seed, ns, &now); err != nil {
					return false, err.Error()
				}
				return now.UID != pod.UID && now.DeletionTimestamp == nil, "still the deleted pod"
			})
			// The status no longer shows the member as it was, so that
			// Ready below is the recreated member's.
			waitFor(ctx, t, persistentName+" not Ready without its member", func(ctx context.Context) (bool, string) {
				if err := r.Get(ctx, persistentName, ns, c); err != nil {
					return false, err.Error()
				}
				return !statusutil.IsTrue(c, statusutil.ConditionReady), fmt.Sprintf("Ready %+v", statusutil.Get(c, statusutil.ConditionReady))
			})
			second := runPod(ctx, t, suite, r, ns, seed, clientPort)
			if second.claim != claim || second.dataDir != first.dataDir {
				t.Fatalf("recreated pod %s: data on claim %q (%s), want %q (%s)", seed, second.claim, second.dataDir, claim, first.dataDir)
			}
			if got := second.identity["initial-cluster-state"]; got != "existing" {
				t.Errorf("recreated pod %s: --initial-cluster-state=%s, want existing", seed, got)
			}
			ec = second.client(t)
			assertReadyWithMember(ctx, t, r, c, second, ec)
			if got := c.Status.Members[0].ID; got != id {
				t.Errorf("member ID after the pod was recreated: %s, want the same member %s", got, id)
			}
			got := map[string]string{}
			for k, v := range readKeys(t, ec) {
				if strings.HasPrefix(k, "/persistent/") {
					got[k] = v
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("keys after the pod was recreated (-want +got):\n%s", diff)
			}
			if err := second.stop(); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			deleteNamespace(ctx, cfg, ns)
			return ctx
		}).Feature()

	testEnv.Test(t, f)
}

// createDataVolume creates a persistent volume bound in advance to the
// data claim claim of ns, which the operator creates (kwok has no volume
// provisioner), so that the member pod mounting it can be scheduled; the
// volume is removed when t ends. Its contents are never read: the
// stand-in kubelet maps the claim to a local directory (runPod).
func createDataVolume(ctx context.Context, t *testing.T, r *resources.Resources, ns, claim string) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/" + claim}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
		},
	}
	testkit.Must(t, r.Create(ctx, pv))
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), pv) })
}

// deleteNamespace deletes namespace ns after setting skipFinalBackup on
// the EtcdClusters a failed step left there, which would otherwise hold
// the namespace for their final backups.
func deleteNamespace(ctx context.Context, cfg *envconf.Config, ns string) {
	r := cfg.Client().Resources()
	var list v1alpha1.EtcdClusterList
	if err := r.WithNamespace(ns).List(ctx, &list); err == nil {
		for i := range list.Items {
			c := &list.Items[i]
			if c.Spec.Backup != nil {
				c.Spec.Backup.SkipFinalBackup = true
				_ = r.Update(ctx, c)
			}
		}
	}
	_ = r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
}

// newCluster returns an EtcdCluster of size 1 at etcdVersion, with its
// data in an emptyDir (kwok has no volume provisioner) and its backups in
// the PVC store.
func newCluster(ns, name string) *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Size: 1, Version: etcdVersion,
			Storage: v1alpha1.StorageSpec{Ephemeral: true},
			Backup:  &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: storeName}}},
	}
}

// peerURL is the peer URL the operator gives member of cluster c: its pod
// DNS name on the cluster's headless Service.
func peerURL(c *v1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:%d", member, c.Name, c.Namespace, peerPort)
}

// assertSeedIdentity checks the identity flags of the seed pod of the new
// cluster c: a one-member cluster, state new, token the cluster's UID.
func assertSeedIdentity(t *testing.T, c *v1alpha1.EtcdCluster, m *member) {
	t.Helper()
	seed := c.Name + "-0"
	want := map[string]string{
		"name":                        seed,
		"initial-cluster":             seed + "=" + peerURL(c, seed),
		"initial-cluster-state":       "new",
		"initial-cluster-token":       string(c.UID),
		"initial-advertise-peer-urls": peerURL(c, seed),
	}
	if diff := cmp.Diff(want, m.identity); diff != "" {
		t.Errorf("etcd identity in the seed pod of %s (-want +got):\n%s", c.Name, diff)
	}
}

// assertReadyWithMember waits until c is Ready for its generation and
// checks that its status holds the one real member m, healthy and leader,
// with the ID etcd reports through ec; that it is Available and not
// Degraded; and that bin/etcd runs spec.version. c receives the last state
// read.
func assertReadyWithMember(ctx context.Context, t *testing.T, r *resources.Resources, c *v1alpha1.EtcdCluster, m *member, ec *clientv3.Client) {
	t.Helper()
	e2estatus.WaitForCondition(t, r, c, statusutil.ConditionReady, metav1.ConditionTrue,
		wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(pollEvery))

	list, err := ec.MemberList(etcdCtx(t))
	if err != nil {
		t.Fatalf("listing the real members: %v", err)
	}
	if len(list.Members) != 1 {
		t.Fatalf("real etcd has %d members, want 1: %+v", len(list.Members), list.Members)
	}
	st, err := ec.Status(etcdCtx(t), m.port.url())
	if err != nil {
		t.Fatalf("status of the real member: %v", err)
	}
	if st.Version != etcdVersion {
		t.Fatalf("bin/etcd runs %s, the suite's EtcdClusters ask for %s: update etcdVersion", st.Version, etcdVersion)
	}
	seed := c.Name + "-0"
	want := []v1alpha1.MemberStatus{{Name: seed, ID: strconv.FormatUint(list.Members[0].ID, 16),
		PeerURL: peerURL(c, seed), Healthy: true, Leader: true, Version: etcdVersion}}
	if diff := cmp.Diff(want, c.Status.Members); diff != "" {
		t.Errorf("status.members of %s against the real member (-want +got):\n%s", c.Name, diff)
	}
	if c.Status.ReadyMembers != 1 {
		t.Errorf("status.readyMembers of %s = %d, want 1", c.Name, c.Status.ReadyMembers)
	}
	for typ, want := range map[string]metav1.ConditionStatus{
		v1alpha1.ConditionAvailable: metav1.ConditionTrue,
		v1alpha1.ConditionDegraded:  metav1.ConditionFalse,
	} {
		if got := statusutil.Get(c, typ); got == nil || got.Status != want {
			t.Errorf("%s of Ready EtcdCluster %s = %+v, want status %s", typ, c.Name, got, want)
		}
	}
}

// etcdCtx returns a context for one etcd call, ending with t.
func etcdCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readKeys returns every key and value in the member.
func readKeys(t *testing.T, ec *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := ec.Get(etcdCtx(t), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the member's keys: %v", err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got
}

// backUp creates EtcdBackup ns/name of cluster, whose real member is at
// revision rev, waits until it is Complete and checks it: Succeeded, the
// only backup of the cluster in the PVC store, its status matching the
// manifest and the member's revision and version, the manifest recording
// the trigger, the EtcdBackup's UID and the cluster's UID (by which a
// cluster that lost every member finds its own backups), and the files
// intact on disk.
func backUp(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster, name string, rev int64) {
	t.Helper()
	r := cfg.Client().Resources()
	b := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: cluster, StoreRef: v1alpha1.StoreReference{PVCName: storeName}}}
	testkit.Must(t, r.Create(ctx, b))
	e2estatus.WaitForCondition(t, r, b, conditionComplete, metav1.ConditionTrue,
		wait.WithContext(ctx), wait.WithTimeout(timeout), wait.WithInterval(pollEvery))
	if b.Status.Phase != v1alpha1.BackupSucceeded {
		t.Fatalf("EtcdBackup %s is Complete in phase %q, want %q", b.Name, b.Status.Phase, v1alpha1.BackupSucceeded)
	}

	list := listBackups(ctx, t, ns, cluster)
	if len(list) != 1 {
		t.Fatalf("backups of %s in the store: %d, want the EtcdBackup's only: %+v", cluster, len(list), list)
	}
	m := list[0]
	want := backupStatus{ID: m.ID, Location: "pvc:" + storeName + "/" + ns + "/" + cluster + "/" + m.DataKey,
		Size: m.Size, SHA256: m.SHA256, Revision: rev, EtcdVersion: etcdVersion}
	got := backupStatus{ID: b.Status.BackupID, Location: b.Status.Location, Size: b.Status.SizeBytes,
		SHA256: b.Status.SHA256, Revision: b.Status.Revision, EtcdVersion: b.Status.EtcdVersion}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EtcdBackup status against its manifest and the member's revision (-want +got):\n%s", diff)
	}
	c := &v1alpha1.EtcdCluster{}
	testkit.Must(t, r.Get(ctx, cluster, ns, c))
	wantExtra := map[string]string{extraTrigger: triggerOnDemand, extraBackupUID: string(b.UID), extraClusterUID: string(c.UID)}
	if diff := cmp.Diff(wantExtra, m.Snapshot.Extra); diff != "" {
		t.Errorf("manifest snapshot extra (-want +got):\n%s", diff)
	}
	assertOnDisk(ctx, t, ns, cluster, m)
}

// backupStatus is the part of an EtcdBackup's status that describes the
// backup.
type backupStatus struct {
	ID, Location, SHA256, EtcdVersion string
	Size, Revision                    int64
}

// clusterStore opens the part of the PVC store holding cluster ns/name's
// backups, as the operator does.
func clusterStore(t *testing.T, ns, name string) backup.Store {
	t.Helper()
	st, err := fsstore.New(storeDir(t, ns))
	if err != nil {
		t.Fatalf("opening the PVC store: %v", err)
	}
	sub, err := backup.Sub(st, ns+"/"+name)
	if err != nil {
		t.Fatalf("opening the store of %s: %v", name, err)
	}
	return sub
}

// listBackups returns the complete backups of cluster ns/name, newest
// first.
func listBackups(ctx context.Context, t *testing.T, ns, name string) []backup.Manifest {
	t.Helper()
	list, err := backup.List(ctx, clusterStore(t, ns, name))
	if err != nil {
		t.Fatalf("listing the backups of %s: %v", name, err)
	}
	return list
}

// assertOnDisk checks backup m of cluster ns/name as files under the
// backup root: the manifest file holds m, the data file has its size and
// SHA-256, and backup.Verify reads it back intact.
func assertOnDisk(ctx context.Context, t *testing.T, ns, name string, m backup.Manifest) {
	t.Helper()
	dir := filepath.Join(storeDir(t, ns), ns, name)
	raw, err := os.ReadFile(filepath.Join(dir, backup.ManifestKeyFor(m.ID)))
	if err != nil {
		t.Fatalf("reading the manifest file: %v", err)
	}
	var onDisk backup.Manifest
	if err := json.Unmarshal(raw, &onDisk); err != nil {
		t.Fatalf("decoding the manifest file: %v", err)
	}
	if diff := cmp.Diff(m, onDisk); diff != "" {
		t.Errorf("manifest file against backup.List (-list +file):\n%s", diff)
	}
	size, sum, err := hashFile(filepath.Join(dir, m.DataKey))
	if err != nil {
		t.Fatalf("reading the data file: %v", err)
	}
	if size != m.Size || sum != m.SHA256 {
		t.Errorf("data file %s: %d bytes, sha256 %s; manifest: %d bytes, sha256 %s", m.DataKey, size, sum, m.Size, m.SHA256)
	}
	if _, err := backup.Verify(ctx, clusterStore(t, ns, name), m.ID); err != nil {
		t.Errorf("backup.Verify(%s): %v", m.ID, err)
	}
}

// hashFile returns the size and hex SHA-256 of the file at path.
func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("reading %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// deleteWithFinalBackup deletes EtcdCluster ns/name, whose real member is
// at revision rev, and waits for it to be gone. When the watch reports it
// deleted, the store must already hold exactly one new backup: a final
// backup started after deletion began, at rev, from an etcdVersion member,
// intact on disk.
func deleteWithFinalBackup(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string, rev int64) {
	t.Helper()
	r := cfg.Client().Resources()
	c := &v1alpha1.EtcdCluster{}
	testkit.Must(t, r.Get(ctx, name, ns, c))
	if len(c.Finalizers) == 0 {
		t.Fatalf("EtcdCluster %s has no finalizer before deletion: nothing would take its final backup", name)
	}
	before := map[string]bool{}
	for _, m := range listBackups(ctx, t, ns, name) {
		before[m.ID] = true
	}

	wc, err := client.NewWithWatch(cfg.Client().RESTConfig(), client.Options{Scheme: r.GetScheme()})
	testkit.Must(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.EtcdClusterList{}, client.InNamespace(ns),
		client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: c.ResourceVersion}})
	testkit.Must(t, err)
	defer w.Stop()
	testkit.Must(t, r.Delete(ctx, c))

	deleted := waitDeleted(t, w, name)
	// The finalizer has been released: the final backup must be there.
	var added []backup.Manifest
	for _, m := range listBackups(ctx, t, ns, name) {
		if !before[m.ID] {
			added = append(added, m)
		}
	}
	if len(added) != 1 {
		t.Fatalf("new backups of %s when it was deleted: %d, want one final backup: %+v", name, len(added), added)
	}
	m := added[0]
	if got := m.Snapshot.Extra[extraTrigger]; got != triggerFinal {
		t.Errorf("final backup %s: trigger %q, want %q", m.ID, got, triggerFinal)
	}
	if got := m.Snapshot.ConsistencyPoint; got != strconv.FormatInt(rev, 10) {
		t.Errorf("final backup %s: revision %s, want the member's %d", m.ID, got, rev)
	}
	if m.Snapshot.EngineVersion != etcdVersion {
		t.Errorf("final backup %s: etcd version %q, want %q", m.ID, m.Snapshot.EngineVersion, etcdVersion)
	}
	if dt := deleted.DeletionTimestamp; dt == nil || m.StartTime.Before(dt.Time) {
		t.Errorf("final backup %s started at %s, before deletion began at %v", m.ID, m.StartTime, dt)
	}
	assertOnDisk(ctx, t, ns, name, m)
	if err := r.Get(ctx, name, ns, &v1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("getting EtcdCluster %s after its deletion: %v, want not found", name, err)
	}
}

// waitDeleted waits for the watch to report EtcdCluster name deleted and
// returns its last state.
func waitDeleted(t *testing.T, w watch.Interface, name string) *v1alpha1.EtcdCluster {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var last string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of EtcdCluster %s ended before it was deleted; last seen: %s", name, last)
			}
			c, isCluster := ev.Object.(*v1alpha1.EtcdCluster)
			if !isCluster || c.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				return c
			}
			last = fmt.Sprintf("%s, finalizers %v, conditions %+v", ev.Type, c.Finalizers, c.Status.Conditions)
		case <-timer.C:
			t.Fatalf("EtcdCluster %s not deleted within %s; last seen: %s\noperator log (end):\n%s", name, timeout, last, operator.Log())
		}
	}
}

// waitFor polls check until it reports true, failing the test with what
// and check's last note after the timeout.
func waitFor(ctx context.Context, t *testing.T, what string, check func(context.Context) (bool, string)) {
	t.Helper()
	harness.WaitFor(ctx, t, what, timeout, pollEvery, check)
}

// degradedWatch records the Degraded conditions of one EtcdCluster as
// "<status> <reason>", each time it changes.
type degradedWatch struct {
	name string
	mu   sync.Mutex
	seen []string
}

// watchDegraded starts recording the Degraded conditions of EtcdCluster
// ns/name from a watch, so that no state is missed however briefly it
// lasts. Call it before the cluster is created; the watch ends with t.
func watchDegraded(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) *degradedWatch {
	t.Helper()
	r := cfg.Client().Resources()
	wc, err := client.NewWithWatch(cfg.Client().RESTConfig(), client.Options{Scheme: r.GetScheme()})
	testkit.Must(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.EtcdClusterList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	testkit.Must(t, err)
	t.Cleanup(w.Stop)
	d := &degradedWatch{name: name}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*v1alpha1.EtcdCluster)
			if !ok {
				continue
			}
			if cc := statusutil.Get(c, v1alpha1.ConditionDegraded); cc != nil {
				d.record(string(cc.Status) + " " + cc.Reason)
			}
		}
	}()
	return d
}

// record appends s unless it is the last state seen.
func (d *degradedWatch) record(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) == 0 || d.seen[len(d.seen)-1] != s {
		d.seen = append(d.seen, s)
	}
}

// assertNeverDegraded checks the Degraded conditions written so far: False
// with reason Bootstrapping while the seed starts, then False with reason
// MembersHealthy, and never True.
func (d *degradedWatch) assertNeverDegraded(t *testing.T) {
	t.Helper()
	// The Ready state was read through another connection than the
	// watch's: wait until the watch has seen it too.
	want := []string{"False Bootstrapping", "False MembersHealthy"}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		d.mu.Lock()
		got = slices.Clone(d.seen)
		d.mu.Unlock()
		if len(got) > 0 && got[len(got)-1] == want[len(want)-1] {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Degraded conditions of %s written from creation to Ready (-want +got):\n%s", d.name, diff)
	}
}

// createBackupClaim creates the claim storeName in ns, bound to a
// persistent volume of its own (removed when t ends), so that the seed pod
// of a physical restore, which mounts the PVC store's claim, can be
// scheduled. Its contents are never read: the stand-in kubelet maps the
// mount to the store's directory under the operator's backup root.
func createBackupClaim(ctx context.Context, t *testing.T, r *resources.Resources, ns string) {
	t.Helper()
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + storeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/backups"}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: storeName},
		},
	}
	testkit.Must(t, r.Create(ctx, pv))
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), pv) })
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: storeName, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	testkit.Must(t, r.Create(ctx, pvc))
	waitFor(ctx, t, "claim "+storeName+" bound", func(ctx context.Context) (bool, string) {
		if err := r.Get(ctx, storeName, ns, pvc); err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound, "phase " + string(pvc.Status.Phase)
	})
}
