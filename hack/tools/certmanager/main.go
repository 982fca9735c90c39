// Command cert-manager is cert-manager's certificate controllers and its CA
// injector in one process, built from the cert-manager module: the proxy
// serves github.com/cert-manager/cert-manager but not its cmd/ modules, so
// this main wires what their Run functions do for the pieces the local
// cluster needs. It issues Certificates from SelfSigned and CA Issuers and
// ClusterIssuers and injects CAs into webhook configurations and CRDs
// (cert-manager.io/inject-ca-from). There is no ACME, Vault, Venafi or
// ingress shim, and no cert-manager webhook: its own objects are not
// validated at admission.
//
// One replica, no leader election. `make images` builds it into the image
// opkit.dev/cert-manager; hack/certmanager holds its manifests.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuer kinds the issuers controllers set up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// enabled are the controllers this build runs, of those the imports
// register.
var enabled = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	issuing.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

func main() {
	resourceNS := flag.String("cluster-resource-namespace", "cert-manager", "namespace of the Secrets ClusterIssuers refer to")
	flag.Parse()
	logf.InitLogs()
	ctrl.SetLogger(logf.Log)
	if err := run(*resourceNS); err != nil {
		logf.Log.Error(err, "cert-manager stopped")
		os.Exit(1)
	}
}

// run runs until SIGTERM or a failure.
func run(resourceNS string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, ctx := errgroup.WithContext(logf.NewContext(ctx, logf.Log, "cert-manager"))
	g.Go(func() error { return runControllers(ctx, resourceNS) })
	g.Go(func() error { return runInjector(ctx) })
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// runControllers is cmd/controller/app.Run without its servers, leader
// election, ACME and shims.
func runControllers(ctx context.Context, resourceNS string) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		// Empty in a pod: the in-cluster configuration.
		Kubeconfig:         cmp.Or(flag.Lookup("kubeconfig").Value.String(), os.Getenv("KUBECONFIG")),
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: resourceNS},
	})
	if err != nil {
		return err
	}
	cctx, err := factory.Build()
	if err != nil {
		return err
	}
	known := controller.Known()
	g, ctx := errgroup.WithContext(ctx)
	for _, name := range enabled {
		newController, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := newController(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(2, ctx) })
	}
	cctx.SharedInformerFactory.Start(ctx.Done())
	cctx.KubeSharedInformerFactory.Start(ctx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	err = g.Wait()
	cctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cctx.KubeSharedInformerFactory.Shutdown()
	cctx.SharedInformerFactory.Shutdown()
	return err
}

// runInjector is cmd/cainjector/app.Run for webhook configurations and
// CRDs, with Certificates as a data source.
func runInjector(ctx context.Context) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// The injector's field manager is taken from the user agent.
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(cfg, "cainjector"), ctrl.Options{
		Scheme:  scheme,
		Cache:   cache.Options{ReaderFailOnMissingInformer: true},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
