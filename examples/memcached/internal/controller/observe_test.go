package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/reconcile"
)

// Each step of a rollout the Deployment's status shows is a new Waiting
// message: reconcile.WithProgressDelay counts its delay from the last
// change of the message, so a rollout that keeps moving is not reported as
// slow.
func TestObserveDeploymentReportsEachStep(t *testing.T) {
	const size = 2
	steps := []struct {
		name   string
		gen    int64 // the Deployment's metadata.generation
		status appsv1.DeploymentStatus
	}{
		{"created, not observed yet", 1, appsv1.DeploymentStatus{}},
		{"observed, no pod yet", 1, appsv1.DeploymentStatus{ObservedGeneration: 1}},
		{"one pod created", 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1}},
		{"both pods created", 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2}},
		{"one pod ready", 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1}},
		{"one pod available", 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1, AvailableReplicas: 1}},
		{"both ready, one available", 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 1}},
		{"a spec change, not observed yet", 2, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}},
	}
	seen := map[string]string{}
	for _, s := range steps {
		m := &v1alpha1.Memcached{Spec: v1alpha1.MemcachedSpec{Size: size}}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: s.gen}, Status: s.status}
		res := observeDeployment(m, dep)
		if res.Kind() != reconcile.KindWaiting {
			t.Errorf("%s: %v, want Waiting", s.name, res.Kind())
			continue
		}
		key := res.Reason() + ": " + res.Message()
		if prev, ok := seen[key]; ok {
			t.Errorf("%s and %s both report %q: the progress delay would not see the step", prev, s.name, key)
		}
		seen[key] = s.name
	}

	m := &v1alpha1.Memcached{Spec: v1alpha1.MemcachedSpec{Size: size}}
	done := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.DeploymentStatus{
		ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	if diff := cmp.Diff(reconcile.KindDone, observeDeployment(m, done).Kind()); diff != "" {
		t.Errorf("a rolled-out Deployment (-want +got):\n%s", diff)
	}
}
