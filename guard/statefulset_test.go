package guard_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/testenv"
)

// TestHoldStatefulSetThroughNamespaceDeletion: the pods and claims a
// StatefulSet's controller makes from a template HoldStatefulSet labelled
// outlive the namespace's deletion until Release, with the real
// StatefulSet, namespace and garbage-collector controllers. Hold on the
// StatefulSet alone leaves them out: the namespace controller deletes the
// pods first, while the owner's final work may still need them.
func TestHoldStatefulSetThroughNamespaceDeletion(t *testing.T) {
	ctx := t.Context()
	installPolicy(t, "guard-sts-test")
	env.StartControllerManager(t, append(slices.Clone(testenv.DefaultControllers), "statefulset-controller")...)

	ns := newNamespace(t)
	g := newGuard(t)
	w := newWidget(t, ns, "w")
	cm, err := g.Ensure(ctx, w)
	must(t, err)
	labels := map[string]string{"app": "db"}
	sts := guard.HoldStatefulSet(&appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](2),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
		},
	}, cm)
	must(t, env.Client.Create(ctx, sts))
	made := []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-1"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-db-0"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-db-1"}},
	}
	eventually(t, "the StatefulSet's pods and claims", func(ctx context.Context) (bool, error) {
		for _, obj := range made {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})

	must(t, env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	eventually(t, "the namespace controller to be refused", func(ctx context.Context) (bool, error) {
		var n corev1.Namespace
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NamespaceDeletionContentFailure && strings.Contains(c.Message, "held by guard") {
				return true, nil
			}
		}
		return false, nil
	})
	// The namespace controller has had its turn at every object; a few
	// seconds more for any it deletes late.
	time.Sleep(3 * time.Second)
	for _, obj := range append(made, sts) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err != nil || obj.GetDeletionTimestamp() != nil {
			t.Errorf("%T %s while the guard holds it: %v, deletion %v; want it kept", obj, obj.GetName(), err, obj.GetDeletionTimestamp())
		}
	}

	// The namespace controller deleted the unheld owner already.
	must(t, g.Release(ctx, w))
	for _, obj := range made {
		testenv.WaitForDeletion(t, env.Client, obj, time.Minute)
	}
}
