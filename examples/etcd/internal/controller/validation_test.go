package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// TestCRDValidation checks the schema and CEL rules of EtcdCluster against
// the API server.
func TestCRDValidation(t *testing.T) {
	g := newRig(t)
	tests := []struct {
		name    string
		mutate  func(c *v1alpha1.EtcdCluster)
		wantErr string
	}{
		{"valid", func(*v1alpha1.EtcdCluster) {}, ""},
		{"negative size", func(c *v1alpha1.EtcdCluster) { c.Spec.Size = -1 }, "spec.size"},
		{"size 10", func(c *v1alpha1.EtcdCluster) { c.Spec.Size = 10 }, "spec.size"},
		{"version without patch", func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.6" }, "spec.version"},
		{"version v-prefixed", func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "v3.6.16" }, "spec.version"},
		{"two store kinds", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{S3SecretName: "s", PVCName: "p"}}
		}, "exactly one"},
		{"no store", func(c *v1alpha1.EtcdCluster) { c.Spec.Backup = &v1alpha1.BackupSpec{} }, "exactly one"},
		{"a pvcName climbing out of the backup root", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "../other-namespace/backups"}}
		}, "spec.backup.storeRef.pvcName"},
		{"an s3SecretName that is no object name", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{S3SecretName: "Backup/S3"}}
		}, "spec.backup.storeRef.s3SecretName"},
		{"storage size and class", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Storage = v1alpha1.StorageSpec{Size: ptr.To(resource.MustParse("1Gi")), StorageClassName: ptr.To("fast")}
		}, ""},
		{"ephemeral storage", func(c *v1alpha1.EtcdCluster) { c.Spec.Storage = v1alpha1.StorageSpec{Ephemeral: true} }, ""},
		{"ephemeral storage with a size", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Storage = v1alpha1.StorageSpec{Ephemeral: true, Size: ptr.To(resource.MustParse("1Gi"))}
		}, "mutually exclusive"},
		{"quota, compaction and extra flags", func(c *v1alpha1.EtcdCluster) {
			c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("8Gi"))
			c.Spec.AutoCompaction = &v1alpha1.AutoCompactionSpec{Mode: "periodic", Retention: "1h30m"}
			c.Spec.ExtraArgs = map[string]string{"snapshot-count": "10000"}
		}, ""},
		{"revision compaction with a duration", func(c *v1alpha1.EtcdCluster) {
			c.Spec.AutoCompaction = &v1alpha1.AutoCompactionSpec{Mode: "revision", Retention: "1h"}
		}, "number of revisions"},
		{"periodic compaction with no duration", func(c *v1alpha1.EtcdCluster) {
			c.Spec.AutoCompaction = &v1alpha1.AutoCompactionSpec{Retention: "an hour"}
		}, "duration"},
		{"an extra flag with its dashes", func(c *v1alpha1.EtcdCluster) {
			c.Spec.ExtraArgs = map[string]string{"--snapshot-count": "1"}
		}, "without"},
	}
	for _, flag := range controller.OwnedFlags {
		tests = append(tests, struct {
			name    string
			mutate  func(c *v1alpha1.EtcdCluster)
			wantErr string
		}{"extra flag " + flag, func(c *v1alpha1.EtcdCluster) { c.Spec.ExtraArgs = map[string]string{flag: "x"} }, "flag the operator sets"})
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cluster(fmt.Sprintf("v%d", i), 3)
			c.Namespace = g.ns
			tt.mutate(c)
			err := g.c.Create(t.Context(), c)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Create: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Create error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}

	t.Run("restore is immutable and only set at creation", func(t *testing.T) {
		c := cluster("restored", 3)
		c.Namespace = g.ns
		c.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: "one"}
		if err := g.c.Create(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		c.Spec.Restore.BackupName = "two"
		if err := g.c.Update(t.Context(), c); err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("changing restore: %v, want immutable", err)
		}
		if err := g.c.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			t.Fatal(err)
		}
		c.Spec.Restore = nil
		if err := g.c.Update(t.Context(), c); err == nil {
			t.Errorf("removing restore succeeded")
		}

		plain := cluster("plain", 3)
		plain.Namespace = g.ns
		if err := g.c.Create(t.Context(), plain); err != nil {
			t.Fatal(err)
		}
		plain.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: "one"}
		if err := g.c.Update(t.Context(), plain); err == nil || !strings.Contains(err.Error(), "only be set when the cluster is created") {
			t.Errorf("adding restore later: %v", err)
		}
	})

	// Members keep their data where they were created: flipping ephemeral
	// would recreate emptyDir members "on their data" with empty claims.
	// Only the size may change, and only grow (volume expansion).
	t.Run("storage is immutable but for a larger size", func(t *testing.T) {
		size := func(q string) *resource.Quantity { return ptr.To(resource.MustParse(q)) }
		for i, change := range []struct {
			name     string
			from, to v1alpha1.StorageSpec
			refused  string
		}{
			{"claims to ephemeral", v1alpha1.StorageSpec{}, v1alpha1.StorageSpec{Ephemeral: true}, "storage is immutable"},
			{"ephemeral to claims", v1alpha1.StorageSpec{Ephemeral: true}, v1alpha1.StorageSpec{}, "storage is immutable"},
			{"a new class", v1alpha1.StorageSpec{StorageClassName: ptr.To("slow")}, v1alpha1.StorageSpec{StorageClassName: ptr.To("fast")}, "storage is immutable"},
			{"a class where there was none", v1alpha1.StorageSpec{}, v1alpha1.StorageSpec{StorageClassName: ptr.To("fast")}, "storage is immutable"},
			{"a smaller size", v1alpha1.StorageSpec{Size: size("2Gi")}, v1alpha1.StorageSpec{Size: size("1Gi")}, "storage.size may only grow"},
			{"a size below the default where there was none", v1alpha1.StorageSpec{}, v1alpha1.StorageSpec{Size: size("512Mi")}, "storage.size may only grow"},
			{"the size dropped for the smaller default", v1alpha1.StorageSpec{Size: size("2Gi")}, v1alpha1.StorageSpec{}, "storage.size may only grow"},
			{"a larger size", v1alpha1.StorageSpec{Size: size("1Gi")}, v1alpha1.StorageSpec{Size: size("2Gi")}, ""},
			{"a larger size where there was none", v1alpha1.StorageSpec{}, v1alpha1.StorageSpec{Size: size("2Gi")}, ""},
			{"the same size in other units", v1alpha1.StorageSpec{Size: size("1Gi")}, v1alpha1.StorageSpec{Size: size("1024Mi")}, ""},
		} {
			t.Run(change.name, func(t *testing.T) {
				c := cluster("storage-"+string(rune('a'+i)), 3)
				c.Namespace = g.ns
				c.Spec.Storage = change.from
				if err := g.c.Create(t.Context(), c); err != nil {
					t.Fatal(err)
				}
				c.Spec.Storage = change.to
				err := g.c.Update(t.Context(), c)
				switch {
				case change.refused == "" && err != nil:
					t.Errorf("changing storage: %v, want it accepted", err)
				case change.refused != "" && (err == nil || !strings.Contains(err.Error(), change.refused)):
					t.Errorf("changing storage: %v, want it refused with %q", err, change.refused)
				}
			})
		}
	})

	t.Run("the pod template and repository may change", func(t *testing.T) {
		c := cluster("retemplated", 3)
		c.Namespace = g.ns
		if err := g.c.Create(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		c.Spec.Repository = "registry.example/etcd"
		c.Spec.PodTemplate.Labels = map[string]string{"team": "a"}
		if err := g.c.Update(t.Context(), c); err != nil {
			t.Errorf("changing the pod template: %v", err)
		}
	})
}

// TestHooksConstructorsNameWhatIsMissing: hooks built without what they
// need are refused at setup, naming the fields, not at the first pass.
func TestHooksConstructorsNameWhatIsMissing(t *testing.T) {
	if _, err := controller.NewClusterHooks(controller.ClusterConfig{}); err == nil ||
		!strings.Contains(err.Error(), "ClusterConfig.Children, ClusterConfig.Client, ClusterConfig.Etcd, ClusterConfig.Runner, ClusterConfig.Stores") {
		t.Errorf("NewClusterHooks(empty) = %v, want an error naming the five required fields", err)
	}
	if _, err := controller.NewBackupHooks(controller.BackupConfig{}); err == nil ||
		!strings.Contains(err.Error(), "BackupConfig.Client, BackupConfig.Etcd, BackupConfig.Runner, BackupConfig.Stores") {
		t.Errorf("NewBackupHooks(empty) = %v, want an error naming the four required fields", err)
	}
}
