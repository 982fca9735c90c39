package incluster

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/internal/repo"
)

// operator is an example operator as its Makefile's deploy target installs
// it (hack/operator.mk), or its Helm chart (dist/chart) released under its
// name with the chart owning the namespace: objects named <name>-..., in
// namespace, pods labelled app.kubernetes.io/name=<name>.
type operator struct {
	// example is its directory under examples/.
	example string
	// name prefixes its objects and labels its pods; namespace holds them.
	name, namespace string
	// img is the IMG make deploy runs: make images builds
	// opkit.dev/<name>:dev, and fromRegistry names it by digest.
	img string
	// next is the image of the operator's next build (nextTag), which
	// upgradeInPlace moves it to; set by fromRegistry.
	next string
	// dist is the directory of the versioned release (versioned) the
	// first install comes from: its install-VERSION.yaml, or its packaged
	// chart; set by fromRegistry.
	dist string
	// addToScheme and list register and probe its API once installed; crds
	// are its CustomResourceDefinitions, which uninstalling deletes.
	addToScheme func(*runtime.Scheme) error
	list        k8s.ObjectList
	crds        []string
	// chart installs, upgrades and uninstalls through the Helm chart
	// (helm's Go SDK) instead of make deploy and make undeploy.
	chart bool
	// args are the chart's manager.args at install, kept on upgrades.
	args []string
	// values are more of the chart's values at install; config is the
	// config/ overlay make deploy applies (CONFIG, default "default").
	values map[string]any
	config string
}

// helmReleaseNamespace records the chart's release (helm -n): the chart
// creates the operator's namespace itself (namespace.create), so that
// helm uninstall deletes it.
const helmReleaseNamespace = "default"

// release is the operator's Helm release on the suite's cluster.
func (o operator) release(cfg *envconf.Config) (harness.HelmRelease, error) {
	root, err := repo.Root()
	if err != nil {
		return harness.HelmRelease{}, err
	}
	chart := filepath.Join(root, "examples", o.example, "dist", "chart")
	if o.dist != "" {
		chart = filepath.Join(o.dist, o.name, o.name+"-"+releaseVersion+".tgz")
	}
	return harness.HelmRelease{
		Chart: chart,
		Name:  o.name, Namespace: helmReleaseNamespace, Kubeconfig: cfg.KubeconfigFile(),
	}, nil
}

// fromRegistry returns o with its images, this build's and the next's,
// named by digest in the real nodes' registry, which the operator's pods
// pull on every start (imagePullPolicy Always), as from a user's registry.
func (o operator) fromRegistry(ctx context.Context, t *testing.T) operator {
	t.Helper()
	var err error
	name := strings.TrimSuffix(o.img, ":dev")
	if o.img, err = harness.PushedImage(ctx, name+":dev"); err != nil {
		t.Fatal(err)
	}
	if o.next, err = harness.PushedImage(ctx, name+":"+nextTag); err != nil {
		t.Fatal(err)
	}
	o.dist = versioned(ctx, t)
	return o
}

// install installs the operator running o.img, or moves an installed one
// to it: kubectl apply of the release's install-VERSION.yaml first, make
// deploy IMG=... after; or helm install of the release's chart package
// (upgrade --reuse-values once installed) with manager.image set.
func (o operator) install(ctx context.Context, cfg *envconf.Config, upgrade bool) (string, error) {
	if !o.chart && !upgrade && o.dist != "" {
		return harness.Kubectl(ctx, cfg, "apply", "--server-side", "-f", filepath.Join(o.dist, o.name, "install-"+releaseVersion+".yaml"))
	}
	if !o.chart {
		return o.make(ctx, cfg, "deploy")
	}
	r, err := o.release(cfg)
	if err != nil {
		return "", err
	}
	// The chart takes a repository holding "@digest" as the whole image.
	image := map[string]any{"manager": map[string]any{"image": map[string]any{"repository": o.img, "tag": "", "pullPolicy": "Always"}}}
	if upgrade {
		return r.Upgrade(ctx, image)
	}
	if o.args != nil {
		image["manager"].(map[string]any)["args"] = o.args
	}
	maps.Copy(image, o.values)
	image["namespace"] = map[string]any{"create": true, "name": o.namespace}
	image["crd"] = map[string]any{"keep": false}
	return r.Install(ctx, image)
}

// uninstall is make undeploy, or helm uninstall.
func (o operator) uninstall(ctx context.Context, cfg *envconf.Config) (string, error) {
	if !o.chart {
		return o.make(ctx, cfg, "undeploy", "ignore-not-found=true")
	}
	r, err := o.release(cfg)
	if err != nil {
		return "", err
	}
	return "", r.Uninstall(ctx)
}

// how says how the operator is installed, for messages.
func (o operator) how() string {
	if o.chart {
		return "helm"
	}
	return "make"
}

// deployment is the name of the operator's Deployment.
func (o operator) deployment() string { return o.name + "-controller-manager" }

// podSelector selects the operator's pods.
func (o operator) podSelector() string { return "app.kubernetes.io/name=" + o.name }

// log is the end of the running operator's log, for a failure message.
func (o operator) log(ctx context.Context, cfg *envconf.Config) string {
	out, err := harness.Kubectl(context.WithoutCancel(ctx), cfg, "logs", "-n", o.namespace, "deployment/"+o.deployment(), "--tail=60")
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return out
}

// make runs `make -C examples/<example> TARGET IMG=... args` against the
// suite's cluster, as a user would.
func (o operator) make(ctx context.Context, cfg *envconf.Config, target string, args ...string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	args = append([]string{"-C", filepath.Join(root, "examples", o.example), target, "IMG=" + o.img, "PULL_POLICY=Always", "KUBECONFIG=" + cfg.KubeconfigFile()}, args...)
	if o.config != "" {
		args = append(args, "CONFIG="+o.config)
	}
	cmd := exec.CommandContext(ctx, "make", args...)
	// When ctx ends, make's kubectl goes too, not just make.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// deploy is the step `make -C examples/<example> deploy IMG=...` (or helm install): it waits
// until the operator's Deployment is Available running IMG and its API is
// served.
func (o operator) deploy(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	if out, err := o.install(ctx, cfg, false); err != nil {
		t.Fatalf("%s install: %v\n%s", o.how(), err, out)
	}
	cond := conditions.New(cfg.Client().Resources())
	if err := wait.For(cond.DeploymentAvailable(o.deployment(), o.namespace), wait.WithContext(ctx), wait.WithTimeout(3*time.Minute)); err != nil {
		t.Fatalf("the operator Deployment is not Available: %v; pods: %s", err, harness.DescribePods(ctx, cfg, o.namespace))
	}
	var dep appsv1.Deployment
	if err := cfg.Client().Resources().Get(ctx, o.deployment(), o.namespace, &dep); err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != o.img {
		t.Errorf("operator image = %q, want %q", got, o.img)
	}
	// A release's installer keeps config/'s IfNotPresent: its image is
	// pinned by digest.
	wantPolicy := corev1.PullAlways
	if !o.chart && o.dist != "" {
		wantPolicy = corev1.PullIfNotPresent
	}
	if got := dep.Spec.Template.Spec.Containers[0].ImagePullPolicy; got != wantPolicy {
		t.Errorf("operator imagePullPolicy = %q, want %s", got, wantPolicy)
	}
	o.pulledByDigest(ctx, t, cfg)
	if _, err := harness.WaitForAPI(o.addToScheme, o.list)(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// pulledByDigest fails unless every running operator pod's image was
// pulled as o.img's digest.
func (o operator) pulledByDigest(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	t.Helper()
	_, digest, ok := strings.Cut(o.img, "@")
	if !ok {
		t.Fatalf("operator image %q is not by digest", o.img)
	}
	var pods corev1.PodList
	if err := cfg.Client().Resources(o.namespace).List(ctx, &pods, resources.WithLabelSelector(o.podSelector())); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready && !strings.HasSuffix(c.ImageID, "@"+digest) {
				t.Errorf("pod %s runs image %s, want %s", p.Name, c.ImageID, digest)
			}
		}
	}
}

// noRBACDenial is the step that fails on any "forbidden" the operator's
// pods logged: its RBAC lacks something it does. Every pod's log must
// hold its start line, so that an unreadable log cannot pass.
func (o operator) noRBACDenial(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	var pods corev1.PodList
	if err := cfg.Client().Resources(o.namespace).List(ctx, &pods, resources.WithLabelSelector(o.podSelector())); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no operator pods in %s", o.namespace)
	}
	for _, p := range pods.Items {
		out, err := harness.Kubectl(ctx, cfg, "logs", "-n", o.namespace, p.Name, "--tail=-1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, `"msg":"starting"`) {
			t.Errorf("the log of %s (on %s) has no start line; read:\n%.2000s", p.Name, p.Spec.NodeName, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "forbidden") {
				t.Errorf("%s: %s", p.Name, l)
			}
		}
	}
	return ctx
}

// undeploy is `make -C examples/<example> undeploy` (or helm uninstall), for a teardown:
// afterwards neither the operator's namespace, its CRDs, its cluster-wide
// RBAC nor a Helm release record may be left.
func (o operator) undeploy(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	t.Helper()
	// Deleting the CRDs waits for every custom resource to go; one whose
	// finalizer cannot finish (the operator is deleted at the same time)
	// would hold make undeploy forever.
	uctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if out, err := o.uninstall(uctx, cfg); err != nil {
		t.Errorf("%s uninstall: %v (a custom resource whose finalizer could not finish holds its CRD)\n%s", o.how(), err, out)
	}
	left := []string{"namespace/" + o.namespace, "clusterrole/" + o.name + "-manager-role",
		"clusterrole/" + o.name + "-metrics-reader", "clusterrolebinding/" + o.name + "-manager-rolebinding"}
	for _, crd := range o.crds {
		left = append(left, "customresourcedefinition/"+crd)
	}
	harness.WaitFor(ctx, t, "the operator's namespace, CRDs and cluster roles to go", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		out, err := harness.Kubectl(ctx, cfg, append([]string{"get"}, append(left, "--ignore-not-found", "-o", "name")...)...)
		return err == nil && strings.TrimSpace(out) == "", out + fmt.Sprint(err)
	})
	// Helm records a release in Secrets labelled owner=helm: none may stay.
	if out, err := harness.Kubectl(ctx, cfg, "get", "secrets", "-A", "-l", "owner=helm,name="+o.name, "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm release records left: %q, %v", out, err)
	}
}

// metricsOnlyForReaders is the step that scrapes the operator's metrics
// Service from pods in ns: a ServiceAccount bound to the operator's
// metrics-reader ClusterRole reads them over HTTPS; another
// ServiceAccount's token gets 403 and no token 401.
func (o operator) metricsOnlyForReaders(ns string) func(context.Context, *testing.T, *envconf.Config) context.Context {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
		scraper, bystander := o.name+"-scraper", o.name+"-bystander"
		if out, err := harness.Kubectl(ctx, cfg, "create", "serviceaccount", scraper, "-n", ns); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := harness.Kubectl(ctx, cfg, "create", "clusterrolebinding", scraper,
			"--clusterrole="+o.name+"-metrics-reader", "--serviceaccount="+ns+":"+scraper); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		defer func() {
			_, _ = harness.Kubectl(context.WithoutCancel(ctx), cfg, "delete", "pod", scraper, bystander, "-n", ns, "--ignore-not-found", "--wait=false")
			_, _ = harness.Kubectl(context.WithoutCancel(ctx), cfg, "delete", "serviceaccount/"+scraper, "-n", ns, "--ignore-not-found")
			_, _ = harness.Kubectl(context.WithoutCancel(ctx), cfg, "delete", "clusterrolebinding/"+scraper, "--ignore-not-found")
		}()
		startToolbox(ctx, t, cfg, ns, scraper, scraper)
		startToolbox(ctx, t, cfg, ns, bystander, "")
		url := fmt.Sprintf("https://%s-controller-manager-metrics-service.%s.svc:8443/metrics", o.name, o.namespace)
		const token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		scrape := func(pod string, args ...string) string {
			out, err := harness.Kubectl(ctx, cfg, append([]string{"exec", "-n", ns, pod, "--", "toolbox", "https-get", url}, args...)...)
			if err != nil {
				t.Fatalf("scraping from %s: %v", pod, err)
			}
			return out
		}
		// The binding can take a moment to reach the authorizer's cache.
		harness.WaitFor(ctx, t, "an allowed scrape", time.Minute, 2*time.Second, func(context.Context) (bool, string) {
			out := scrape(scraper, token)
			return strings.HasPrefix(out, "HTTP 200\n") && strings.Contains(out, "controller_runtime_reconcile_total"), firstLine(out)
		})
		if got := firstLine(scrape(bystander, token)); got != "HTTP 403" {
			t.Errorf("a token not allowed to get /metrics: %s, want HTTP 403", got)
		}
		if got := firstLine(scrape(bystander)); got != "HTTP 401" {
			t.Errorf("no token: %s, want HTTP 401", got)
		}
		return ctx
	}
}

// startToolbox starts a pod running opkit.dev/toolbox (make images) as
// serviceAccount (empty: the namespace's default), changed by each of
// mutate, and waits until it is ready, for the suite to exec client
// commands in.
func startToolbox(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name, serviceAccount string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		// Restricted, as the operators' namespaces enforce.
		Spec: corev1.PodSpec{
			ServiceAccountName: serviceAccount,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "main", Image: "opkit.dev/toolbox:dev", ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"sleep"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	for _, m := range mutate {
		m(pod)
	}
	if err := cfg.Client().Resources().Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := wait.For(conditions.New(cfg.Client().Resources()).PodReady(pod), wait.WithContext(ctx), wait.WithTimeout(2*time.Minute)); err != nil {
		t.Fatalf("toolbox pod %s not ready: %v; %s", name, err, harness.DescribePods(ctx, cfg, ns))
	}
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// operatorDisruption serialises the steps that kill or roll an operator
// with those, in a feature running beside them, that need its pods to stay
// put (upgradeInPlace reads the new leader's log). Each holds it for its
// whole length.
var operatorDisruption sync.Mutex

// killLeader force-deletes the operator pod holding its leader-election
// Lease, as a node failure would, and returns its name. The other replica
// keeps serving the webhooks and takes the Lease once it expires.
func (o operator) killLeader(ctx context.Context, t *testing.T, cfg *envconf.Config, lease string) string {
	t.Helper()
	leader := leaderPod(ctx, t, cfg, o.namespace, lease)
	if out, err := harness.Kubectl(ctx, cfg, "delete", "pod", leader, "-n", o.namespace, "--force", "--grace-period=0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return leader
}

// mustKubectl runs kubectl with stdin and returns its output; it fails t
// on an error, with the output.
func mustKubectl(ctx context.Context, t *testing.T, cfg *envconf.Config, stdin string, args ...string) string {
	t.Helper()
	cmd, err := harness.KubectlCommand(ctx, cfg, args...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
