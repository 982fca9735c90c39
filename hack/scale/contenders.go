package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The contenders, each in a namespace of its own, measured one after the
// other on the same cluster in the same run:
//   - direct: the benchmark creates, resizes and deletes exactly the
//     children the operator would (Deployment and headless Service; the
//     PodDisruptionBudget where size > 1): what the control plane alone
//     takes for them;
//   - opkit: examples/memcached, with --namespaces set to its namespace;
//   - tutorial: hack/scale/tutorial, the same operator written the way the
//     operator-sdk/kubebuilder tutorial teaches;
//   - floor (with -floor): the benchmark itself does what the cluster needs
//     of any operator of this kind, and nothing else: it creates the
//     Memcached and its children owned by it, and writes the Memcached's
//     status once when the Deployment has rolled out (floorStatus). What
//     the custom resource costs without an operator: opkit / floor is the
//     operator's own overhead;
//   - watched (with -watched): the floor, beside a process that watches
//     the Memcacheds and their Deployments and writes nothing (tutorial
//     --watch-only): what watching alone costs any operator of this kind.
const (
	contDirect   = "direct"
	contOpkit    = "opkit"
	contTutorial = "tutorial"
	contFloor    = "floor"
	contWatched  = "watched"
)

// contenderOrder is the order of the measurements and of the tables.
var contenderOrder = []string{contDirect, contOpkit, contTutorial}

// contender is one way of running N Memcacheds' worth of objects.
type contender struct {
	name string
	ns   string
	// namespaces hold its objects: ns, and with -namespaces its
	// siblings ns-1, ns-2, ...
	namespaces []string
	// op is the operator process (nil for direct and floor).
	op *operator
	// floor: the benchmark plays the operator (see contFloor).
	floor bool
	// watcher only watches, beside the floor (contWatched).
	watcher *operator
}

// nsOf is the namespace of the object named name (names()): the
// objects go round robin over c.namespaces.
func (c *contender) nsOf(name string) string {
	if len(c.namespaces) < 2 {
		return c.ns
	}
	i, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	return c.namespaces[i%len(c.namespaces)]
}

// has reports whether ns is one of c's namespaces.
func (c *contender) has(ns string) bool { return slices.Contains(c.namespaces, ns) }

// inNamespaces restricts a list of the benchmark's cache to c's
// namespaces. Spread over several, it lists them all: a run with
// -namespaces has no other contender, and the cache watches only
// contenders' namespaces.
func (c *contender) inNamespaces() client.InNamespace {
	if len(c.namespaces) < 2 {
		return client.InNamespace(c.ns)
	}
	return client.InNamespace("")
}

// operated reports whether the contender is an operator process.
func (c *contender) operated() bool { return c.op != nil }

// memcacheds reports whether the contender's objects are Memcacheds: an
// operator's, or the floor's.
func (c *contender) memcacheds() bool { return c.op != nil || c.floor }

// noun is what the contender creates.
func (c *contender) noun() string {
	if c.memcacheds() {
		return "Memcacheds"
	}
	return "Deployments + Services"
}

// create creates one object of size 1: a Memcached, or the Deployment and
// headless Service.
func (c *contender) create(ctx context.Context, cl client.Client, name string) error {
	if c.operated() {
		return cl.Create(ctx, newMemcached(c.nsOf(name), name))
	}
	var owner *metav1.OwnerReference
	if c.floor {
		m := newMemcached(c.nsOf(name), name)
		if err := createIfAbsent(ctx, cl, m); err != nil {
			return err
		}
		if m.GetUID() == "" { // created by an earlier, retried attempt
			if err := cl.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
		}
		owner = controllerRef(m)
	}
	ns := c.nsOf(name)
	for _, obj := range []client.Object{newDeployment(ns, name), newService(ns, name)} {
		if owner != nil {
			obj.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		if err := createIfAbsent(ctx, cl, obj); err != nil {
			return err
		}
	}
	return nil
}

// controllerRef is the owner reference an operator gives m's children.
func controllerRef(m *unstructured.Unstructured) *metav1.OwnerReference {
	return metav1.NewControllerRef(m, memcachedGVK)
}

// resize takes one object from 1 to 2 pods: spec.replicas of a Memcached, or
// the Deployment's replicas and a PodDisruptionBudget.
func (c *contender) resize(ctx context.Context, cl client.Client, name string) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))
	ns := c.nsOf(name)
	var obj client.Object = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	pdb := newPDB(ns, name)
	if c.memcacheds() {
		m := memcachedRef(ns, name)
		if err := cl.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))); err != nil {
			return err
		}
		if c.operated() {
			return nil
		}
		pdb.SetOwnerReferences([]metav1.OwnerReference{*controllerRef(m)})
	}
	if err := cl.Patch(ctx, obj, patch); err != nil {
		return err
	}
	return createIfAbsent(ctx, cl, pdb)
}

// remove deletes one object: a Memcached (its children are garbage
// collected), or the Deployment, Service and PodDisruptionBudget.
func (c *contender) remove(ctx context.Context, cl client.Client, name string) error {
	if c.memcacheds() {
		return client.IgnoreNotFound(cl.Delete(ctx, memcachedRef(c.nsOf(name), name)))
	}
	meta := metav1.ObjectMeta{Namespace: c.nsOf(name), Name: name}
	for _, obj := range []client.Object{&appsv1.Deployment{ObjectMeta: meta}, &corev1.Service{ObjectMeta: meta}, &policyv1.PodDisruptionBudget{ObjectMeta: meta}} {
		if err := cl.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T: %w", obj, err)
		}
	}
	return nil
}

func createIfAbsent(ctx context.Context, cl client.Client, obj client.Object) error {
	if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T: %w", obj, err)
	}
	return nil
}

func memcachedRef(ns, name string) *unstructured.Unstructured {
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(memcachedGVK)
	m.SetNamespace(ns)
	m.SetName(name)
	return m
}

func newMemcached(ns, name string) *unstructured.Unstructured {
	m := memcachedRef(ns, name)
	m.Object["spec"] = map[string]any{"replicas": int64(1)}
	return m
}

// directSelector is what selects the direct and floor children's pods:
// the operator's two selector labels, with values that are not the
// operators' (so that neither operator's cache holds them).
func directSelector(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "memcached-direct", "app.kubernetes.io/instance": name}
}

// directLabels are the direct and floor children's labels: as many as the
// operator gives its children (its selector labels and managed-by).
func directLabels(name string) map[string]string {
	l := directSelector(name)
	l["app.kubernetes.io/managed-by"] = "scale-direct"
	return l
}

// newDeployment is a plain Deployment with the pod template the operator
// gives a size-1 Memcached (image, command, port, probes, security
// contexts). sameChildren checks it against the operator's in every run.
func newDeployment(ns, name string) *appsv1.Deployment {
	labels := directLabels(name)
	probe := func(delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("memcache")}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: directSelector(name)},
			RevisionHistoryLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              memcachedPodSecurity(),
					Containers: []corev1.Container{{
						Name:            "memcached",
						Image:           "memcached:1.6",
						Command:         []string{"memcached"},
						Args:            []string{"-p", "11211", "-m", "64"},
						Ports:           []corev1.ContainerPort{{Name: "memcache", ContainerPort: 11211, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe:  probe(0),
						LivenessProbe:   probe(10),
						SecurityContext: memcachedContainerSecurity(),
					}},
				},
			},
		},
	}
}

// memcachedPodSecurity is the pod security context the operator gives
// memcached: not root, as memcached's user, the runtime's seccomp profile.
func memcachedPodSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](11211),
		RunAsGroup:     ptr.To[int64](11211),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// memcachedContainerSecurity is the operator's memcached container
// security context.
func memcachedContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// newService is the headless Service the operator gives a Memcached.
func newService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: directLabels(name)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  directSelector(name),
			Ports: []corev1.ServicePort{{
				Name: "memcache", Port: 11211, TargetPort: intstr.FromString("memcache"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// newPDB is the PodDisruptionBudget the operator gives a Memcached of more
// than one pod.
func newPDB(ns, name string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: directLabels(name)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: directSelector(name)},
		},
	}
}
