package incluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/opkit-dev/opkit/e2e/harness"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/internal/repo"
)

// TestMemcachedOperatorCertManager is the webhooks' cert-manager variant:
// cert-manager (hack/certmanager, built from source by make images) runs
// on the real nodes, and the memcached operator, installed by make deploy
// CONFIG=certmanager and then by its chart with certManager.enable, serves
// the certificate cert-manager issued, whose CA cert-manager injected into
// the webhook configuration and the CRD. The operator's checks run at
// admission and v1alpha1 converts, as in TestMemcachedOperatorInCluster.
//
// Not parallel: TestMemcachedOperatorInCluster installs the same
// cluster-scoped CRD, and parallel tests start after this one ends.
func TestMemcachedOperatorCertManager(t *testing.T) {
	img, err := harness.PushedImage(t.Context(), "opkit.dev/memcached-operator:dev")
	if err != nil {
		t.Fatal(err)
	}
	base := operator{
		example: "memcached", name: "memcached-operator", namespace: "memcached-system", img: img,
		addToScheme: v1beta1.AddToScheme, list: &v1beta1.MemcachedList{},
		crds: []string{"memcacheds.cache.opkit.dev"},
	}
	kustomize, helm := base, base
	kustomize.config = "certmanager"
	helm.chart = true
	helm.values = map[string]any{"certManager": map[string]any{"enable": true}}
	const ns = "default"
	f := features.New("memcached operator with cert-manager").
		Setup(installCertManager).
		Teardown(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			// A failed step skips the rest, the uninstall included: one
			// left installed would fail the next test's install.
			out, err := harness.Kubectl(ctx, cfg, "get", "namespace", base.namespace, "--ignore-not-found", "-o", "name")
			if err == nil && strings.TrimSpace(out) == "" {
				return ctx
			}
			op, how := kustomize, "kustomize"
			if out, _ := harness.Kubectl(ctx, cfg, "get", "secrets", "-A", "-l", "owner=helm,name="+base.name, "-o", "name"); strings.TrimSpace(out) != "" {
				op, how = helm, "Helm"
			}
			t.Logf("a failed step left the %s install of %s: undeploying it", how, op.name)
			op.undeploy(ctx, t, cfg)
			return ctx
		}).
		Teardown(uninstallCertManager)
	for _, v := range []struct {
		how string
		op  operator
	}{{"make deploy CONFIG=certmanager", kustomize}, {"helm install with certManager.enable", helm}} {
		f = f.Assess(v.how+": the operator runs", v.op.deploy).
			Assess(v.how+": the configuration and the CRD trust cert-manager's CA, of the Secret it wrote", v.op.trustsCertManager).
			Assess(v.how+": a refused spec names the field, an unpinned image warns", memcachedAdmission(ns)).
			Assess(v.how+": v1alpha1 and v1beta1 convert both ways", memcachedConverts(ns)).
			Assess(v.how+": the operator logged no RBAC denial", v.op.noRBACDenial).
			Assess(v.how+": uninstalled, nothing left", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				v.op.undeploy(ctx, t, cfg)
				return ctx
			})
	}
	testEnv.Test(t, f.Feature())
}

// certManagerManifests is cert-manager's namespace, RBAC and Deployment.
func certManagerManifests(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "hack", "certmanager", "cert-manager.yaml")
}

// certManagerCRDs is the deploy/crds directory of the cert-manager module
// hack/tools/certmanager pins (downloaded by make images).
func certManagerCRDs(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/cert-manager/cert-manager")
	cmd.Dir = filepath.Join(root, "hack", "tools", "certmanager")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download in %s: %v", cmd.Dir, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v, %s", err, out)
	}
	return filepath.Join(mod.Dir, "deploy", "crds")
}

// installCertManager applies cert-manager's CRDs and its manifests with
// the image by digest, and waits until its Deployment is Available.
func installCertManager(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	mustKubectl(ctx, t, cfg, "", "apply", "--server-side", "-f", certManagerCRDs(ctx, t))
	manifests, err := os.ReadFile(certManagerManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindSubmatch(manifests)
	if ref == nil {
		t.Fatal("hack/certmanager/cert-manager.yaml names no image")
	}
	img, err := harness.PushedImage(ctx, string(ref[1]))
	if err != nil {
		t.Fatal(err)
	}
	mustKubectl(ctx, t, cfg, strings.Replace(string(manifests), string(ref[1]), img, 1), "apply", "--server-side", "-f", "-")
	cond := conditions.New(cfg.Client().Resources())
	if err := wait.For(cond.DeploymentAvailable("cert-manager", "cert-manager"), wait.WithContext(ctx), wait.WithTimeout(3*time.Minute)); err != nil {
		t.Fatalf("cert-manager is not Available: %v; pods: %s", err, harness.DescribePods(ctx, cfg, "cert-manager"))
	}
	return ctx
}

// uninstallCertManager deletes what installCertManager applied.
func uninstallCertManager(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	for _, f := range []string{certManagerManifests(t), certManagerCRDs(ctx, t)} {
		if out, err := harness.Kubectl(ctx, cfg, "delete", "--ignore-not-found", "--wait=true", "--timeout=2m", "-f", f); err != nil {
			t.Errorf("delete %s: %v\n%s", f, err, out)
		}
	}
	return ctx
}

// trustsCertManager waits until the operator's webhook configuration and
// its CRDs' conversion webhooks hold, as caBundle, the ca.crt of the
// Secret cert-manager issued (so labelled by it), which the pods mount.
func (o operator) trustsCertManager(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	secret := o.name + "-webhook-server-cert"
	get := func(args ...string) string {
		out, err := harness.Kubectl(ctx, cfg, append([]string{"get"}, args...)...)
		if err != nil {
			return "error: " + err.Error()
		}
		return out
	}
	defer func() {
		if t.Failed() {
			t.Logf("the Certificate's status: %s", get("certificate", o.name+"-serving-cert", "-n", o.namespace, "-o", "jsonpath={.status}"))
			out, err := harness.Kubectl(ctx, cfg, "logs", "-n", "cert-manager", "deployment/cert-manager", "--tail=80")
			t.Logf("cert-manager's log (%v):\n%s", err, out)
		}
	}()
	harness.WaitFor(ctx, t, "cert-manager's CA in every caBundle", 2*time.Minute, time.Second, func(ctx context.Context) (bool, string) {
		issuedBy := get("secret", secret, "-n", o.namespace, "-o", `jsonpath={.metadata.annotations.cert-manager\.io/certificate-name}`)
		if want := o.name + "-serving-cert"; issuedBy != want {
			return false, "the Secret's cert-manager.io/certificate-name is " + issuedBy + ", want " + want
		}
		ca := get("secret", secret, "-n", o.namespace, "-o", `jsonpath={.data.ca\.crt}`)
		if ca == "" {
			return false, "no ca.crt in the Secret"
		}
		bundles := map[string]string{
			"the validating configuration": get("validatingwebhookconfiguration", o.name+"-validating-webhook-configuration", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}"),
		}
		for _, crd := range o.crds {
			bundles["CRD "+crd] = get("crd", crd, "-o", "jsonpath={.spec.conversion.webhook.clientConfig.caBundle}")
		}
		for what, b := range bundles {
			switch {
			case b == "":
				return false, what + " holds no caBundle"
			case b != ca:
				return false, fmt.Sprintf("%s holds another caBundle (%.20s..., the Secret's %.20s...)", what, b, ca)
			}
		}
		return true, ""
	})
	return ctx
}
