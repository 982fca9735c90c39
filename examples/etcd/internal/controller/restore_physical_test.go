package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/statusutil"
)

const restoreImage = "registry.example/etcd-operator:test"

// initContainer is the part of an init container the operator decides.
type initContainer struct {
	Name, Image   string
	Command, Args []string
	Mounts        []string // name:path[:ro]
	RunAsUser     *int64
}

func initContainersOf(pod *corev1.Pod) []initContainer {
	var out []initContainer
	for _, c := range pod.Spec.InitContainers {
		ic := initContainer{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args}
		for _, m := range c.VolumeMounts {
			s := m.Name + ":" + m.MountPath
			if m.ReadOnly {
				s += ":ro"
			}
			ic.Mounts = append(ic.Mounts, s)
		}
		if c.SecurityContext != nil {
			ic.RunAsUser = c.SecurityContext.RunAsUser
		}
		out = append(out, ic)
	}
	return out
}

func (g *rig) pod(name string) *corev1.Pod {
	g.t.Helper()
	var p corev1.Pod
	if err := g.c.Get(g.t.Context(), types.NamespacedName{Namespace: g.ns, Name: name}, &p); err != nil {
		g.t.Fatal(err)
	}
	return &p
}

// putKeys writes want into the fake etcd, as the seed's init containers
// would have restored them: the fake's revision is its number of keys,
// the backup's revision.
func (g *rig) putKeys(want map[string]string) {
	g.t.Helper()
	var kvs []etcdclient.KeyValue
	for k, v := range want {
		kvs = append(kvs, etcdclient.KeyValue{Key: []byte(k), Value: []byte(v)})
	}
	ec, err := g.fake.Factory().New(g.t.Context(), nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := ec.Put(g.t.Context(), kvs); err != nil {
		g.t.Fatal(err)
	}
}

// TestPhysicalRestoreSeedPod checks the seed pod of a cluster restored
// with ClusterHooks.RestoreImage set: three init containers (fetch-backup
// in the operator's image with the store's claim mounted, etcdutl in the
// cluster's image with the member's identity, finish-restore), the
// restore annotations, and that the operator writes no key: status.restored
// follows from the seed answering at the backup's revision, then the
// cluster grows with plain members.
func TestPhysicalRestoreSeedPod(t *testing.T) {
	g := newRig(t)
	want := sourceBackup(g)
	b1 := g.getBackup("b1")
	g.hooks.RestoreImage = restoreImage
	g.fake = etcdclient.NewFake()
	dst := cluster("dst", 3)
	dst.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: "b1"}
	g.create(dst)
	dst = g.get("dst")

	if err := g.pass("dst"); err != nil {
		t.Fatal(err)
	}
	seed := g.pod("dst-0")
	peer := controller.PeerURL(dst, "dst-0")
	root := int64(0)
	wantInit := []initContainer{
		{Name: controller.InitContainerFetch, Image: restoreImage,
			Args: []string{"fetch-backup", "--data-dir=/var/lib/etcd", "--backup-id=" + b1.Status.BackupID,
				"--prefix=" + g.ns + "/src", "--store-dir=/backups/" + g.ns + "/backups"},
			Mounts: []string{"data:/var/lib/etcd", "backup-store:/backups/" + g.ns + "/backups:ro"}, RunAsUser: &root},
		{Name: controller.InitContainerRestore, Image: "gcr.io/etcd-development/etcd:v3.6.16", Command: []string{"etcdutl"},
			Args: []string{"snapshot", "restore", "/var/lib/etcd/restore/snapshot.db", "--data-dir=/var/lib/etcd/restore/data",
				"--name=dst-0", "--initial-cluster=dst-0=" + peer, "--initial-cluster-token=" + string(dst.UID),
				"--initial-advertise-peer-urls=" + peer, "--bump-revision=1000000000", "--mark-compacted"},
			Mounts: []string{"data:/var/lib/etcd"}},
		{Name: controller.InitContainerFinish, Image: restoreImage,
			Args:   []string{"finish-restore", "--data-dir=/var/lib/etcd"},
			Mounts: []string{"data:/var/lib/etcd"}, RunAsUser: &root},
	}
	if diff := cmp.Diff(wantInit, initContainersOf(seed)); diff != "" {
		t.Errorf("init containers of the seed (-want +got):\n%s", diff)
	}
	i := slices.IndexFunc(seed.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "backup-store" })
	if i < 0 || seed.Spec.Volumes[i].PersistentVolumeClaim == nil ||
		seed.Spec.Volumes[i].PersistentVolumeClaim.ClaimName != "backups" || !seed.Spec.Volumes[i].PersistentVolumeClaim.ReadOnly {
		t.Errorf("volumes of the seed: %+v, want backup-store from claim backups, read-only", seed.Spec.Volumes)
	}
	gotAnn := map[string]string{
		controller.AnnotationRestoreBackup:   seed.Annotations[controller.AnnotationRestoreBackup],
		controller.AnnotationRestoreRevision: seed.Annotations[controller.AnnotationRestoreRevision],
	}
	wantAnn := map[string]string{controller.AnnotationRestoreBackup: "b1",
		controller.AnnotationRestoreRevision: fmt.Sprint(b1.Status.Revision)}
	if diff := cmp.Diff(wantAnn, gotAnn); diff != "" {
		t.Errorf("restore annotations of the seed (-want +got):\n%s", diff)
	}
	// The etcd container is the one every member has.
	if seed.Spec.Containers[0].Name != "etcd" || !slices.Contains(seed.Spec.Containers[0].Args, "--data-dir=/var/lib/etcd") {
		t.Errorf("etcd container of the seed: %+v", seed.Spec.Containers[0])
	}

	// The kubelet runs the init containers: the seed starts with the
	// backup's data.
	g.kubelet("dst")
	g.putKeys(want)
	mark := len(g.fake.Calls())
	g.converge("dst", 30)
	c := g.get("dst")
	if !c.Status.Restored {
		t.Errorf("status.restored is false after converging")
	}
	if diff := cmp.Diff(want, g.fake.Data()); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	for _, call := range g.fake.Calls()[mark:] {
		if strings.HasPrefix(call, "Put ") {
			t.Errorf("the operator wrote keys (%s) into a cluster restored physically", call)
		}
	}
	if diff := cmp.Diff([]string{"dst-0", "dst-1", "dst-2"}, g.dstPods()); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	for _, name := range []string{"dst-1", "dst-2"} {
		if p := g.pod(name); len(p.Spec.InitContainers) > 0 || p.Annotations[controller.AnnotationRestoreBackup] != "" {
			t.Errorf("pod %s, not a seed, has restore init containers or annotations: %+v", name, initContainersOf(p))
		}
	}
}

// TestPhysicalRestoreS3Store checks that an S3 store's Secret reaches the
// fetch-backup init container as a read-only volume.
func TestPhysicalRestoreS3Store(t *testing.T) {
	g := newRig(t)
	g.hooks.RestoreImage = restoreImage
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: g.ns}, StringData: map[string]string{
		"endpoint": "http://127.0.0.1:1", "bucket": "backups", "accessKeyID": "a", "secretAccessKey": "s", "region": "us-east-1"}}
	if err := g.c.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	// A Succeeded EtcdBackup in that store; the store is not read
	// before the seed's init container reads it.
	eb := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "b-s3", Namespace: g.ns},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "src", StoreRef: v1alpha1.StoreReference{S3SecretName: "s3"}}}
	if err := g.c.Create(t.Context(), eb); err != nil {
		t.Fatal(err)
	}
	eb.Status = v1alpha1.EtcdBackupStatus{Phase: v1alpha1.BackupSucceeded, BackupID: "id-1", Revision: 7}
	if err := g.c.Status().Update(t.Context(), eb); err != nil {
		t.Fatal(err)
	}
	dst := cluster("dst", 1)
	dst.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: "b-s3"}
	g.create(dst)
	if err := g.pass("dst"); err != nil {
		t.Fatal(err)
	}
	seed := g.pod("dst-0")
	got := initContainersOf(seed)
	if len(got) != 3 {
		t.Fatalf("init containers: %+v", got)
	}
	wantFetch := []string{"fetch-backup", "--data-dir=/var/lib/etcd", "--backup-id=id-1", "--prefix=" + g.ns + "/src",
		"--s3-secret-dir=/etc/opkit/backup-store"}
	if diff := cmp.Diff(wantFetch, got[0].Args); diff != "" {
		t.Errorf("fetch-backup args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"data:/var/lib/etcd", "backup-store:/etc/opkit/backup-store:ro"}, got[0].Mounts); diff != "" {
		t.Errorf("fetch-backup mounts (-want +got):\n%s", diff)
	}
	i := slices.IndexFunc(seed.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "backup-store" })
	if i < 0 || seed.Spec.Volumes[i].Secret == nil || seed.Spec.Volumes[i].Secret.SecretName != "s3" {
		t.Errorf("volumes of the seed: %+v, want backup-store from Secret s3", seed.Spec.Volumes)
	}
}

// TestPhysicalRestoreFailures checks that a physical restore that cannot
// work stalls the cluster with reason RestoreFailed and never grows it: a
// missing backup before any pod exists, an init container that failed
// (its termination message in the condition), and a seed that runs
// without the backup's revision.
func TestPhysicalRestoreFailures(t *testing.T) {
	tests := []struct {
		name string
		// backupName is spec.restore.backupName.
		backupName string
		// kubelet runs the seed pod, if any, its own way.
		kubelet     func(g *rig)
		wantPods    []string
		wantMessage string
	}{
		{"missing EtcdBackup", "nope", func(*rig) {}, nil, `EtcdBackup "nope" not found`},
		{"fetch-backup failed", "b1", func(g *rig) {
			p := g.pod("dst-0")
			p.Status.Phase = corev1.PodPending
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: controller.InitContainerFetch, Image: restoreImage,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
					Message: "fetch-backup: fetching backup x: backup x is corrupt: data sha256 is 00"}}}}
			if err := g.c.Status().Update(g.t.Context(), p); err != nil {
				g.t.Fatal(err)
			}
		}, []string{"dst-0"}, "init container fetch-backup of pod dst-0 exited with 1: fetch-backup: fetching backup x: backup x is corrupt"},
		{"seed runs without the backup's data", "b1", func(g *rig) { g.kubelet("dst") }, []string{"dst-0"},
			"member dst-0 runs at revision 0, EtcdBackup b1 was taken at revision 250"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			sourceBackup(g)
			g.hooks.RestoreImage = restoreImage
			g.fake = etcdclient.NewFake()
			dst := cluster("dst", 3)
			dst.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: tt.backupName}
			g.create(dst)
			_ = g.pass("dst")
			for range 3 {
				tt.kubelet(g)
				_ = g.pass("dst") // a stalled pass may report its error
			}
			c := g.get("dst")
			stalled := statusutil.Get(c, statusutil.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != controller.ReasonRestoreFailed ||
				!strings.Contains(stalled.Message, tt.wantMessage) {
				t.Errorf("Stalled = %+v, want True, %s, mentioning %q", stalled, controller.ReasonRestoreFailed, tt.wantMessage)
			}
			if c.Status.Restored {
				t.Errorf("status.restored is true")
			}
			if diff := cmp.Diff(tt.wantPods, g.dstPods()); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
		})
	}
}
