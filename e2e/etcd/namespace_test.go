package etcd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestNamespaceDeletionEnds: deleting the namespace of an EtcdCluster
// whose final backup cannot be taken (no member answers here) waits for
// it: the cluster says why (Reconciling, FinalBackupBlocked), a Warning
// regarding the Namespace says so where kubectl describe namespace shows
// it, and once spec.backup.skipFinalBackup is set the cluster goes and so
// does the namespace. Before issue #80 the operator let the cluster go
// without its final backup on the first such pass; before that, the
// finalizer tried to recreate the member every pass and said nothing.
func TestNamespaceDeletionEnds(t *testing.T) {
	ns := envconf.RandomName("etcd-ns", 16)
	f := features.New("namespace deletion").
		Assess("the namespace of a cluster with a final backup due waits, then goes without it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			r := cfg.Client().Resources()
			testkit.Must(t, r.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			testkit.Must(t, os.MkdirAll(filepath.Join(backupRoot, ns, "backups"), 0o700))
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
				Spec: v1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Storage: v1alpha1.StorageSpec{Ephemeral: true},
					Backup: &v1alpha1.BackupSpec{StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}}
			testkit.Must(t, r.Create(ctx, c))
			waitFor(ctx, t, "pod e2e-0 and the cluster's finalizer", func(ctx context.Context) (bool, string) {
				if err := r.Get(ctx, clusterName+"-0", ns, &corev1.Pod{}); err != nil {
					return false, err.Error()
				}
				if err := r.Get(ctx, clusterName, ns, c); err != nil {
					return false, err.Error()
				}
				return len(c.Finalizers) > 0, "finalizers " + fmt.Sprint(c.Finalizers)
			})
			testkit.Must(t, r.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			waitFor(ctx, t, "the cluster to say its final backup is blocked", func(ctx context.Context) (bool, string) {
				if err := r.Get(ctx, clusterName, ns, c); err != nil {
					return false, err.Error()
				}
				rc := statusutil.Get(c, statusutil.ConditionReconciling)
				return rc != nil && rc.Reason == reasonFinalBackupBlocked, fmt.Sprintf("%+v", rc)
			})
			waitFor(ctx, t, "a Warning FinalBackupBlocked regarding Namespace "+ns, func(ctx context.Context) (bool, string) {
				var events eventsv1.EventList
				if err := r.WithNamespace(metav1.NamespaceDefault).List(ctx, &events); err != nil {
					return false, err.Error()
				}
				for _, e := range events.Items {
					if e.Reason == reasonFinalBackupBlocked && e.Regarding.Kind == "Namespace" && e.Regarding.Name == ns {
						return true, ""
					}
				}
				return false, fmt.Sprintf("%d events in default", len(events.Items))
			})
			// The documented way out.
			updateSpec(ctx, t, r, ns, func(s *v1alpha1.EtcdClusterSpec) { s.Backup.SkipFinalBackup = true })
			waitFor(ctx, t, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string) {
				var n corev1.Namespace
				err := r.Get(ctx, ns, "", &n)
				if apierrors.IsNotFound(err) {
					return true, ""
				}
				var left []string
				for _, cond := range n.Status.Conditions {
					left = append(left, string(cond.Type)+": "+cond.Message)
				}
				return false, fmt.Sprint(left)
			})
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if t.Failed() {
				t.Logf("operator log (end):\n%s", operator.Log())
			}
			_ = cfg.Client().Resources().Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}
