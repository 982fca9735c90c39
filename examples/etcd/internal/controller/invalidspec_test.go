package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestInvalidFieldKeepsTheClusterHealing: a field the API server accepts
// but the operator refuses (a schedule that does not parse, a version it
// cannot move to) is reported as Stalled InvalidSpec, and the pass goes on
// with everything the field does not touch: a lost member is replaced at
// the version the members run, and scheduled backups go on beside a broken
// defragmentation schedule. Before, the pass stopped at validation and the
// cluster stayed a member short until the spec was fixed.
func TestInvalidFieldKeepsTheClusterHealing(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *v1alpha1.EtcdCluster)
		field  string
		// backups: a scheduled backup is due and must be taken.
		backups bool
	}{
		{"backup schedule", func(c *v1alpha1.EtcdCluster) { c.Spec.Backup.Schedule = "every day" }, "spec.backup.schedule", false},
		{"defragmentation schedule", func(c *v1alpha1.EtcdCluster) {
			c.Spec.Backup.Schedule = "@every 1h"
			c.Spec.Defragmentation = &v1alpha1.DefragmentationSpec{Schedule: "weekly"}
		}, "spec.defragmentation.schedule", true},
		{"version downgrade", func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.4.30" }, "spec.version", false},
		{"version two minors ahead", func(c *v1alpha1.EtcdCluster) { c.Spec.Version = "3.8.0" }, "spec.version", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			g.mountPVCStore("backups")
			c := cluster("h", 3)
			c.Spec.Backup = &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}
			g.create(c)
			g.converge("h", 20)
			before := g.etcdMembers()

			c = g.get("h")
			tt.mutate(c)
			if err := g.c.Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			if err := g.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "h-1", Namespace: g.ns}}); err != nil {
				t.Fatal(err)
			}
			g.fake.SetHealthy(controller.PeerURL(c, "h-1"), false)
			g.clock.advance(time.Hour + time.Minute)
			g.converge("h", 10)
			_ = g.operationPass("h") // Stalled: the pass's error is the invalid field

			c = g.get("h")
			stalled := statusutil.Get(c, statusutil.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != reconcile.ReasonInvalidSpec || !strings.Contains(stalled.Message, tt.field) {
				t.Errorf("Stalled = %+v, want True, %s, naming %s", stalled, reconcile.ReasonInvalidSpec, tt.field)
			}
			if diff := cmp.Diff(before, g.etcdMembers()); diff != "" {
				t.Errorf("etcd members (-want +got):\n%s", diff)
			}
			var p corev1.Pod
			if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: "h-1"}, &p); err != nil {
				t.Fatalf("h-1 not recreated: %v", err)
			}
			if got := p.Labels[controller.LabelVersion]; got != "3.6.16" {
				t.Errorf("h-1 recreated at version %q, want 3.6.16, the members' version", got)
			}
			if taken := c.Status.Backup.LastBackupID != ""; taken != tt.backups {
				t.Errorf("scheduled backup taken: %t, want %t (status.backup %+v)", taken, tt.backups, c.Status.Backup)
			}
		})
	}
}
