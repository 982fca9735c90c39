package controller

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/testkit"
)

// BenchmarkCachedBytes reports what the operator's cache holds per
// Memcached, by kind: the objects as the API server sends them to the
// informers (protobuf for built-in kinds, JSON for the Memcached and pod
// metadata), decoded and passed through CacheOptions' transforms, as the
// heap grows to keep them (the informer's store and indexes not counted).
//
//	go test ./internal/controller -run '^$' -bench CachedBytes
func BenchmarkCachedBytes(b *testing.B) {
	kinds := footprintObjects(b)
	const copies = 500
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			transform := cacheTransform(k.kind)
			var per float64
			for range b.N {
				per = retainedBytes(b, copies, func() any {
					obj, err := k.decode()
					testkit.Must(b, err)
					if transform != nil {
						obj, err = transform(obj)
						testkit.Must(b, err)
					}
					return obj
				})
			}
			b.ReportMetric(per, "B/object")
		})
	}
}

// retainedBytes is the heap growth, per object, of keeping n of make's.
func retainedBytes(b *testing.B, n int, newObject func() any) float64 {
	b.Helper()
	keep := make([]any, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = newObject()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// footprintKind is one cached kind: its body as the informer reads it
// and how the informer decodes it.
type footprintKind struct {
	name   string
	kind   client.Object // its CacheOptions.ByObject key
	decode func() (any, error)
}

// footprintObjects creates a Memcached and its children in envtest as a
// pass and the cluster's controllers leave them once Ready, and reads
// each back in the informers' encoding.
func footprintObjects(b *testing.B) []footprintKind {
	b.Helper()
	f := newFixture(b)
	f.create(f.memcached("memcached-4711", 1))
	f.pass("memcached-4711")
	// A pod as the ReplicaSet controller creates it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "memcached-4711-5d8f7c9b4-", Namespace: f.ns,
			Labels: childLabels(f.memcached("memcached-4711", 1)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "memcached-4711-5d8f7c9b4",
				UID: "0b7f3a52-3c1e-4a47-9d51-8f0b3a8e6c21", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "memcached", Image: "memcached:1.6"}}},
	}
	pod.Labels["pod-template-hash"] = "5d8f7c9b4"
	testkit.Must(b, env.Client.Create(b.Context(), pod))
	f.rollOut("memcached-4711")
	d := &appsv1.Deployment{}
	f.get("memcached-4711", d)
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	testkit.Must(b, env.Client.Update(b.Context(), d))
	f.get("memcached-4711", d)
	// The deployment controller's conditions once a rollout is complete.
	now := metav1.Now()
	d.Status.Conditions = []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: now, LastTransitionTime: now,
			Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, LastUpdateTime: now, LastTransitionTime: now,
			Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "memcached-4711-5d8f7c9b4" has successfully progressed.`},
	}
	testkit.Must(b, env.Client.Status().Update(b.Context(), d))
	f.pass("memcached-4711")

	hc, err := rest.HTTPClientFor(env.Config)
	testkit.Must(b, err)
	get := func(path, accept string) []byte {
		req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+path, nil)
		testkit.Must(b, err)
		req.Header.Set("Accept", accept)
		resp, err := hc.Do(req)
		testkit.Must(b, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		testkit.Must(b, err)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s: %s", path, resp.Status, body)
		}
		return body
	}
	const proto = "application/vnd.kubernetes.protobuf"
	ns := "/namespaces/" + f.ns
	codecs := serializer.NewCodecFactory(env.Scheme)
	decoder := func(body []byte, into func() client.Object) func() (any, error) {
		return func() (any, error) {
			obj, _, err := codecs.UniversalDeserializer().Decode(body, nil, into())
			return obj, err
		}
	}
	metaScheme := kruntime.NewScheme()
	testkit.Must(b, metav1.AddMetaToScheme(metaScheme))
	metav1.AddToGroupVersion(metaScheme, metav1.SchemeGroupVersion)
	podBody := get("/api/v1"+ns+"/pods/"+pod.Name, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
	return []footprintKind{
		{"Memcached", &v1beta1.Memcached{}, decoder(get("/apis/cache.opkit.dev/v1beta1"+ns+"/memcacheds/memcached-4711", "application/json"), func() client.Object { return &v1beta1.Memcached{} })},
		{"Deployment", &appsv1.Deployment{}, decoder(get("/apis/apps/v1"+ns+"/deployments/memcached-4711", proto), func() client.Object { return &appsv1.Deployment{} })},
		{"Service", &corev1.Service{}, decoder(get("/api/v1"+ns+"/services/memcached-4711", proto), func() client.Object { return &corev1.Service{} })},
		{"PodMetadata", &corev1.Pod{}, func() (any, error) {
			obj, _, err := serializer.NewCodecFactory(metaScheme).UniversalDeserializer().Decode(podBody, nil, &metav1.PartialObjectMetadata{})
			return obj, err
		}},
	}
}

// BenchmarkPodIndex reports what podInstanceIndex costs the pod informer
// per pod (one pod per Memcached, ten namespaces), as indexPods adds it
// and as FieldIndexer.IndexField would: under the namespaced key and a
// cluster-wide one.
//
//	go test ./internal/controller -run '^$' -bench PodIndex
func BenchmarkPodIndex(b *testing.B) {
	withClusterKey := func(obj any) ([]string, error) {
		keys, err := podInstanceKeys(obj)
		if len(keys) == 1 {
			keys = append(keys, "__all_namespaces/"+podInstance(obj.(client.Object))[0])
		}
		return keys, err
	}
	const pods = 3000
	objs := make([]*metav1.PartialObjectMetadata, pods)
	for i := range objs {
		m := &v1beta1.Memcached{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("memcached-%d", i), Namespace: fmt.Sprintf("scale-%d", i%10)}}
		objs[i] = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: m.Name + "-5d8f7c9b4-x2v7q", Namespace: m.Namespace, Labels: childLabels(m)}}
	}
	for _, tt := range []struct {
		name string
		keys toolscache.IndexFunc
	}{{"none", nil}, {"indexPods", podInstanceKeys}, {"IndexField", withClusterKey}} {
		b.Run(tt.name, func(b *testing.B) {
			var per float64
			for range b.N {
				ix := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
				if tt.keys != nil {
					ix["field:"+podInstanceIndex] = tt.keys
				}
				var store toolscache.Indexer
				per = retainedBytes(b, 1, func() any {
					store = toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, ix)
					for _, o := range objs {
						testkit.Must(b, store.Add(o))
					}
					return store
				}) / pods
			}
			b.ReportMetric(per, "B/pod")
		})
	}
}
