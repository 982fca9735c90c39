package incluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/kvhistory"
)

// TestEtcdOperatorInCluster installs the etcd operator from a release's
// install-VERSION.yaml (pinned to its image in the nodes' registry), under
// its own RBAC, and runs its two suites against
// that one operator at the same time, as the clusters of different teams
// share an operator: the lifecycle of a cluster (etcdLifecycle) and the
// backups and restores of the samples (etcdBackups). Each suite's faults
// (the operator's pod killed, its Deployment upgraded or given a claim)
// hit the other suite's clusters too, which must ride them out. Then no
// operator pod may have logged an RBAC denial, and make undeploy must
// leave nothing behind.
//
// The operator runs two replicas, as installed: a fault kills the leader,
// and the other keeps serving the webhook, which refuses writes to
// EtcdClusters while no replica serves (failurePolicy Fail).

func TestEtcdOperatorInCluster(t *testing.T) {
	t.Parallel() // with the memcached suite (main_test.go)
	op := etcdOperator.fromRegistry(t.Context(), t)
	deployed := false
	f := features.New("etcd operator in-cluster").
		Assess("the release's install.yaml runs the operator from its image by digest", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			ctx = op.deploy(ctx, t, cfg)
			deployed = !t.Failed()
			return ctx
		}).
		Assess("a cluster's lifecycle, the samples' backups and a rebuild from a survivor, at the same time", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if !deployed {
				t.Fatal("the operator is not deployed")
			}
			// t.Run returns once both parallel suites have ended.
			t.Run("lifecycle", func(t *testing.T) {
				t.Parallel()
				testEnv.Test(t, etcdLifecycle(op))
			})
			t.Run("backups", func(t *testing.T) {
				t.Parallel()
				testEnv.Test(t, etcdBackups(op))
			})
			t.Run("rebuild", func(t *testing.T) {
				t.Parallel()
				testEnv.Test(t, etcdSurvivorRebuild())
			})
			return ctx
		}).
		Assess("the operator logged no RBAC denial", op.noRBACDenial).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			op.undeploy(ctx, t, cfg)
			return ctx
		}).Feature()
	testEnv.Test(t, f)
}

// etcdLease is the etcd operator's leader-election Lease.
const etcdLease = "etcd-operator.etcd.opkit.dev"

// etcdLifecycle: the etcd operator manages a 3-member EtcdCluster on real
// pods and provisioned claims, while clients write and read through the
// client Service and every operation is recorded: the operator is
// upgraded in place to its next build without restarting a member or
// writing a child; a deleted member pod comes back as the same member on
// its claim; the cluster grows to 5 with the operator pod killed in the
// middle, and shrinks back to 3; a member whose pod and claim are deleted
// is replaced by a new member, never re-added under its old ID; the
// cluster is upgraded from etcd 3.5 to 3.6 one member at a time, with the
// operator pod killed in the middle; a second cluster with spec.tls.auto
// serves clients with its certificate only. The recorded history must be
// linearizable (porcupine, a register per key), final reads included: no
// acknowledged write is lost. Last, the operator's metrics are served to
// their readers only.
func etcdLifecycle(op operator) features.Feature {
	// Named apart from the samples' clusters (etcdBackups).
	const ns, name = "default", "lifecycle"
	// The cluster starts on the last 3.5 release and is upgraded to 3.6
	// (both images are built by make images).
	const fromVersion, toVersion = "3.5.35", "3.6.16"
	cluster := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Size: 3, Version: fromVersion},
	}
	cluster.Spec.Storage.Size = ptr.To(resource.MustParse("64Mi"))
	etcdctl := func(ctx context.Context, t *testing.T, cfg *envconf.Config, pod string, args ...string) string {
		t.Helper()
		out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, pod, "--", "etcdctl", "--command-timeout=10s"}, args...)...)
		if err != nil {
			t.Fatalf("etcdctl %v in %s: %v", args, pod, err)
		}
		return strings.TrimSpace(out)
	}
	resize := func(ctx context.Context, t *testing.T, cfg *envconf.Config, size int) {
		t.Helper()
		if out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", name, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"size":%d}}`, size)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	// The clients: from this process to the client Service's ClusterIP
	// (kube-proxy routes it to a member), four workers on eight keys.
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	history := kvhistory.New()
	var (
		cli        *clientv3.Client
		stopLoad   context.CancelFunc
		load       sync.WaitGroup
		membersNow = func(ctx context.Context, t *testing.T) []*harness.EtcdMember {
			t.Helper()
			return harness.EtcdMembers(ctx, t, cli)
		}
		membersBefore []*harness.EtcdMember
		changes       []string
	)

	return features.New("etcd cluster lifecycle").
		Assess("a 3-member cluster becomes Ready on real pods and serves through its client Service", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := cfg.Client().Resources().Create(ctx, cluster); err != nil {
				t.Fatal(err)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			cli = harness.EtcdClient(ctx, t, cfg, ns, name)
			membersBefore = membersNow(ctx, t)
			if got := harness.Voting(membersBefore); len(got) != 3 {
				t.Fatalf("voting members %v, want 3", got)
			}
			client := fmt.Sprintf("--endpoints=http://%s-client.%s.svc:2379", name, ns)
			if got := etcdctl(ctx, t, cfg, name+"-0", client, "put", "written-in-cluster", "yes"); got != "OK" {
				t.Fatalf("put through the client Service: %q", got)
			}
			lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			stopLoad = cancel
			for range 4 {
				load.Go(func() { history.Run(lctx, cli, keys) })
			}
			return ctx
		}).
		Assess("the operator upgraded in place to its next build: no member restarted, no child written", op.upgradeInPlace(etcdLease,
			func(ctx context.Context, t *testing.T, cfg *envconf.Config) workload {
				return workload{ns: ns, owner: getEtcdCluster(ctx, t, cfg, ns, name).UID, pods: "etcd.opkit.dev/cluster=" + name}
			})).
		Assess("a deleted member pod comes back as the same member on its claim", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", "-n", ns, name+"-1", "--wait=true"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "the member to be back", 3*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				out, err := harness.Kubectl(ctx, cfg, "exec", "-n", ns, name+"-1", "--", "etcdctl", "--command-timeout=5s", "endpoint", "health")
				return err == nil && strings.Contains(out, "is healthy"), out + fmt.Sprint(err)
			})
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			if diff := cmp.Diff(harness.Voting(membersBefore), harness.Voting(membersNow(ctx, t))); diff != "" {
				t.Errorf("members (name -> ID) changed (-before +after):\n%s", diff)
			}
			if got := etcdctl(ctx, t, cfg, name+"-1", "get", "written-in-cluster", "--print-value-only", "--consistency=l"); got != "yes" {
				t.Errorf("get through the recreated member = %q, want yes", got)
			}
			changes = append(changes, "member pod recreated")
			return ctx
		}).
		Assess("grown to 5 with the operator killed in the middle, every member voting", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			operatorDisruption.Lock()
			defer operatorDisruption.Unlock()
			resize(ctx, t, cfg, 5)
			// Kill the operator once it has added the first learner: the
			// next leader must finish the change, not repeat it.
			harness.WaitFor(ctx, t, "a fourth member", 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
				ms := membersNow(ctx, t)
				return len(ms) >= 4, fmt.Sprint(ms)
			})
			op.killLeader(ctx, t, cfg, etcdLease)
			if ms := membersNow(ctx, t); len(harness.Voting(ms)) >= 5 {
				t.Fatalf("the scale-up was done before the operator was killed: %v", ms)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			ms := membersNow(ctx, t)
			if len(ms) != 5 || len(harness.Voting(ms)) != 5 {
				t.Errorf("members %v, want 5 voting members and no learner", ms)
			}
			for name, id := range harness.Voting(membersBefore) {
				if harness.Voting(ms)[name] != id {
					t.Errorf("member %s is %s, want %s as before", name, harness.Voting(ms)[name], id)
				}
			}
			changes = append(changes, "3 -> 4", "4 -> 5")
			return ctx
		}).
		Assess("shrunk back to 3", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			resize(ctx, t, cfg, 3)
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			if ms := membersNow(ctx, t); len(ms) != 3 || len(harness.Voting(ms)) != 3 {
				t.Errorf("members %v, want 3 voting members", ms)
			}
			changes = append(changes, "5 -> 4", "4 -> 3")
			return ctx
		}).
		Assess("a member whose pod and claim are deleted is replaced by a new member", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			before := harness.Voting(membersNow(ctx, t))
			names := make([]string, 0, len(before))
			for n := range before {
				names = append(names, n)
			}
			slices.Sort(names)
			victim := names[1]
			// The claim goes once its pod is gone (pvc-protection).
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pvc", "-n", ns, victim+"-data", "--wait=false"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", "-n", ns, victim, "--wait=true"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			harness.WaitFor(ctx, t, "a replacement member", 4*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				ms := membersNow(ctx, t)
				v := harness.Voting(ms)
				if len(ms) != 3 || len(v) != 3 {
					return false, fmt.Sprint(ms)
				}
				for n, id := range v {
					if id == before[victim] {
						return false, fmt.Sprintf("%s has the old ID %s", n, id)
					}
				}
				return true, ""
			})
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			for n, id := range harness.Voting(membersNow(ctx, t)) {
				if id == before[victim] {
					t.Errorf("member %s came back under the old ID %s of %s", n, id, victim)
				}
			}
			changes = append(changes, "member replaced (remove + add)")
			return ctx
		}).
		Assess("upgraded 3.5 -> 3.6 one member at a time with the operator killed in the middle", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			operatorDisruption.Lock()
			defer operatorDisruption.Unlock()
			before := harness.Voting(membersNow(ctx, t))
			// Watch the member pods all along: at no time may more than one
			// member be down (no pod, or not Ready).
			watch := watchMemberPods(ctx, t, cfg, ns, name, before)
			if out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", name, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"version":%q}}`, toVersion)); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// Kill the operator once the first member runs the new version:
			// the next leader must go on from there, one member at a time.
			harness.WaitFor(ctx, t, "a first member on "+toVersion, 3*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
				on := watch.upgraded(toVersion)
				return len(on) >= 1, fmt.Sprint(on)
			})
			op.killLeader(ctx, t, cfg, etcdLease)
			if on := watch.upgraded(toVersion); len(on) >= len(before) {
				t.Fatalf("the upgrade was done before the operator was killed: %v", on)
			}
			harness.WaitEtcdReady(ctx, t, cfg, ns, name)
			harness.WaitFor(ctx, t, "etcd's cluster version to be 3.6", 2*time.Minute, 2*time.Second, func(ctx context.Context) (bool, string) {
				v, err := clusterVersion(ctx, cli)
				return err == nil && strings.HasPrefix(v, "3.6."), v + fmt.Sprint(err)
			})
			maxDown, seen := watch.stop()
			if maxDown > 1 {
				t.Errorf("%d members were down at once during the upgrade, want at most 1; pods seen:\n%s", maxDown, seen)
			}
			if diff := cmp.Diff(before, harness.Voting(membersNow(ctx, t))); diff != "" {
				t.Errorf("members (name -> ID) changed by the upgrade (-before +after):\n%s", diff)
			}
			c := getEtcdCluster(ctx, t, cfg, ns, name)
			if c.Status.Version != toVersion {
				t.Errorf("status.version = %q, want %s", c.Status.Version, toVersion)
			}
			for _, m := range c.Status.Members {
				if m.Version != toVersion {
					t.Errorf("member %s reports version %q, want %s", m.Name, m.Version, toVersion)
				}
			}
			for range before {
				changes = append(changes, "member upgraded")
			}
			return ctx
		}).
		Assess("the operator's checks run at admission: each refusal names the field, a missing TLS Secret warns", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			out, err := harness.Kubectl(ctx, cfg, "patch", "etcdcluster", name, "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"version":%q}}`, fromVersion))
			if err == nil {
				t.Fatalf("a downgrade to %s was admitted: %s", fromVersion, out)
			}
			if want := fmt.Sprintf(`spec.version: Invalid value: %q: unsupported etcd version change: %s to %s is a downgrade; restore a backup into a new cluster instead`, fromVersion, toVersion, fromVersion); !strings.Contains(err.Error()+out, want) {
				t.Errorf("the refusal does not say %q: %v\n%s", want, err, out)
			}
			if c := getEtcdCluster(ctx, t, cfg, ns, name); c.Spec.Version != toVersion {
				t.Errorf("spec.version = %q after a refused patch, want %s", c.Spec.Version, toVersion)
			}
			create := func(spec string) (string, error) {
				t.Helper()
				cmd, err := harness.KubectlCommand(ctx, cfg, "create", "--dry-run=server", "-f", "-")
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdin = strings.NewReader(`{"apiVersion":"etcd.opkit.dev/v1alpha1","kind":"EtcdCluster","metadata":{"name":"admission","namespace":"` + ns + `"},"spec":` + spec + `}`)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			tlsSpec := func(secret string) string {
				return fmt.Sprintf(`{"version":%q,"tls":{"peerSecretName":%q,"serverSecretName":%q,"clientSecretName":%q}}`, toVersion, secret, secret, secret)
			}
			out, err = create(fmt.Sprintf(`{"version":%q,"backup":{"schedule":"hourly","storeRef":{"pvcName":"backups"}}}`, toVersion))
			if err == nil || !strings.Contains(out, `spec.backup.schedule: Invalid value: "hourly"`) {
				t.Errorf("an unparsable schedule: %v, output %q; want refused naming spec.backup.schedule", err, out)
			}
			out, err = create(tlsSpec("absent"))
			if err != nil || !strings.Contains(out, `Warning: spec.tls.peerSecretName: Secret "absent" is not in namespace `+ns+` yet`) {
				t.Errorf("TLS Secrets not there yet: %v, output %q; want admitted with a warning", err, out)
			}
			if out, err := harness.Kubectl(ctx, cfg, "create", "secret", "generic", "not-a-certificate", "-n", ns, "--from-literal=tls.crt=x", "--from-literal=tls.key=y"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			defer func() {
				_, _ = harness.Kubectl(context.WithoutCancel(ctx), cfg, "delete", "secret", "not-a-certificate", "-n", ns)
			}()
			out, err = create(tlsSpec("not-a-certificate"))
			if err == nil || !strings.Contains(out, `spec.tls.peerSecretName: Invalid value: "not-a-certificate": the peer certificate`) {
				t.Errorf("a TLS Secret with no certificate: %v, output %q; want refused naming spec.tls.peerSecretName", err, out)
			}
			return ctx
		}).
		Assess("the clients' history is linearizable and no acknowledged write is lost", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			stopLoad()
			load.Wait()
			if err := history.FinalReads(ctx, cli, keys); err != nil {
				t.Error(err)
			}
			start := time.Now()
			summary, info := history.Check(3 * time.Minute)
			t.Logf("membership changes: %d (%s); %s; checked in %s", len(changes), strings.Join(changes, ", "), summary, time.Since(start).Round(time.Millisecond))
			if summary.Puts < 100 || summary.Gets < 100 {
				t.Errorf("too few operations to mean anything: %s", summary)
			}
			if summary.Result != porcupine.Ok {
				out := filepath.Join(os.TempDir(), "etcd-incluster-history.html")
				if err := porcupine.VisualizePath(kvhistory.Model, info, out); err == nil {
					t.Logf("history visualized in %s", out)
				}
				t.Errorf("the history is not linearizable: %s", summary.Result)
			}
			return ctx
		}).
		Assess("a TLS cluster (spec.tls.auto) becomes Ready and serves only clients with its certificate", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			const tlsName = name + "-tls"
			c := &v1alpha1.EtcdCluster{
				ObjectMeta: metav1.ObjectMeta{Name: tlsName, Namespace: ns},
				Spec: v1alpha1.EtcdClusterSpec{Size: 3, Version: toVersion, Storage: v1alpha1.StorageSpec{Ephemeral: true},
					TLS: &v1alpha1.TLSSpec{Auto: &v1alpha1.AutoTLSSpec{}}},
			}
			if err := cfg.Client().Resources().Create(ctx, c); err != nil {
				t.Fatal(err)
			}
			// Ready needs the kubelet's probe on the plain metrics port and
			// the operator's calls over TLS to every member's DNS name.
			harness.WaitEtcdReady(ctx, t, cfg, ns, tlsName)
			const dir = "/etc/etcd/tls/server/" // the member's certificate allows client auth too
			endpoint := fmt.Sprintf("--endpoints=https://%s-client.%s.svc:2379", tlsName, ns)
			withCert := []string{endpoint, "--cacert=" + dir + "ca.crt", "--cert=" + dir + "tls.crt", "--key=" + dir + "tls.key"}
			if got := etcdctl(ctx, t, cfg, tlsName+"-0", append(withCert, "put", "over-tls", "yes")...); got != "OK" {
				t.Fatalf("put through the client Service over TLS: %q", got)
			}
			if got := etcdctl(ctx, t, cfg, tlsName+"-1", append(withCert, "get", "--print-value-only", "over-tls")...); got != "yes" {
				t.Fatalf("get through the client Service over TLS: %q", got)
			}
			for what, args := range map[string][]string{
				"without a client certificate": {endpoint, "--cacert=" + dir + "ca.crt"},
				"over plain HTTP":              {fmt.Sprintf("--endpoints=http://%s-client.%s.svc:2379", tlsName, ns)},
			} {
				cmd := append([]string{"exec", "-n", ns, tlsName + "-0", "--", "etcdctl", "--command-timeout=5s", "--dial-timeout=3s"}, args...)
				if out, err := harness.Kubectl(ctx, cfg, append(cmd, "get", "over-tls")...); err == nil {
					t.Errorf("a client %s was served: %s", what, out)
				}
			}
			if out, err := harness.Kubectl(ctx, cfg, "delete", "etcdcluster", tlsName, "-n", ns, "--wait=true", "--timeout=2m"); err != nil {
				t.Fatalf("deleting %s: %v\n%s", tlsName, err, out)
			}
			return ctx
		}).
		Assess("metrics are served over HTTPS to a token allowed to get /metrics only", op.metricsOnlyForReaders(ns)).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if stopLoad != nil {
				stopLoad()
				load.Wait()
			}
			if cli != nil {
				_ = cli.Close()
			}
			if out, err := harness.Kubectl(ctx, cfg, "delete", "etcdcluster", name, "-n", ns, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
				t.Errorf("deleting the EtcdCluster: %v\n%s", err, out)
			}
			return ctx
		}).Feature()
}

// etcdOperator is the etcd operator as make deploy installs it from the
// image make images built.
var etcdOperator = operator{
	example: "etcd", name: "etcd-operator", namespace: "etcd-operator-system",
	img:         "opkit.dev/etcd-operator:dev",
	addToScheme: v1alpha1.AddToScheme, list: &v1alpha1.EtcdClusterList{},
	crds: []string{"etcdclusters.etcd.opkit.dev", "etcdbackups.etcd.opkit.dev"},
}

// getEtcdCluster reads the EtcdCluster, failing the test if it cannot.
func getEtcdCluster(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name string) *v1alpha1.EtcdCluster {
	t.Helper()
	var c v1alpha1.EtcdCluster
	if err := cfg.Client().Resources().Get(ctx, name, ns, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}
