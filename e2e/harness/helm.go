package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// HelmRelease is one release of a chart on disk, driven through helm's Go
// SDK the way `helm install|upgrade|uninstall` drive it: the release is
// recorded in Secrets of Namespace (helm's default storage) and every call
// waits (helm's --wait, kstatus) for what it applied or deleted.
type HelmRelease struct {
	// Chart is the chart's directory.
	Chart string
	// Name is the release name; Namespace is helm -n.
	Name, Namespace string
	// Kubeconfig is the cluster's kubeconfig file.
	Kubeconfig string
	// Timeout bounds each call's wait (default 3 minutes).
	Timeout time.Duration
}

// RenderChart renders the chart in dir with values as `helm template` does
// (client-only, no cluster): release name, namespace, and the manifest.
func RenderChart(ctx context.Context, dir, release, namespace string, values map[string]any) (string, error) {
	rel, err := renderChart(ctx, dir, release, namespace, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// RenderChartNotes renders the chart's NOTES.txt, as helm install prints
// it, with values.
func RenderChartNotes(ctx context.Context, dir, release, namespace string, values map[string]any) (string, error) {
	rel, err := renderChart(ctx, dir, release, namespace, values)
	if err != nil {
		return "", err
	}
	if rel.Info == nil {
		return "", fmt.Errorf("rendering the chart %s: no release info", dir)
	}
	return rel.Info.Notes, nil
}

func renderChart(ctx context.Context, dir, release, namespace string, values map[string]any) (*releasev1.Release, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	install := action.NewInstall(action.NewConfiguration(quietLogger()))
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName, install.Namespace = release, namespace
	rel, err := install.RunWithContext(ctx, ch, values)
	if err != nil {
		return nil, fmt.Errorf("rendering the chart %s: %w", dir, err)
	}
	return asRelease(rel)
}

// Install is `helm install` with values. Namespace must exist (helm records
// the release there first). It returns the release's manifest.
func (r HelmRelease) Install(ctx context.Context, values map[string]any) (string, error) {
	ch, cfg, err := r.load()
	if err != nil {
		return "", err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = r.Name, r.Namespace
	install.WaitStrategy, install.Timeout = kube.StatusWatcherStrategy, r.timeout()
	rel, err := install.RunWithContext(ctx, ch, values)
	if err != nil {
		return "", fmt.Errorf("helm install %s %s: %w", r.Name, r.Chart, err)
	}
	return manifest(rel)
}

// Upgrade is `helm upgrade --reuse-values` with values on top.
func (r HelmRelease) Upgrade(ctx context.Context, values map[string]any) (string, error) {
	ch, cfg, err := r.load()
	if err != nil {
		return "", err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.ReuseValues = r.Namespace, true
	upgrade.WaitStrategy, upgrade.Timeout = kube.StatusWatcherStrategy, r.timeout()
	rel, err := upgrade.RunWithContext(ctx, r.Name, ch, values)
	if err != nil {
		return "", fmt.Errorf("helm upgrade %s %s: %w", r.Name, r.Chart, err)
	}
	return manifest(rel)
}

// Uninstall is `helm uninstall --wait`: it returns once every object of the
// release is gone, except those the chart asked helm to keep. Helm's
// uninstall takes no context: Timeout, not ctx, bounds it.
func (r HelmRelease) Uninstall(_ context.Context) error {
	cfg, err := r.configuration()
	if err != nil {
		return err
	}
	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy, uninstall.Timeout = kube.StatusWatcherStrategy, r.timeout()
	uninstall.IgnoreNotFound = true
	if _, err := uninstall.Run(r.Name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", r.Name, err)
	}
	return nil
}

// load reads the chart from disk and makes helm's client for it.
func (r HelmRelease) load() (chart.Charter, *action.Configuration, error) {
	ch, err := loader.Load(r.Chart)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the chart %s: %w", r.Chart, err)
	}
	cfg, err := r.configuration()
	return ch, cfg, err
}

// configuration is helm's client for the release's cluster and namespace,
// its releases stored in Secrets (helm's default driver).
func (r HelmRelease) configuration() (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &r.Kubeconfig, &r.Namespace
	cfg := action.NewConfiguration(quietLogger())
	if err := cfg.Init(flags, r.Namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration for %s: %w", r.Kubeconfig, err)
	}
	return cfg, nil
}

func (r HelmRelease) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return 3 * time.Minute
}

// manifest is the rendered manifest of a release helm returned.
func manifest(rel any) (string, error) {
	r, err := asRelease(rel)
	if err != nil {
		return "", err
	}
	return r.Manifest, nil
}

// asRelease is the release helm returned, of the one version it writes.
func asRelease(rel any) (*releasev1.Release, error) {
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return nil, errors.New("helm returned a release of an unknown version")
	}
	return r, nil
}

// quietLogger drops helm's own log lines; errors come back as errors.
func quietLogger() action.ConfigurationOption {
	return action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil))
}
