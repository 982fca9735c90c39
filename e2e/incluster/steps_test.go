package incluster

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/e2e/harness"
)

// operator is an example operator as config/default installs it.
type operator struct {
	// config is the kustomization directory (config/default).
	config string
	// namespace and name of its Deployment, whose pods carry
	// app.kubernetes.io/name=name.
	namespace, name string
	// image is what the Deployment must run (make images).
	image string
	// addToScheme and list register and probe its API once installed.
	addToScheme func(*runtime.Scheme) error
	list        k8s.ObjectList
}

// deploy is the step `kubectl apply -k config/default`: it waits until the
// operator's Deployment is Available with the expected image and the API
// is served.
func (o operator) deploy(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	if out, err := harness.Kubectl(ctx, cfg, "apply", "-k", o.config); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cond := conditions.New(cfg.Client().Resources())
	if err := wait.For(cond.DeploymentAvailable(o.name, o.namespace), wait.WithContext(ctx), wait.WithTimeout(3*time.Minute)); err != nil {
		t.Fatalf("the operator Deployment is not Available: %v; pods: %s", err, harness.DescribePods(ctx, cfg, o.namespace))
	}
	var dep appsv1.Deployment
	if err := cfg.Client().Resources().Get(ctx, o.name, o.namespace, &dep); err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != o.image {
		t.Errorf("operator image = %q, want %q", got, o.image)
	}
	if _, err := harness.WaitForAPI(o.addToScheme, o.list)(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// noRBACDenial is the step that fails on any "forbidden" the operator's
// pods logged: its RBAC lacks something it does.
func (o operator) noRBACDenial(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	out, err := harness.Kubectl(ctx, cfg, "logs", "-n", o.namespace, "-l", "app.kubernetes.io/name="+o.name, "--tail=-1", "--prefix")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "forbidden") {
			t.Errorf("operator log: %s", l)
		}
	}
	return ctx
}

// undeploy is `kubectl delete -k config/default`, for a teardown.
func (o operator) undeploy(ctx context.Context, t *testing.T, cfg *envconf.Config) {
	t.Helper()
	if out, err := harness.Kubectl(ctx, cfg, "delete", "-k", o.config, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
		t.Errorf("kubectl delete -k: %v\n%s", err, out)
	}
}

// startToolbox starts a pod running opkit.dev/toolbox (make images) as
// serviceAccount (empty: the namespace's default) and waits until it is
// ready, for the suite to exec client commands in.
func startToolbox(ctx context.Context, t *testing.T, cfg *envconf.Config, ns, name, serviceAccount string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{
			Name: "main", Image: "opkit.dev/toolbox:dev", ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"sleep"},
		}}},
	}
	if err := cfg.Client().Resources().Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := wait.For(conditions.New(cfg.Client().Resources()).PodReady(pod), wait.WithContext(ctx), wait.WithTimeout(2*time.Minute)); err != nil {
		t.Fatalf("toolbox pod %s not ready: %v; %s", name, err, harness.DescribePods(ctx, cfg, ns))
	}
}
