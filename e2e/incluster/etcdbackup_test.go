package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/s3"
	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/repo"
)

// The names the etcd operator's config/samples use, and what a backup's
// manifest records of its trigger (Snapshot.Extra).
const (
	sampleCluster, sampleRestored, sampleBackup = "demo", "demo-restored", "demo-manual"
	sampleStore                                 = "etcd-backup-s3"
	extraTrigger                                = "etcd.opkit.dev/trigger"
)

// etcdBackups runs the etcd operator's samples as written
// (config/samples), on real nodes: the S3 store they name (versitygw in a
// pod), a cluster taking scheduled backups that keeps the newest
// spec.backup.retention, an on-demand EtcdBackup with the operator killed
// in its course, one into S3 and one into a claim mounted into the operator (which rolls the operator's Deployment),
// a new cluster physically restored from the S3 backup (init containers
// running the operator's image) holding exactly the keys and revision of
// the backup, a cluster that lost every member rebuilding itself from its
// newest backup, and the final backup taken when the cluster is deleted,
// in the foreground, in the background or with its namespace.
func etcdBackups(op operator) features.Feature {
	const ns = "default"
	// A claim in the operator's namespace mounted at
	// <--backup-root>/<ns>/<claim>, for the EtcdBackups of ns with
	// storeRef.pvcName <claim>.
	const backupClaim = "etcd-backups"
	// A namespace deleted with its cluster, whose final backup goes to a
	// claim of the operator's namespace.
	const doomedNS, doomedClaim, doomed = "etcd-doomed", "etcd-backups-doomed", "doomed"
	var (
		cli      *clientv3.Client // to the sample cluster
		store    backup.Store     // the sample cluster's part of the S3 store
		want     keyspace         // what the on-demand backup must hold
		samples  string
		recorded []string // scheduled backup IDs seen in status, oldest first
	)
	apply := func(ctx context.Context, t *testing.T, cfg *envconf.Config, file string) {
		t.Helper()
		if out, err := harness.Kubectl(ctx, cfg, "apply", "-n", ns, "-f", filepath.Join(samples, file)); err != nil {
			t.Fatalf("kubectl apply -f config/samples/%s: %v\n%s", file, err, out)
		}
	}

	return features.New("etcd backups of the samples").
		Assess("the sample S3 store serves its bucket", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			root, err := repo.Root()
			if err != nil {
				t.Fatal(err)
			}
			samples = filepath.Join(root, "examples", "etcd", "config", "samples")
			apply(ctx, t, cfg, "s3-store.yaml")
			cond := conditions.New(cfg.Client().Resources())
			if err := wait.For(cond.DeploymentAvailable(sampleStore, ns), wait.WithContext(ctx), wait.WithTimeout(2*time.Minute)); err != nil {
				t.Fatalf("the S3 store is not Available: %v; pods: %s", err, harness.DescribePods(ctx, cfg, ns))
			}
			store = openSampleStore(ctx, t, cfg, ns, sampleCluster)
			return ctx
		}).
		Assess("the sample cluster takes scheduled backups and keeps the newest spec.backup.retention", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			apply(ctx, t, cfg, "etcdcluster.yaml")
			// The sample backs up daily; every 10 s shows retention at work.
			const retention = 2
			patch := fmt.Sprintf(`{"spec":{"backup":{"schedule":"@every 10s","retention":%d}}}`, retention)
			if out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", sampleCluster, "-n", ns, "--type=merge", "-p", patch); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, sampleCluster)
			cli = harness.EtcdClient(ctx, t, cfg, ns, sampleCluster)
			writeSampleData(ctx, t, cli)
			harness.WaitFor(ctx, t, "four scheduled backups", 3*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				id := getEtcdCluster(ctx, t, cfg, ns, sampleCluster).Status.Backup.LastBackupID
				if id != "" && !slices.Contains(recorded, id) {
					recorded = append(recorded, id)
				}
				return len(recorded) >= 4, fmt.Sprint(recorded)
			})
			// Stop the schedule, then count: the pass that took the last
			// backup pruned before the operator saw the new generation.
			if out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", sampleCluster, "-n", ns, "--type=merge", "-p", `{"spec":{"backup":{"schedule":""}}}`); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "the operator to act on the unscheduled spec", time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				c := getEtcdCluster(ctx, t, cfg, ns, sampleCluster)
				return c.Status.ObservedGeneration == c.Generation, fmt.Sprintf("observed %d of %d", c.Status.ObservedGeneration, c.Generation)
			})
			scheduled := backupsBy(ctx, t, store, "scheduled")
			var ids []string
			for _, m := range scheduled {
				ids = append(ids, m.ID)
			}
			// IDs sort by start time: the store keeps the newest two.
			slices.Sort(ids)
			if len(ids) != retention || ids[len(ids)-1] < recorded[len(recorded)-1] {
				t.Errorf("scheduled backups in the store: %v; want the newest %d of those taken (%v and any later)", ids, retention, recorded)
			}
			for _, id := range recorded[:len(recorded)-retention] {
				if slices.Contains(ids, id) {
					t.Errorf("scheduled backup %s is still in the store; retention %d keeps only the newest", id, retention)
				}
			}
			return ctx
		}).
		Assess("an on-demand EtcdBackup with the operator killed once its attempt is recorded is taken once", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			operatorDisruption.Lock()
			defer operatorDisruption.Unlock()
			b := &v1alpha1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{Name: "demo-killed", Namespace: ns},
				Spec:       v1alpha1.EtcdBackupSpec{ClusterName: sampleCluster, StoreRef: v1alpha1.StoreReference{S3SecretName: sampleStore}},
			}
			if err := cfg.Client().Resources().Create(ctx, b); err != nil {
				t.Fatal(err)
			}
			// Killed as soon as the attempt is recorded: before the run,
			// during it, or after its commit and before its status, as
			// the timing falls; each must end with one backup. Taken
			// before the sample's EtcdBackup, which stays the newest for
			// the rebuild below.
			harness.WaitFor(ctx, t, "the backup's first attempt recorded", time.Minute, 50*time.Millisecond, func(ctx context.Context) (bool, string) {
				if err := cfg.Client().Resources().Get(ctx, b.Name, ns, b); err != nil {
					return false, err.Error()
				}
				return b.Status.Operation != nil && b.Status.Operation.Attempts > 0, fmt.Sprintf("%+v", b.Status.Operation)
			})
			op.killLeader(ctx, t, cfg, etcdLease)
			if b.Status.Phase == v1alpha1.BackupSucceeded {
				t.Fatalf("the backup succeeded before the operator was killed: %+v", b.Status.Operation)
			}
			b = waitBackupSucceeded(ctx, t, cfg, ns, b.Name)
			var taken []string
			for _, m := range backupsBy(ctx, t, store, "on-demand") {
				if m.Snapshot.Extra["etcd.opkit.dev/etcdbackup-uid"] == string(b.UID) {
					taken = append(taken, m.ID)
				}
			}
			if diff := cmp.Diff([]string{b.Status.BackupID}, taken); diff != "" {
				t.Errorf("backups of EtcdBackup %s in the store (-want +got):\n%s", b.Name, diff)
			}
			t.Logf("the backup took %d attempt(s) across the kill: %+v", b.Status.Operation.Attempts, b.Status.Operation)
			return ctx
		}).
		Assess("an on-demand EtcdBackup into S3 holds the keyspace at its revision", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			want = readKeyspace(ctx, t, cli)
			apply(ctx, t, cfg, "etcdbackup.yaml")
			b := waitBackupSucceeded(ctx, t, cfg, ns, sampleBackup)
			if b.Status.Revision != want.Revision {
				t.Errorf("backup revision = %d, want %d (no write since the keyspace was read)", b.Status.Revision, want.Revision)
			}
			m, err := backup.Verify(ctx, store, b.Status.BackupID)
			if err != nil {
				t.Fatalf("the backup in S3 does not verify: %v", err)
			}
			if m.SHA256 != b.Status.SHA256 || m.Size != b.Status.SizeBytes || m.Snapshot.Extra[extraTrigger] != "on-demand" {
				t.Errorf("manifest %+v does not match status %+v", m, b.Status)
			}
			return ctx
		}).
		Assess("an on-demand EtcdBackup into a claim mounted into the operator", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			operatorDisruption.Lock()
			defer operatorDisruption.Unlock()
			mountBackupClaims(ctx, t, cfg, op, claimMount{ns, backupClaim}, claimMount{doomedNS, doomedClaim})
			b := &v1alpha1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{Name: "demo-to-claim", Namespace: ns},
				Spec:       v1alpha1.EtcdBackupSpec{ClusterName: sampleCluster, StoreRef: v1alpha1.StoreReference{PVCName: backupClaim}},
			}
			if err := cfg.Client().Resources().Create(ctx, b); err != nil {
				t.Fatal(err)
			}
			b = waitBackupSucceeded(ctx, t, cfg, ns, b.Name)
			if b.Status.Revision != want.Revision {
				t.Errorf("backup revision = %d, want %d", b.Status.Revision, want.Revision)
			}
			// Read it back from the claim in another pod: the manifest and
			// the data's checksum.
			read, stop := claimReader(ctx, t, cfg, op, backupClaim)
			defer stop()
			dir := path.Join("/store", ns, sampleCluster)
			out, err := read("cat", path.Join(dir, backup.ManifestKeyFor(b.Status.BackupID)))
			if err != nil {
				t.Fatalf("reading the manifest from the claim: %v\n%s", err, out)
			}
			var m backup.Manifest
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("the manifest on the claim: %v\n%s", err, out)
			}
			sum, err := read("sha256", path.Join(dir, m.DataKey))
			if err != nil {
				t.Fatalf("reading the data from the claim: %v\n%s", err, sum)
			}
			if got, want := strings.TrimSpace(sum), fmt.Sprintf("%s %d", b.Status.SHA256, b.Status.SizeBytes); got != want || m.SHA256 != b.Status.SHA256 {
				t.Errorf("on the claim: data %q, manifest sha256 %s; status says %q", got, m.SHA256, want)
			}
			return ctx
		}).
		Assess("a new cluster restored from the S3 backup holds exactly its keys and revision", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			apply(ctx, t, cfg, "etcdcluster-restore.yaml")
			harness.WaitEtcdReady(ctx, t, cfg, ns, sampleRestored)
			// Restored physically, by init containers running the
			// operator's own image (--restore-image follows IMG): its
			// first build's, or its next one's once the lifecycle suite
			// has upgraded it.
			var seed corev1.Pod
			if err := cfg.Client().Resources().Get(ctx, sampleRestored+"-0", ns, &seed); err != nil {
				t.Fatal(err)
			}
			if got := seed.Annotations["etcd.opkit.dev/restore-backup"]; got != sampleBackup {
				t.Errorf("seed pod restored from %q, want %s", got, sampleBackup)
			}
			if opImages := []string{op.img, op.nextImg()}; len(seed.Spec.InitContainers) == 0 || !slices.Contains(opImages, seed.Spec.InitContainers[0].Image) {
				t.Errorf("seed pod's init containers %v, want the first running one of %v", seed.Spec.InitContainers, opImages)
			}
			restored := harness.EtcdClient(ctx, t, cfg, ns, sampleRestored)
			defer func() { _ = restored.Close() }()
			if ms := harness.EtcdMembers(ctx, t, restored); len(harness.Voting(ms)) != 3 || len(ms) != 3 {
				t.Errorf("members of the restored cluster %v, want 3 voting", ms)
			}
			if diff := cmp.Diff(want.restored(), readKeyspace(ctx, t, restored)); diff != "" {
				t.Errorf("restored keyspace (-backup +restored):\n%s", diff)
			}
			return ctx
		}).
		Assess("the sample cluster (spec.recovery.quorumLoss Rebuild), every member lost with its claim, rebuilds itself from its newest backup", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if r := getEtcdCluster(ctx, t, cfg, ns, sampleCluster).Spec.Recovery; r == nil || r.QuorumLoss != v1alpha1.QuorumLossRebuild {
				t.Fatalf("the sample's spec.recovery = %+v, want quorumLoss %s", r, v1alpha1.QuorumLossRebuild)
			}
			// The newest backup of the cluster in its store (S3) is the
			// on-demand one: the scheduled ones are older.
			newest := waitBackupSucceeded(ctx, t, cfg, ns, sampleBackup).Status.BackupID
			selector := "etcd.opkit.dev/cluster=" + sampleCluster
			for _, args := range [][]string{
				{"delete", "pvc", "-n", ns, "-l", selector, "--wait=false"},
				{"delete", "pod", "-n", ns, "-l", selector, "--wait=true", "--timeout=2m"},
			} {
				if out, err := harness.Kubectl(ctx, cfg, args...); err != nil {
					t.Fatalf("kubectl %v: %v\n%s", args, err, out)
				}
			}
			harness.WaitFor(ctx, t, "a seed restored from backup "+newest, 3*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				var seed corev1.Pod
				if err := cfg.Client().Resources().Get(ctx, sampleCluster+"-0", ns, &seed); err != nil {
					return false, err.Error()
				}
				got := seed.Annotations["etcd.opkit.dev/restore-backup"]
				return got == newest, fmt.Sprintf("seed restored from %q; pods: %s", got, harness.DescribePods(ctx, cfg, ns))
			})
			harness.WaitEtcdReady(ctx, t, cfg, ns, sampleCluster)
			rebuilt := harness.EtcdClient(ctx, t, cfg, ns, sampleCluster)
			defer func() { _ = rebuilt.Close() }()
			if ms := harness.EtcdMembers(ctx, t, rebuilt); len(harness.Voting(ms)) != 3 || len(ms) != 3 {
				t.Errorf("members of the rebuilt cluster %v, want 3 voting", ms)
			}
			if diff := cmp.Diff(want.restored(), readKeyspace(ctx, t, rebuilt)); diff != "" {
				t.Errorf("rebuilt keyspace (-backup +rebuilt):\n%s", diff)
			}
			if r := getEtcdCluster(ctx, t, cfg, ns, sampleCluster).Status.LastRecovery; r == nil || r.Backup != newest ||
				r.RevisionBump != harness.EtcdRevisionBump || r.EndTime == nil {
				t.Errorf("status.lastRecovery = %+v, want the rebuild from %s, its revision moved on by %d", r, newest, harness.EtcdRevisionBump)
			}
			out, err := harness.Kubectl(ctx, cfg, "get", "events", "-n", ns, "--field-selector", "reason=RebuildingFromBackup,involvedObject.name="+sampleCluster, "-o", "jsonpath={.items[*].message}")
			if err != nil || !strings.Contains(out, newest) {
				t.Errorf("RebuildingFromBackup event naming %s: %q, %v", newest, out, err)
			}
			return ctx
		}).
		// In the foreground, as Argo CD prunes: the garbage collector
		// deletes every dependent that has no other owner, whatever its
		// blockOwnerDeletion, and the members' guard is what keeps them
		// running for the final backup.
		Assess("deleting the sample cluster in the foreground takes a final backup, then removes its pods and claims", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			before := backupsBy(ctx, t, store, "final")
			if len(before) != 0 {
				t.Fatalf("final backups before the delete: %v", before)
			}
			if out, err := harness.Kubectl(ctx, cfg, "delete", "etcdcluster", sampleCluster, "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=3m"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			final := backupsBy(ctx, t, store, "final")
			if len(final) != 1 {
				t.Fatalf("final backups after the delete: %v, want 1", final)
			}
			// The rebuild above moved the revision on; nothing was written since.
			if got, rev := final[0].Snapshot.ConsistencyPoint, want.restored().Revision; got != strconv.FormatInt(rev, 10) {
				t.Errorf("final backup at revision %s, want %d (the rebuilt cluster's)", got, rev)
			}
			if _, err := backup.Verify(ctx, store, final[0].ID); err != nil {
				t.Errorf("the final backup does not verify: %v", err)
			}
			waitChildrenGone(ctx, t, cfg, ns, sampleCluster)
			return ctx
		}).
		Assess("deleting the restored cluster in the background takes a final backup at its revision, then removes its pods and claims", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			patch := fmt.Sprintf(`{"spec":{"backup":{"storeRef":{"s3SecretName":%q}}}}`, sampleStore)
			if out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", sampleRestored, "-n", ns, "--type=merge", "-p", patch); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "the operator to act on spec.backup", time.Minute, time.Second, func(ctx context.Context) (bool, string) {
				c := getEtcdCluster(ctx, t, cfg, ns, sampleRestored)
				return c.Status.ObservedGeneration == c.Generation, fmt.Sprintf("observed %d of %d", c.Status.ObservedGeneration, c.Generation)
			})
			restored := harness.EtcdClient(ctx, t, cfg, ns, sampleRestored)
			last := readKeyspace(ctx, t, restored)
			_ = restored.Close()
			rstore := openSampleStore(ctx, t, cfg, ns, sampleRestored)
			if out, err := harness.Kubectl(ctx, cfg, "delete", "etcdcluster", sampleRestored, "-n", ns, "--wait=true", "--timeout=3m"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			final := backupsBy(ctx, t, rstore, "final")
			if len(final) != 1 {
				t.Fatalf("final backups after the delete: %v, want 1", final)
			}
			if got := final[0].Snapshot.ConsistencyPoint; got != strconv.FormatInt(last.Revision, 10) {
				t.Errorf("final backup at revision %s, want %d (the cluster's last)", got, last.Revision)
			}
			if _, err := backup.Verify(ctx, rstore, final[0].ID); err != nil {
				t.Errorf("the final backup does not verify: %v", err)
			}
			waitChildrenGone(ctx, t, cfg, ns, sampleRestored)
			return ctx
		}).
		// Deleting the namespace deletes the pods, claims and Services
		// directly, not through the garbage collector: the guard's
		// admission policy keeps the members until the final backup.
		Assess("deleting a cluster's namespace takes its final backup with every acknowledged write, then the namespace goes", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			if err := r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomedNS}}); err != nil {
				t.Fatal(err)
			}
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: doomed, Namespace: doomedNS},
				Spec: v1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Storage: v1alpha1.StorageSpec{Ephemeral: true},
					Backup: &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: doomedClaim}}}}
			if err := r.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			harness.WaitEtcdReady(ctx, t, cfg, doomedNS, doomed)
			dcli := harness.EtcdClient(ctx, t, cfg, doomedNS, doomed)
			writeSampleData(ctx, t, dcli)
			acked := readKeyspace(ctx, t, dcli)
			_ = dcli.Close()
			if out, err := harness.Kubectl(ctx, cfg, "delete", "namespace", doomedNS, "--wait=true", "--timeout=3m"); err != nil {
				t.Fatalf("%v\n%s\noperator log:\n%s", err, out, op.log(ctx, cfg))
			}
			var final []backup.Manifest
			for _, m := range readClaimBackups(ctx, t, cfg, op, doomedNS, doomedClaim, doomed) {
				if m.Snapshot.Extra[extraTrigger] == "final" {
					final = append(final, m)
				}
			}
			if len(final) != 1 {
				t.Fatalf("final backups of %s/%s: %+v, want 1\noperator log:\n%s", doomedNS, doomed, final, op.log(ctx, cfg))
			}
			if got := final[0].Snapshot.ConsistencyPoint; got != strconv.FormatInt(acked.Revision, 10) {
				t.Errorf("final backup at revision %s, want %d: the last acknowledged write's", got, acked.Revision)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if cli != nil {
				_ = cli.Close()
			}
			// The clusters first, while the store their final backups go
			// to still runs.
			for _, args := range [][]string{
				{"delete", "etcdcluster", sampleRestored, sampleCluster, "-n", ns, "--ignore-not-found", "--wait=true", "--timeout=3m"},
				{"delete", "etcdbackup", "--all", "-n", ns, "--ignore-not-found"},
				{"delete", "-n", ns, "-f", filepath.Join(samples, "s3-store.yaml"), "--ignore-not-found", "--wait=true"},
				{"delete", "namespace", doomedNS, "--ignore-not-found", "--wait=true", "--timeout=3m"},
			} {
				if out, err := harness.Kubectl(ctx, cfg, args...); err != nil {
					t.Errorf("kubectl %v: %v\n%s", args, err, out)
				}
			}
			return ctx
		}).Feature()
}

// keyspace is every key of an etcd cluster with its revisions, and the
// cluster's revision.
type keyspace struct {
	Revision int64
	KVs      []kv
}

// restored is k as a physical restore of it reads: the cluster's
// revision moved on, every key as it was.
func (k keyspace) restored() keyspace {
	k.Revision += harness.EtcdRevisionBump
	return k
}

type kv struct {
	Key, Value                  string
	Create, Mod, VersionOfValue int64
}

// readKeyspace reads every key, linearizably.
func readKeyspace(ctx context.Context, t *testing.T, cli *clientv3.Client) keyspace {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatalf("reading the keyspace: %v", err)
	}
	out := keyspace{Revision: resp.Header.Revision}
	for _, e := range resp.Kvs {
		out.KVs = append(out.KVs, kv{Key: string(e.Key), Value: string(e.Value), Create: e.CreateRevision, Mod: e.ModRevision, VersionOfValue: e.Version})
	}
	return out
}

// writeSampleData writes 100 keys with values of about 1 KiB, overwrites
// ten and deletes one, so that create and mod revisions differ and the
// revision is not the number of keys.
func writeSampleData(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range 100 {
		if _, err := cli.Put(ctx, fmt.Sprintf("sample/%03d", i), strings.Repeat(string(rune('a'+i%26)), 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("sample/%03d", i), fmt.Sprintf("overwritten %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "sample/099"); err != nil {
		t.Fatal(err)
	}
}

// openSampleStore opens, from this process, the part of the samples' S3
// store holding cluster's backups: the Secret's configuration with the
// Service's ClusterIP for its in-cluster endpoint.
func openSampleStore(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster string) backup.Store {
	t.Helper()
	var sec corev1.Secret
	if err := cfg.Client().Resources().Get(ctx, sampleStore, ns, &sec); err != nil {
		t.Fatal(err)
	}
	c, err := s3.ConfigFromSecret(&sec)
	if err != nil {
		t.Fatalf("the sample's S3 Secret: %v", err)
	}
	var svc corev1.Service
	if err := cfg.Client().Resources().Get(ctx, sampleStore, ns, &svc); err != nil {
		t.Fatal(err)
	}
	if want := "http://" + sampleStore + "." + ns + ".svc:7070"; c.Endpoint != want {
		t.Fatalf("the sample's S3 endpoint is %s, want %s", c.Endpoint, want)
	}
	c.Endpoint = "http://" + svc.Spec.ClusterIP + ":7070"
	st, err := s3.New(c)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := backup.Sub(st, ns+"/"+cluster)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// backupsBy lists the complete backups in store taken by trigger.
func backupsBy(ctx context.Context, t *testing.T, store backup.Store, trigger string) []backup.Manifest {
	t.Helper()
	list, err := backup.List(ctx, store)
	if err != nil {
		t.Fatalf("listing the store: %v", err)
	}
	var out []backup.Manifest
	for _, m := range list {
		if m.Snapshot.Extra[extraTrigger] == trigger {
			out = append(out, m)
		}
	}
	return out
}

// waitChildrenGone waits for the pods, claims, Services, budget and guard
// of a deleted cluster to go.
func waitChildrenGone(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, cluster string) {
	t.Helper()
	harness.WaitFor(ctx, t, "the cluster's pods, claims, Services and guard to go", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		out, err := harness.Kubectl(ctx, cfg, "get", "pods,pvc,services,configmaps,poddisruptionbudgets", "-n", ns, "-l", "etcd.opkit.dev/cluster="+cluster, "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out + fmt.Sprint(err)
	})
}

// waitBackupSucceeded waits for the EtcdBackup's phase to be Succeeded,
// and fails at once when it is Failed.
func waitBackupSucceeded(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) *v1alpha1.EtcdBackup {
	t.Helper()
	var b v1alpha1.EtcdBackup
	harness.WaitFor(ctx, t, "EtcdBackup "+name+" to succeed", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		if err := cfg.Client().Resources().Get(ctx, name, ns, &b); err != nil {
			return false, err.Error()
		}
		if b.Status.Phase == v1alpha1.BackupFailed {
			t.Fatalf("EtcdBackup %s failed: %+v", name, b.Status.Conditions)
		}
		return b.Status.Phase == v1alpha1.BackupSucceeded, fmt.Sprintf("phase %q, conditions %+v", b.Status.Phase, b.Status.Conditions)
	})
	return &b
}

// claimMount is a claim in the operator's namespace holding the
// filesystem backup store of the clusters of namespace ns.
type claimMount struct{ ns, claim string }

// mountBackupClaims creates each claim in the operator's namespace and
// mounts it into the operator at /backups/<ns>/<claim> (under its
// --backup-root), as an administrator adds a filesystem backup store for
// the clusters of namespace ns, then waits for the new operator pod (one
// rollout for all).
func mountBackupClaims(ctx context.Context, t *testing.T, cfg *envconf.Config, op operator, mounts ...claimMount) {
	t.Helper()
	var ops []string
	for _, m := range mounts {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: m.claim, Namespace: op.namespace},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("256Mi")}},
			},
		}
		if err := cfg.Client().Resources().Create(ctx, pvc); err != nil {
			t.Fatalf("creating claim %s: %v", m.claim, err)
		}
		ops = append(ops,
			fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/volumes/-","value":{"name":%q,"persistentVolumeClaim":{"claimName":%q}}}`, m.claim, m.claim),
			fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/0/volumeMounts/-","value":{"name":%q,"mountPath":"/backups/%s/%s"}}`, m.claim, m.ns, m.claim))
	}
	patch := "[" + strings.Join(ops, ",") + "]"
	if out, err := harness.Kubectl(ctx, cfg, "patch", "deployment", op.deployment(), "-n", op.namespace, "--type=json", "-p", patch); err != nil {
		t.Fatalf("mounting claims %v into the operator: %v\n%s", mounts, err, out)
	}
	if out, err := harness.Kubectl(ctx, cfg, "rollout", "status", "deployment/"+op.deployment(), "-n", op.namespace, "--timeout=3m"); err != nil {
		t.Fatalf("the operator with the claims mounted: %v\n%s\npods: %s", err, out, harness.DescribePods(ctx, cfg, op.namespace))
	}
}

// claimReader starts a toolbox pod in the operator's namespace with claim
// mounted read-only at /store, and returns a toolbox command runner and a
// stop that deletes the pod.
func claimReader(ctx context.Context, t *testing.T, cfg *envconf.Config, op operator, claim string) (read func(args ...string) (string, error), stop func()) {
	t.Helper()
	reader := "backup-claim-reader"
	startToolbox(ctx, t, cfg, op.namespace, reader, "", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "store", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "store", MountPath: "/store", ReadOnly: true}}
	})
	read = func(args ...string) (string, error) {
		return harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", op.namespace, reader, "--", "toolbox"}, args...)...)
	}
	stop = func() {
		_, _ = harness.Kubectl(context.WithoutCancel(ctx), cfg, "delete", "pod", reader, "-n", op.namespace, "--ignore-not-found", "--wait=true")
	}
	return read, stop
}

// readClaimBackups reads, in a toolbox pod, the manifests of cluster's
// backups in claim (mounted as claimMount{ns, claim} into the operator).
func readClaimBackups(ctx context.Context, t *testing.T, cfg *envconf.Config, op operator, ns, claim, cluster string) []backup.Manifest {
	t.Helper()
	read, stop := claimReader(ctx, t, cfg, op, claim)
	defer stop()
	dir := path.Join("/store", ns, cluster)
	names, err := read("ls", dir)
	if err != nil {
		t.Fatalf("listing %s on claim %s: %v\n%s", dir, claim, err, names)
	}
	var out []backup.Manifest
	for _, name := range strings.Fields(names) {
		if !strings.HasSuffix(name, backup.ManifestKeyFor("")) {
			continue
		}
		raw, err := read("cat", path.Join(dir, name))
		if err != nil {
			t.Fatalf("reading %s: %v\n%s", name, err, raw)
		}
		var m backup.Manifest
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("manifest %s: %v\n%s", name, err, raw)
		}
		out = append(out, m)
	}
	return out
}
