package controller

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// revisionAnnotation is the deployment controller's rollout counter on
// every Deployment.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// trimDeployment is the cache transform of Deployments: of what the
// operator does not read it drops the managedFields, the revision
// annotation, and the Available condition (availability comes from
// status.availableReplicas). desiredDeployment must not set that
// annotation, or every pass would apply.
func trimDeployment(in any) (any, error) {
	d, ok := in.(*appsv1.Deployment)
	if !ok {
		return stripManagedFields(in)
	}
	d.ManagedFields = nil
	d.Labels = shareLabels(d.Labels)
	d.Spec.Template.Labels = shareLabels(d.Spec.Template.Labels)
	if d.Spec.Selector != nil {
		d.Spec.Selector.MatchLabels = shareLabels(d.Spec.Selector.MatchLabels)
	}
	if _, ok := d.Annotations[revisionAnnotation]; ok {
		if len(d.Annotations) == 1 {
			d.Annotations = nil
		} else {
			delete(d.Annotations, revisionAnnotation)
		}
	}
	var kept []appsv1.DeploymentCondition
	for _, c := range d.Status.Conditions {
		if c.Type != appsv1.DeploymentAvailable {
			kept = append(kept, c)
		}
	}
	if len(kept) != len(d.Status.Conditions) {
		d.Status.Conditions = kept
	}
	return d, nil
}

// trimService is the cache transform of Services: it drops the
// managedFields and the fields the API server defaults, which
// desiredService leaves unset and nothing reads. One that desiredService
// starts setting must be kept here, or every pass would apply.
func trimService(in any) (any, error) {
	s, ok := in.(*corev1.Service)
	if !ok {
		return stripManagedFields(in)
	}
	s.ManagedFields = nil
	s.Labels = shareLabels(s.Labels)
	s.Spec.Selector = shareLabels(s.Spec.Selector)
	s.Spec.ClusterIPs = nil
	s.Spec.IPFamilies = nil
	s.Spec.IPFamilyPolicy = nil
	s.Spec.InternalTrafficPolicy = nil
	s.Spec.SessionAffinity = ""
	s.Spec.Type = ""
	return s, nil
}

// trimPodMetadata is the cache transform of the pods' metadata: a pod is
// read for its name, labels and deletion only.
func trimPodMetadata(in any) (any, error) {
	p, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return stripManagedFields(in)
	}
	p.ObjectMeta = metav1.ObjectMeta{
		Name:              p.Name,
		Namespace:         p.Namespace,
		UID:               p.UID,
		ResourceVersion:   p.ResourceVersion,
		Labels:            shareLabels(p.Labels),
		DeletionTimestamp: p.DeletionTimestamp,
		Finalizers:        p.Finalizers,
	}
	return p, nil
}

// shareLabels returns l with its keys, and the values that repeat between
// objects, shared with other cached objects: every child and pod
// carries the same few labels, each decoded into strings of its own.
func shareLabels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return l
	}
	shared := make(map[string]string, len(l))
	for k, v := range l {
		if k != LabelInstance && k != appsv1.DefaultDeploymentUniqueLabelKey {
			v = labelStrings.share(v)
		}
		shared[labelStrings.share(k)] = v
	}
	return shared
}

// maxLabelStrings bounds labelStrings: past it, label keys and values no
// longer repeat between objects.
const maxLabelStrings = 256

// labelStrings holds the shared copies. Hand-written: unique.Make's
// strings stop being shared once the handle is collected.
var labelStrings internTable

type internTable struct {
	mu sync.Mutex
	m  map[string]string
}

func (t *internTable) share(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if len(t.m) < maxLabelStrings {
		if t.m == nil {
			t.m = map[string]string{}
		}
		t.m[s] = s
	}
	return s
}

// stripManagedFields is the cache transform of the other kinds, and of
// what the transforms above do not know (the informer's tombstones).
var stripManagedFields = cache.TransformStripManagedFields()
