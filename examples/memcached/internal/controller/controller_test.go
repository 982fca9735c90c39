package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
	"github.com/opkit-dev/opkit/statusutil"
	"github.com/opkit-dev/opkit/statusutil/statustest"
)

func container(d *appsv1.Deployment) corev1.Container { return d.Spec.Template.Spec.Containers[0] }

// Every spec field reaches the Deployment, and so is rolled out; removing
// an optional field removes it from the Deployment too.
func TestEverySpecFieldChangesTheDeployment(t *testing.T) {
	zoneAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
		}}},
	}}
	tests := []struct {
		name   string
		before func(*v1beta1.Memcached) // applied at creation
		change func(*v1beta1.Memcached)
		got    func(*appsv1.Deployment) any
		want   any
	}{
		{"replicas", nil, func(m *v1beta1.Memcached) { m.Spec.Replicas = 5 },
			func(d *appsv1.Deployment) any { return *d.Spec.Replicas }, int32(5)},
		{"image", nil, func(m *v1beta1.Memcached) { m.Spec.Image = "memcached:1.6.38" },
			func(d *appsv1.Deployment) any { return container(d).Image }, "memcached:1.6.38"},
		{"port", nil, func(m *v1beta1.Memcached) { m.Spec.Port = 22122 },
			func(d *appsv1.Deployment) any {
				return []any{container(d).Args[:2], container(d).Ports[0].ContainerPort}
			}, []any{[]string{"-p", "22122"}, int32(22122)}},
		{"cache.memoryMB", nil, func(m *v1beta1.Memcached) { m.Spec.Cache.MemoryMB = 512 },
			func(d *appsv1.Deployment) any { return container(d).Args[2:4] }, []string{"-m", "512"}},
		{"resources", nil, func(m *v1beta1.Memcached) {
			m.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}
		}, func(d *appsv1.Deployment) any { l := container(d).Resources.Limits; return l.Memory().String() }, "128Mi"},
		{"resources removed", func(m *v1beta1.Memcached) {
			m.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		}, func(m *v1beta1.Memcached) { m.Spec.Resources = corev1.ResourceRequirements{} },
			func(d *appsv1.Deployment) any { return len(container(d).Resources.Limits) }, 0},
		{"cache.extraArgs", nil, func(m *v1beta1.Memcached) { m.Spec.Cache.ExtraArgs = []string{"-v", "-c", "4096"} },
			func(d *appsv1.Deployment) any { return container(d).Args[4:] }, []string{"-v", "-c", "4096"}},
		{"cache.extraArgs removed", func(m *v1beta1.Memcached) { m.Spec.Cache.ExtraArgs = []string{"-v"} },
			func(m *v1beta1.Memcached) { m.Spec.Cache.ExtraArgs = nil },
			func(d *appsv1.Deployment) any { return container(d).Args }, []string{"-p", "11211", "-m", "64"}},
		{"placement.affinity", nil, func(m *v1beta1.Memcached) { m.Spec.Placement.Affinity = zoneAffinity },
			func(d *appsv1.Deployment) any { return d.Spec.Template.Spec.Affinity }, zoneAffinity},
		{"placement.affinity removed", func(m *v1beta1.Memcached) { m.Spec.Placement.Affinity = zoneAffinity },
			func(m *v1beta1.Memcached) { m.Spec.Placement.Affinity = nil },
			func(d *appsv1.Deployment) any { return d.Spec.Template.Spec.Affinity == nil }, true},
		{"placement.topologySpreadConstraints", nil, func(m *v1beta1.Memcached) {
			m.Spec.Placement.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
			}}
		}, func(d *appsv1.Deployment) any {
			c := d.Spec.Template.Spec.TopologySpreadConstraints
			if len(c) != 1 || c[0].LabelSelector == nil {
				return c
			}
			return []any{c[0].TopologyKey, c[0].LabelSelector.MatchLabels[LabelInstance]}
		}, []any{"kubernetes.io/hostname", "mc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.memcached("mc", 3)
			if tt.before != nil {
				tt.before(m)
			}
			f.create(m)
			f.pass("mc")
			before := &appsv1.Deployment{}
			f.get("mc", before)

			f.update("mc", tt.change)
			f.pass("mc")
			after := &appsv1.Deployment{}
			f.get("mc", after)
			if diff := cmp.Diff(tt.want, tt.got(after)); diff != "" {
				t.Errorf("Deployment after changing %s (-want +got):\n%s", tt.name, diff)
			}
			if after.Generation == before.Generation {
				t.Errorf("Deployment generation stayed %d: the change was not applied", after.Generation)
			}
		})
	}
}

// The pod template follows the restricted Pod Security Standard.
func TestPodSecurityIsRestricted(t *testing.T) {
	d := desiredDeployment(&v1beta1.Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: "mc", Namespace: "ns"},
		Spec:       v1beta1.MemcachedSpec{Replicas: 1, Image: "memcached:1.6", Port: 11211, Cache: v1beta1.CacheSpec{MemoryMB: 64}},
	})
	pod, c := d.Spec.Template.Spec, container(d)
	got := map[string]any{
		"pod.runAsNonRoot":                   *pod.SecurityContext.RunAsNonRoot,
		"pod.runAsUser":                      *pod.SecurityContext.RunAsUser,
		"pod.seccompProfile":                 pod.SecurityContext.SeccompProfile.Type,
		"container.allowPrivilegeEscalation": *c.SecurityContext.AllowPrivilegeEscalation,
		"container.readOnlyRootFilesystem":   *c.SecurityContext.ReadOnlyRootFilesystem,
		"container.capabilities.drop":        c.SecurityContext.Capabilities.Drop,
		"automountServiceAccountToken":       *pod.AutomountServiceAccountToken,
	}
	want := map[string]any{
		"pod.runAsNonRoot":                   true,
		"pod.runAsUser":                      int64(memcacheUID),
		"pod.seccompProfile":                 corev1.SeccompProfileTypeRuntimeDefault,
		"container.allowPrivilegeEscalation": false,
		"container.readOnlyRootFilesystem":   true,
		"container.capabilities.drop":        []corev1.Capability{"ALL"},
		"automountServiceAccountToken":       false,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod security (-want +got):\n%s", diff)
	}
}

// The headless Service always exists; the PodDisruptionBudget exists only
// for more than one pod.
func TestServiceAndPodDisruptionBudget(t *testing.T) {
	f := newFixture(t)
	f.create(f.memcached("mc", 3))
	steps := []struct {
		size    int32
		wantPDB bool
	}{{3, true}, {1, false}, {0, false}, {2, true}}
	for _, s := range steps {
		f.update("mc", func(m *v1beta1.Memcached) { m.Spec.Replicas = s.size })
		f.pass("mc")

		svc := &corev1.Service{}
		f.get("mc", svc)
		gotSvc := []any{svc.Spec.ClusterIP, svc.Spec.Ports[0].Port, svc.Spec.Ports[0].TargetPort.String(), svc.Spec.Selector}
		wantSvc := []any{"None", int32(11211), PortName, selectorLabels(f.memcached("mc", 0))}
		if diff := cmp.Diff(wantSvc, gotSvc); diff != "" {
			t.Errorf("size %d: Service (-want +got):\n%s", s.size, diff)
		}
		pdb := &policyv1.PodDisruptionBudget{}
		err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: f.ns, Name: "mc"}, pdb)
		switch {
		case s.wantPDB && err != nil:
			t.Errorf("size %d: PodDisruptionBudget: %v", s.size, err)
		case s.wantPDB && pdb.Spec.MaxUnavailable.IntValue() != 1:
			t.Errorf("size %d: PodDisruptionBudget maxUnavailable = %v, want 1", s.size, pdb.Spec.MaxUnavailable)
		case !s.wantPDB && !apierrors.IsNotFound(err):
			t.Errorf("size %d: PodDisruptionBudget should be gone, got %v", s.size, err)
		}
	}
}

// status.nodes lists the pods, Ready follows the Deployment, and the pass
// waits while the rollout is under way.
func TestStatusFollowsPodsAndDeployment(t *testing.T) {
	f := newFixture(t)
	f.create(f.memcached("mc", 3))
	// The rollout's progress arrives as the Deployment's watch events (it
	// is owned): a pass polling every waiting Memcached would find nothing
	// new, and at N Memcacheds rolling out it is N passes per poll.
	if res := f.pass("mc"); res.RequeueAfter != 0 {
		t.Errorf("first pass: RequeueAfter = %v, want 0 (the Deployment's watch brings the next pass)", res.RequeueAfter)
	}
	m := &v1beta1.Memcached{}
	f.get("mc", m)
	statustest.AssertCondition(t, m, metav1.Condition{Type: statusutil.ConditionReconciling, Status: metav1.ConditionTrue, Reason: ReasonRollingOut})
	statustest.AssertCondition(t, m, metav1.Condition{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: ReasonRollingOut})

	for _, p := range []string{"mc-c", "mc-a", "mc-b"} {
		f.createPod("mc", p)
	}
	// A pod being deleted is no longer a node; another Memcached's pods
	// are not ours.
	leaving := f.createPod("mc", "mc-leaving")
	leaving.Finalizers = []string{"test.opkit.dev/hold"}
	testkit.Must(t, env.Client.Update(t.Context(), leaving))
	testkit.Must(t, env.Client.Delete(t.Context(), leaving))
	t.Cleanup(func() {
		leaving.Finalizers = nil
		_ = env.Client.Update(context.Background(), leaving)
	})
	f.createPod("other", "other-a")
	f.rollOut("mc")

	if res := f.pass("mc"); res.RequeueAfter != 0 {
		t.Errorf("rolled-out pass: RequeueAfter = %v, want 0", res.RequeueAfter)
	}
	f.get("mc", m)
	if diff := cmp.Diff([]string{"mc-a", "mc-b", "mc-c"}, m.Status.Nodes); diff != "" {
		t.Errorf("status.nodes (-want +got):\n%s", diff)
	}
	if m.Status.ReadyReplicas != 3 || m.Status.ObservedGeneration != m.Generation {
		t.Errorf("readyReplicas %d observedGeneration %d, want 3 and %d", m.Status.ReadyReplicas, m.Status.ObservedGeneration, m.Generation)
	}
	if want := "app.kubernetes.io/instance=mc,app.kubernetes.io/name=memcached"; m.Status.Selector != want {
		t.Errorf("status.selector = %q, want %q", m.Status.Selector, want)
	}
	for _, c := range []metav1.Condition{
		{Type: statusutil.ConditionReady, Status: metav1.ConditionTrue},
		{Type: v1beta1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonAllAvailable},
		{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: ReasonRolloutComplete},
		{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonAsExpected},
	} {
		if c.Reason == "" {
			c.Reason = statusutil.Get(m, c.Type).Reason
		}
		statustest.AssertCondition(t, m, c)
	}
	statustest.AssertNoCondition(t, m, statusutil.ConditionReconciling)
	statustest.AssertConditionsValid(t, m)

	// A stuck rollout is Degraded, and so not Ready.
	d := &appsv1.Deployment{}
	f.get("mc", d)
	d.Status.AvailableReplicas = 2
	d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet mc-1 has timed out progressing.",
	})
	testkit.Must(t, env.Client.Status().Update(t.Context(), d))
	f.pass("mc")
	f.get("mc", m)
	statustest.AssertCondition(t, m, metav1.Condition{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonDeadlineExceeded})
	if !statusutil.IsFalse(m, statusutil.ConditionReady) {
		t.Errorf("Ready of a degraded Memcached = %+v, want False", statusutil.Get(m, statusutil.ConditionReady))
	}
}

// Scaling and a new pod template are announced with events.
func TestScaleAndRolloutEvents(t *testing.T) {
	f := newFixture(t)
	f.create(f.memcached("mc", 1))
	f.pass("mc")
	f.drainEvents()
	f.update("mc", func(m *v1beta1.Memcached) { m.Spec.Replicas = 2 })
	f.pass("mc")
	if evs := f.drainEvents(); !hasEvent(evs, EventReasonScaled) || hasEvent(evs, EventReasonRollingOut) {
		t.Errorf("after scaling: events %q, want %s only", evs, EventReasonScaled)
	}
	f.update("mc", func(m *v1beta1.Memcached) { m.Spec.Image = "memcached:1.6.38" })
	f.pass("mc")
	if evs := f.drainEvents(); !hasEvent(evs, EventReasonRollingOut) || hasEvent(evs, EventReasonScaled) {
		t.Errorf("after an image change: events %q, want %s only", evs, EventReasonRollingOut)
	}
}

// A Memcached has nothing outside the cluster to clean up: it carries no
// finalizer, and deleting it is the API server's and the garbage
// collector's work alone (every child has a controller reference), with no
// pass of the operator in between.
func TestDeletionNeedsNoPass(t *testing.T) {
	f := newFixture(t)
	f.create(f.memcached("mc", 2))
	f.pass("mc")
	m := &v1beta1.Memcached{}
	f.get("mc", m)
	if len(m.Finalizers) != 0 {
		t.Fatalf("finalizers = %v, want none", m.Finalizers)
	}
	// The garbage collector (not running in envtest) deletes them after it.
	for _, child := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		f.get("mc", child)
		if ref := metav1.GetControllerOf(child); ref == nil || ref.UID != m.UID {
			t.Errorf("%T controller = %v, want the Memcached", child, ref)
		}
	}
	testkit.Must(t, env.Client.Delete(t.Context(), m))
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m); !apierrors.IsNotFound(err) {
		t.Errorf("Memcached after delete: %v (finalizers %v), want NotFound", err, m.Finalizers)
	}
	// A pass for a deleted object is a quiet no-op.
	f.pass("mc")
}

// A Memcached created by an earlier version of the operator carries its
// finalizer: deleting it still completes, the pass releasing the finalizer.
func TestDeletionReleasesAnEarlierFinalizer(t *testing.T) {
	f := newFixture(t)
	old := f.memcached("mc", 1)
	old.Finalizers = []string{f.r.FinalizerName()}
	f.create(old)
	f.pass("mc")
	m := &v1beta1.Memcached{}
	f.get("mc", m)
	testkit.Must(t, env.Client.Delete(t.Context(), m))
	f.pass("mc")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), m); !apierrors.IsNotFound(err) {
		t.Errorf("Memcached after the pass: %v (finalizers %v), want NotFound", err, m.Finalizers)
	}
	f.pass("mc")
}

// Other writers of the Memcached and of its Deployment cause no conflict:
// their fields survive, ours are restored.
func TestConcurrentWriters(t *testing.T) {
	f := newFixture(t)
	f.create(f.memcached("mc", 2))
	f.pass("mc")

	// Another controller owns a condition on the Memcached, applied with
	// its own field manager, and a user labels it.
	other := &unstructured.Unstructured{}
	other.SetGroupVersionKind(v1beta1.GroupVersion.WithKind("Memcached"))
	other.SetNamespace(f.ns)
	other.SetName("mc")
	other.Object["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "BackedUp", "status": "True", "reason": "Snapshot", "message": "",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}
	testkit.Must(t, env.Client.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(other), client.FieldOwner("backup-controller")))
	f.update("mc", func(m *v1beta1.Memcached) { m.Labels = map[string]string{"team": "web"} })

	// Someone scales the Deployment by hand and annotates it.
	d := &appsv1.Deployment{}
	f.get("mc", d)
	d.Spec.Replicas = ptr.To[int32](7)
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations["note"] = "hand-scaled"
	testkit.Must(t, env.Client.Update(t.Context(), d))

	// Concurrent passes of the Reconciler (another replica before leader
	// election settles) and a spec change in between.
	f.pass("mc")
	f.update("mc", func(m *v1beta1.Memcached) { m.Spec.Replicas = 3 })
	f.pass("mc")
	f.pass("mc")

	f.get("mc", d)
	if *d.Spec.Replicas != 3 || d.Annotations["note"] != "hand-scaled" {
		t.Errorf("Deployment replicas %d annotations %v: want 3 and the hand annotation kept", *d.Spec.Replicas, d.Annotations)
	}
	m := &v1beta1.Memcached{}
	f.get("mc", m)
	statustest.AssertCondition(t, m, metav1.Condition{Type: "BackedUp", Status: metav1.ConditionTrue, Reason: "Snapshot"})
	if m.Labels["team"] != "web" || m.Status.ObservedGeneration != m.Generation {
		t.Errorf("labels %v observedGeneration %d (generation %d)", m.Labels, m.Status.ObservedGeneration, m.Generation)
	}
}

// Invalid specs are rejected by the API server at admission, with a message
// naming the field.
func TestInvalidSpecsAreRejectedAtAdmission(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name      string
		spec      map[string]any
		wantField string
	}{
		{"replicas missing", map[string]any{"image": "memcached:1.6"}, "spec.replicas"},
		{"replicas too large", map[string]any{"replicas": 101}, "spec.replicas"},
		{"replicas negative", map[string]any{"replicas": -1}, "spec.replicas"},
		{"privileged port", map[string]any{"replicas": 1, "port": 80}, "spec.port"},
		{"empty image", map[string]any{"replicas": 1, "image": ""}, "spec.image"},
		{"cache.memoryMB zero", map[string]any{"replicas": 1, "cache": map[string]any{"memoryMB": 0}}, "spec.cache.memoryMB"},
		{"cache.extraArgs sets the port", map[string]any{"replicas": 1, "cache": map[string]any{"extraArgs": []any{"-v", "-p", "1234"}}}, "spec.cache.extraArgs"},
		{"cache.extraArgs sets the memory", map[string]any{"replicas": 1, "cache": map[string]any{"extraArgs": []any{"--memory-limit=1024"}}}, "spec.cache.extraArgs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": tt.spec}}
			u.SetGroupVersionKind(v1beta1.GroupVersion.WithKind("Memcached"))
			u.SetNamespace(f.ns)
			u.SetGenerateName("invalid-")
			err := env.Client.Create(t.Context(), u)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("Create = %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name %s", err, tt.wantField)
			}
		})
	}

	// And a valid one with every field is accepted, defaults filled in.
	valid := f.memcached("valid", 2)
	valid.Spec.Cache.ExtraArgs = []string{"-v", "-c", "1024", "-P", "/tmp/pid"}
	valid.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
	f.create(valid)
	got := []any{valid.Spec.Image, valid.Spec.Port, valid.Spec.Cache.MemoryMB}
	if diff := cmp.Diff([]any{v1beta1.DefaultImage, int32(v1beta1.DefaultPort), int32(v1beta1.DefaultCacheMemoryMB)}, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// What the schema cannot check, Validate does: the object stalls with a
// message naming the field, and nothing is created.
func TestSemanticErrorsStall(t *testing.T) {
	tests := []struct {
		name      string
		spec      func(*v1beta1.MemcachedSpec)
		wantField string
	}{
		{"requests above limits", func(s *v1beta1.MemcachedSpec) {
			s.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}
		}, "spec.resources.requests[cpu]"},
		{"cache.memoryMB not below the memory limit", func(s *v1beta1.MemcachedSpec) {
			s.Cache.MemoryMB = 1024
			s.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, "spec.cache.memoryMB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.memcached("mc", 1)
			tt.spec(&m.Spec)
			f.create(m)
			f.pass("mc")
			f.get("mc", m)
			statustest.AssertCondition(t, m, metav1.Condition{Type: statusutil.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidSpec"})
			if msg := statusutil.Get(m, statusutil.ConditionStalled).Message; !strings.Contains(msg, tt.wantField) {
				t.Errorf("Stalled message %q does not name %s", msg, tt.wantField)
			}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(m), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
				t.Errorf("Deployment of an invalid Memcached: %v, want NotFound", err)
			}
		})
	}
}
