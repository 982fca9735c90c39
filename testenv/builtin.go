package testenv

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// envtest runs no built-in controller: these write the status the
// deployment, statefulset and job controllers would, so that an operator
// waiting on them goes on.

// SetDeploymentAvailable makes the Deployment at key look rolled out at
// its generation with spec.replicas available.
func SetDeploymentAvailable(ctx context.Context, c client.Client, key client.ObjectKey) error {
	var d appsv1.Deployment
	if err := c.Get(ctx, key, &d); err != nil {
		return fmt.Errorf("testenv.SetDeploymentAvailable: %w", err)
	}
	n := replicas(d.Spec.Replicas)
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		},
	}
	if err := c.Status().Update(ctx, &d); err != nil {
		return fmt.Errorf("testenv.SetDeploymentAvailable: %w", err)
	}
	return nil
}

// SetStatefulSetReady makes the StatefulSet at key look rolled out at its
// generation with spec.replicas ready.
func SetStatefulSetReady(ctx context.Context, c client.Client, key client.ObjectKey) error {
	var s appsv1.StatefulSet
	if err := c.Get(ctx, key, &s); err != nil {
		return fmt.Errorf("testenv.SetStatefulSetReady: %w", err)
	}
	n := replicas(s.Spec.Replicas)
	rev := fmt.Sprintf("%s-%d", s.Name, s.Generation)
	s.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n, CurrentReplicas: n, UpdatedReplicas: n,
		AvailableReplicas: n, CurrentRevision: rev, UpdateRevision: rev,
	}
	if err := c.Status().Update(ctx, &s); err != nil {
		return fmt.Errorf("testenv.SetStatefulSetReady: %w", err)
	}
	return nil
}

// SetJobComplete makes the Job at key look succeeded, with the
// conditions and times the API server requires of a complete Job.
func SetJobComplete(ctx context.Context, c client.Client, key client.ObjectKey) error {
	var j batchv1.Job
	if err := c.Get(ctx, key, &j); err != nil {
		return fmt.Errorf("testenv.SetJobComplete: %w", err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	start := metav1.NewTime(now.Add(-time.Second))
	j.Status = batchv1.JobStatus{
		StartTime: &start, CompletionTime: &now, Succeeded: replicas(j.Spec.Completions),
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
		},
	}
	if err := c.Status().Update(ctx, &j); err != nil {
		return fmt.Errorf("testenv.SetJobComplete: %w", err)
	}
	return nil
}

// replicas is p, or 1 (the API server's default) when nil.
func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
