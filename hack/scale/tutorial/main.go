// Command tutorial is a Memcached operator written the way the
// operator-sdk and kubebuilder Go tutorials teach, on purpose: the finalizer
// added and removed with Update, the children written with
// controllerutil.CreateOrUpdate, the status written with Status().Update on
// every pass, a first status write before anything else, the whole objects
// of every owned kind cached. It manages the same kind and the same
// children (Deployment, headless Service, PodDisruptionBudget for more than
// one pod) as examples/memcached, and reports Ready when the Deployment has
// rolled out, so that hack/scale can run it as the in-run peer of the opkit
// operator. It is a benchmark contender, not an example to follow. With
// --watch-only it only watches (see setupWatchOnly).
//
//	tutorial --kubeconfig k --namespace ns --metrics-bind-address 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tutorial:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr, pprofAddr, namespace string
		workers                                      int
		watchOnly                                    bool
		syncPeriod                                   time.Duration
	)
	// --kubeconfig is registered by controller-runtime.
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "address of the plain-HTTP metrics endpoint; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "0", "address of /healthz and /readyz; 0 disables them")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "address of the net/http/pprof endpoints (keep it on loopback); 0 disables them")
	flag.StringVar(&namespace, "namespace", "", "the only namespace to watch; empty watches all")
	flag.IntVar(&workers, "max-concurrent-reconciles", 16, "Memcacheds reconciled at once")
	flag.DurationVar(&syncPeriod, "sync-period", 10*time.Hour, "informer resync period")
	flag.BoolVar(&watchOnly, "watch-only", false, "only watch the Memcacheds and their Deployments, and write nothing (hack/scale's watched contender)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, addToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// The benchmark runs every contender with client-side rate limits off
	// (the cluster's are off too), so that none is throttled by its client.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cacheOpts := cache.Options{SyncPeriod: &syncPeriod}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
	})
	if err != nil {
		return err
	}
	if watchOnly {
		err = setupWatchOnly(mgr, workers)
	} else {
		r := &memcachedReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("memcached-tutorial")}
		err = r.setupWithManager(mgr, workers)
	}
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
