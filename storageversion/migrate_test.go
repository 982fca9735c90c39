package storageversion_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/storageversion"
)

const crdName = "things.migrate.opkit.dev"

// thingsCRD has v1 and v2 with the same schema (conversion None), v1
// stored.
func thingsCRD() *apiextensionsv1.CustomResourceDefinition {
	version := func(name string) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: name == "v1",
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: ptr(true)}}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: crdName},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "migrate.opkit.dev", Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing", ListKind: "ThingList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1"), version("v2")},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// TestMigrate: objects stored at v1 are rewritten once v2 is the storage
// version, storedVersions is trimmed, and v1 can then leave the CRD; a
// second run writes nothing.
func TestMigrate(t *testing.T) {
	ctx := t.Context()
	c := env.Client
	crd := thingsCRD()
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(ctx), crd) })
	waitEstablished(t, crd)

	// 23 objects in two namespaces, stored at v1.
	var keys []client.ObjectKey
	for i, ns := range namespaces(t, 2) {
		for j := range 13 - 3*i {
			u := thing("v1", ns, fmt.Sprintf("t%d", j))
			if err := c.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, client.ObjectKeyFromObject(u))
		}
	}
	res, err := storageversion.Migrate(ctx, env.Config, crdName)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(storageversion.Result{StorageVersion: "v1"}, res); diff != "" {
		t.Errorf("with v1 stored alone (-want +got):\n%s", diff)
	}

	// v2 becomes the storage version: v1 cannot leave the CRD yet.
	setStorage(t, "v2", "v1", "v2")
	if got := storedVersions(t); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions = %v, want [v1 v2]", got)
	}
	if err := setVersions(t, "v2"); err == nil || !strings.Contains(err.Error(), "storedVersions") {
		t.Fatalf("dropping v1 before the migration = %v, want refused naming storedVersions", err)
	}
	before := versions(t, keys)
	res, err = storageversion.Migrate(ctx, env.Config, crdName, storageversion.WithPageSize(5))
	if err != nil {
		t.Fatal(err)
	}
	want := storageversion.Result{StorageVersion: "v2", Listed: len(keys), Rewritten: len(keys), Trimmed: []string{"v1"}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("the migration (-want +got):\n%s", diff)
	}
	after := versions(t, keys)
	for k, rv := range before {
		if after[k] == rv {
			t.Errorf("%s was not rewritten (resourceVersion %s)", k, rv)
		}
	}
	if got := storedVersions(t); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions = %v, want [v2]", got)
	}

	// Run again with v1 listed (as after an interrupted run): every
	// object is at v2 already, so none is written.
	crd = get(t)
	crd.Status.StoredVersions = []string{"v1", "v2"}
	if err := c.Status().Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	res, err = storageversion.Migrate(ctx, env.Config, crdName)
	if err != nil {
		t.Fatal(err)
	}
	want.Rewritten = 0
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("a second run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(after, versions(t, keys)); diff != "" {
		t.Errorf("a second run wrote objects (resourceVersions -want +got):\n%s", diff)
	}
	if err := setVersions(t, "v2"); err != nil {
		t.Errorf("dropping v1 after the migration: %v", err)
	}
}

func TestMigrateUnknownCRD(t *testing.T) {
	_, err := storageversion.Migrate(t.Context(), env.Config, "nothings.migrate.opkit.dev")
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "nothings.migrate.opkit.dev") {
		t.Errorf("Migrate = %v, want NotFound naming the CRD", err)
	}
}

func thing(version, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("migrate.opkit.dev/" + version)
	u.SetKind("Thing")
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"size": int64(3)}
	return u
}

func namespaces(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "migrate-"}}
		if err := env.Client.Create(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
		out = append(out, ns.Name)
	}
	return out
}

// versions are the objects' resourceVersions, read at v2.
func versions(t *testing.T, keys []client.ObjectKey) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range keys {
		u := thing("v2", k.Namespace, k.Name)
		if err := env.Client.Get(t.Context(), k, u); err != nil {
			t.Fatal(err)
		}
		out[k.String()] = u.GetResourceVersion()
	}
	return out
}

func get(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: crdName}, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func storedVersions(t *testing.T) []string {
	t.Helper()
	return get(t).Status.StoredVersions
}

// setStorage makes storage the storage version of the CRD's versions.
func setStorage(t *testing.T, storage string, names ...string) {
	t.Helper()
	crd := get(t)
	crd.Spec.Versions = nil
	for _, n := range names {
		v := thingsCRD().Spec.Versions[0]
		v.Name, v.Storage = n, n == storage
		crd.Spec.Versions = append(crd.Spec.Versions, v)
	}
	if err := env.Client.Update(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
}

// setVersions leaves only the versions named in the CRD.
func setVersions(t *testing.T, names ...string) error {
	t.Helper()
	crd := get(t)
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return !slices.Contains(names, v.Name)
	})
	return env.Client.Update(t.Context(), crd)
}

func waitEstablished(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := get(t)
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s not established: %v", crd.Name, err)
	}
}

// TestConcurrentMigrations: replicas that all run Migrate at once (sharded,
// with no leader election) write each object once between them (a patch
// of an object another replica rewrote writes nothing; the watch sees
// every write) and trim storedVersions without an error.
func TestConcurrentMigrations(t *testing.T) {
	ctx := t.Context()
	crd := thingsCRD()
	// TestMigrate's CRD of the same name may still be going.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, crd)
		return err == nil, client.IgnoreAlreadyExists(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.WithoutCancel(ctx), crd) })
	waitEstablished(t, crd)
	var keys []client.ObjectKey
	for _, ns := range namespaces(t, 3) {
		for j := range 10 {
			u := thing("v1", ns, fmt.Sprintf("t%d", j))
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, client.ObjectKeyFromObject(u))
		}
	}
	setStorage(t, "v2", "v1", "v2")

	wc, err := client.NewWithWatch(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("migrate.opkit.dev/v2")
	list.SetKind("ThingList")
	if err := wc.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	watch, err := wc.Watch(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()

	const replicas = 3
	type run struct {
		res storageversion.Result
		err error
	}
	runs := make(chan run, replicas)
	for range replicas {
		go func() {
			res, err := storageversion.Migrate(ctx, env.Config, crdName, storageversion.WithPageSize(7))
			runs <- run{res, err}
		}()
	}
	listed, rewritten := 0, 0
	for range replicas {
		r := <-runs
		if r.err != nil {
			t.Errorf("a replica's Migrate: %v", r.err)
		}
		listed, rewritten = listed+r.res.Listed, rewritten+r.res.Rewritten
	}
	// Rewritten may count one object on two replicas: the one that wrote
	// it and one whose patch, sent before, found it rewritten.
	t.Logf("%d replicas patched %d objects and report %d rewritten", replicas, listed, rewritten)
	writes := map[string]int{}
	for quiet := time.After(time.Second); ; {
		select {
		case ev := <-watch.ResultChan():
			if o, ok := ev.Object.(client.Object); ok {
				writes[client.ObjectKeyFromObject(o).String()]++
			}
			continue
		case <-quiet:
		}
		break
	}
	want := map[string]int{}
	for _, k := range keys {
		want[k.String()] = 1
	}
	if diff := cmp.Diff(want, writes); diff != "" {
		t.Errorf("writes per object by %d replicas migrating at once (-want +got):\n%s", replicas, diff)
	}
	if got := storedVersions(t); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions = %v, want [v2]", got)
	}
}
