package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// storageMigrates stores a Memcached at v1alpha1, as a release before
// v1beta1 did: it makes v1alpha1 the CRD's storage version, creates the
// object, and makes v1beta1 the storage version again, which leaves
// status.storedVersions [v1beta1 v1alpha1]. With the leader killed, the
// next leader's migration rewrites the object and trims storedVersions to
// [v1beta1]; the object reads as before, and an event says so.
func (o operator) storageMigrates(ns string) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		const crd, name = "memcacheds.cache.opkit.dev", "memcached-stored-at-v1alpha1"
		kubectl := func(stdin string, args ...string) string {
			t.Helper()
			return mustKubectl(ctx, t, cfg, stdin, args...)
		}
		// controller-gen sorts the versions: v1alpha1 is the first.
		storeAt := func(version string) {
			alpha := version == "v1alpha1"
			kubectl("", "patch", "crd", crd, "--type=json", "-p", fmt.Sprintf(`[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},`+
				`{"op":"replace","path":"/spec/versions/0/storage","value":%t},{"op":"replace","path":"/spec/versions/1/storage","value":%t}]`, alpha, !alpha))
		}
		storedVersions := func() []string {
			var v []string
			if err := json.Unmarshal([]byte(kubectl("", "get", "crd", crd, "-o", "jsonpath={.status.storedVersions}")), &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		spec := func() string {
			return kubectl("", "get", "memcached", name, "-n", ns, "-o", "jsonpath={.spec}")
		}

		storeAt("v1alpha1")
		restored := false
		defer func() {
			if !restored {
				storeAt("v1beta1")
			}
		}()
		kubectl(`{"apiVersion":"cache.opkit.dev/v1alpha1","kind":"Memcached","metadata":{"name":"`+name+`","namespace":"`+ns+`"},`+
			`"spec":{"size":0,"memoryLimitMB":16,"extraArgs":["-v"]}}`, "create", "-f", "-")
		defer kubectl("", "delete", "memcached", name, "-n", ns)
		storeAt("v1beta1")
		restored = true
		if got := storedVersions(); !slices.Equal(got, []string{"v1beta1", "v1alpha1"}) {
			t.Fatalf("storedVersions %v after storing at v1alpha1, want [v1beta1 v1alpha1]", got)
		}
		before := spec()

		o.killLeader(ctx, t, cfg, "memcached.cache.opkit.dev")
		start := time.Now()
		harness.WaitFor(ctx, t, "storedVersions [v1beta1]", 3*time.Minute, time.Second, func(context.Context) (bool, string) {
			got := storedVersions()
			return slices.Equal(got, []string{"v1beta1"}), fmt.Sprintf("storedVersions %v", got)
		})
		t.Logf("migrated %s after the leader's kill", time.Since(start).Round(time.Second))
		if diff := cmp.Diff(before, spec()); diff != "" {
			t.Errorf("the migrated Memcached's spec (-before +after):\n%s", diff)
		}
		if !strings.Contains(before, `"cache":{"extraArgs":["-v"],"memoryMB":16}`) {
			t.Errorf("read as v1beta1: spec %s, want memoryLimitMB and extraArgs under cache", before)
		}
		events := kubectl("", "get", "events", "-A", "--field-selector", "reason=StorageMigrated", "-o", "jsonpath={.items[*].message}")
		if !strings.Contains(events, "at v1beta1; no longer stored at [v1alpha1]") {
			t.Errorf("no StorageMigrated event naming the versions; events: %q", events)
		}
		return ctx
	}
}
