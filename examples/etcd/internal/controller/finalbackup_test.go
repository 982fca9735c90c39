package controller

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/backup"
	"github.com/opkit-dev/opkit/backup/fsstore"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// TestFinalBackupTakenIgnoresClocks: the final backup of a deletion is
// recognised by the cluster it belongs to, not by comparing the operator's
// clock (the manifest's start time) with the API server's
// deletionTimestamp. With the operator's clock a minute behind, every
// final backup looked older than the deletion, and each pass took another.
func TestFinalBackupTakenIgnoresClocks(t *testing.T) {
	deleted := metav1.NewTime(time.Now().Truncate(time.Second))
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: types.UID("uid-1"), DeletionTimestamp: &deleted}}
	tests := []struct {
		name  string
		start time.Time // the operator's clock when the backup started
		extra map[string]string
		want  bool
	}{
		{"none", time.Time{}, nil, false},
		{"this deletion's, the operator's clock a minute behind", deleted.Add(-time.Minute), finalBackupExtra(c), true},
		{"this deletion's, clocks agree", deleted.Add(2 * time.Second), finalBackupExtra(c), true},
		{"a scheduled backup after the deletion", deleted.Add(time.Minute), map[string]string{ExtraTrigger: TriggerSchedule}, false},
		{"the final backup of an earlier cluster of the same name", deleted.Add(time.Minute),
			map[string]string{ExtraTrigger: TriggerFinal, ExtraClusterUID: "uid-0"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := fsstore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if tt.extra != nil {
				snap := backup.SnapshotterFunc(func(_ context.Context, w io.Writer) (backup.Metadata, error) {
					_, err := io.Copy(w, bytes.NewReader([]byte("db")))
					return backup.Metadata{Engine: "etcd", Format: "etcd-snapshot-db", Extra: tt.extra}, err
				})
				if _, err := backup.Backup(t.Context(), store, snap, backup.WithClock(func() time.Time { return tt.start })); err != nil {
					t.Fatal(err)
				}
			}
			_, got, err := finalBackupOf(t.Context(), store, c.UID)
			if err != nil || got != tt.want {
				t.Errorf("finalBackupOf found %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
