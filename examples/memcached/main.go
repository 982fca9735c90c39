// Command memcached is opkit's example Memcached operator: it runs the
// controller of package controller against the cluster of --kubeconfig (or
// $KUBECONFIG, or the in-cluster configuration).
//
//	cd examples/memcached && go run . --kubeconfig ~/.kube/config --namespaces default
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/examples/memcached/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/memcached/api/v1beta1"
	"github.com/opkit-dev/opkit/examples/memcached/internal/controller"
	"github.com/opkit-dev/opkit/reconcile"
	"github.com/opkit-dev/opkit/restmap"
	"github.com/opkit-dev/opkit/securemetrics"
	"github.com/opkit-dev/opkit/shard"
	"github.com/opkit-dev/opkit/webhook"
)

// version is this build of the operator, logged when it starts. The linker
// sets it: go build -ldflags "-X main.version=v2" (make images sets the
// images' tag).
var version = "(devel)"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "memcached operator:", err)
		os.Exit(1)
	}
}

// defaultGCPercent is the operator's GOGC unless the environment sets one.
// The heap of an operator is mostly its informer caches, live for the whole
// process; with Go's default of 100 the garbage between two collections may
// grow as large as those caches. 50 halves that headroom for more collector
// CPU: creating 1000 Memcacheds, the operator peaked at 68 MB and used 6.7
// CPU-seconds, against 79 MB and 4.9 with 100 (docs/benchmarks/scale.md,
// run 26).
const defaultGCPercent = 50

// defaultProgressDelay is how long a new Memcached or a spec change may roll
// out before its status is written with Reconciling=True. A rollout done
// within it costs one status write (Ready). At 1 minute, a burst of 1000
// Memcacheds on a 2-core control plane crossed the delay half-way through,
// and every Memcached then cost a second status write, which made the burst
// 20% slower still (docs/benchmarks/scale.md, "the progress delay's
// cliff"); 5 minutes keeps a burst of 2000 within it there and stays half
// the Deployment's own progress deadline (10 minutes by default). A failing
// rollout is not hidden by it: ReplicaFailure and ProgressDeadlineExceeded
// are written at once (Degraded=True, Ready=False).
const defaultProgressDelay = 5 * time.Minute

func run() error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	// --kubeconfig is registered on flag.CommandLine by controller-runtime
	// (ctrl.GetConfig reads it).
	o := bindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// newManager builds the operator's manager from its flags: the controller,
// the webhooks and the probes.
func newManager(cfg *rest.Config, o *flags) (ctrl.Manager, error) {
	wh := &o.webhook
	events, err := parseReadyEvents(o.readyEvents)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	// Only the kinds the operator reads or writes: a scheme of every
	// built-in kind (client-go's) would hold a second copy of type
	// information the process never uses.
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, v1alpha1.AddToScheme, v1beta1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	var watched []string
	for ns := range strings.SplitSeq(o.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			watched = append(watched, ns)
		}
	}
	cacheOpts := controller.CacheOptions(watched)
	cacheOpts.SyncPeriod = &o.syncPeriod
	sh, err := o.shardOf()
	if err != nil {
		return nil, err
	}
	var newCache cache.NewCacheFunc
	if sh != nil {
		sh.Ring.Namespaces = watched
		newCache = controller.ShardCache(*sh)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		WebhookServer:           wh.Server(),
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		NewCache:                newCache,
		MapperProvider:          restmap.Provider, // a cache of several namespaces maps the kind on every read
		Metrics:                 securemetrics.ServerOptions(o.metricsAddr, o.metricsSecure),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "memcached.cache.opkit.dev",
		LeaderElectionNamespace: o.leaderNamespace,
		// Step down quickly on SIGTERM so that a new leader takes over.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if _, err := controller.SetupWithManager(mgr, controller.Options{
		MaxConcurrentReconciles: o.concurrency, ProgressDelay: o.progressDelay, ReadyEvents: events,
		Webhooks: wh.Enabled(), Shard: sh,
	}); err != nil {
		return nil, err
	}
	if err := wh.Setup(mgr); err != nil {
		return nil, err
	}
	// Without the webhook the CRD cannot convert, and config/crd stores
	// at v1beta1 only.
	if wh.Enabled() {
		if err := controller.MigrateStorage(mgr); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	// Ready when serving (with webhooks, once their server has started: wh.Setup),
	// never on the caches: a list of Memcacheds stored at v1alpha1 needs this
	// replica's conversion webhook, which the Service sends only to ready
	// pods. The controller waits for its own caches.
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting", "version", version, "host", cfg.Host, "namespaces", watched, "leaderElection", o.leaderElect, "webhookPort", wh.Port, "shard", sh)
	return mgr, nil
}

// flags are the operator's command-line settings.
type flags struct {
	metricsAddr, probeAddr, pprofAddr, namespaces, leaderNamespace, readyEvents string
	leaderElect, metricsSecure, shard                                           bool
	shardIdentity, shardNamespace                                               string
	concurrency                                                                 int
	syncPeriod, progressDelay                                                   time.Duration
	webhook                                                                     webhook.Flags
}

// bindFlags registers the operator's flags on fs, with their defaults.
func bindFlags(fs *flag.FlagSet) *flags {
	o := &flags{webhook: webhook.Flags{
		Service:                 "memcached-operator-webhook-service",
		ValidatingConfiguration: "memcached-operator-validating-webhook-configuration",
		Conversions:             []string{controller.CRDName},
	}}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address the Prometheus metrics endpoint binds to; 0 disables it")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to authenticated, authorised clients only (a bearer token allowed to get /metrics); false serves plain HTTP to anyone, for local runs")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz endpoints bind to; 0 disables them")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "address the net/http/pprof endpoints bind to (for profiling; keep it on loopback); 0 disables them")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader (a Lease) so that only one replica reconciles")
	fs.StringVar(&o.leaderNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace in-cluster)")
	fs.StringVar(&o.namespaces, "namespaces", "", "comma-separated namespaces to watch; empty watches all")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 16, "Memcacheds reconciled at once (a pass mostly waits on API requests; different objects only)")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Hour, "how often the informers resync every cached object; a resync changes nothing and runs no pass (the watches' predicates drop it)")
	fs.StringVar(&o.readyEvents, "ready-events", "on-recovery", "when a Memcached's Normal Ready event is recorded: on-recovery (only when Ready becomes True from False; a new Memcached's first Ready is in its status alone) or always")
	fs.DurationVar(&o.progressDelay, "progress-delay", defaultProgressDelay, "a Memcached (or spec change) Ready within this delay gets one status write; a slower rollout shows Reconciling after it (0: at once). Until then status.observedGeneration is behind, which kstatus reads as in progress; a Deployment that fails (ReplicaFailure, ProgressDeadlineExceeded) is reported at once")
	fs.BoolVar(&o.shard, "shard", false, "spread the Memcacheds over the replicas: each holds a shard Lease listing its slots, and reconciles, and caches, only the Memcacheds of those slots (label slot.shard.opkit.dev/memcached); run without --leader-elect")
	fs.StringVar(&o.shardIdentity, "shard-identity", "", "this replica's name among the shards (default: $POD_NAME, else the host name, which is the pod's name in-cluster)")
	fs.StringVar(&o.shardNamespace, "shard-namespace", "", "namespace of the shard Leases (default: the pod's namespace in-cluster)")
	o.webhook.BindFlags(fs)
	return o
}

// inClusterNamespace holds the pod's namespace (the ServiceAccount's
// mount).
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// shardOf returns this replica's shard of --shard, or nil without it.
func (o *flags) shardOf() (*controller.Shard, error) {
	if !o.shard {
		return nil, nil
	}
	if o.leaderElect {
		return nil, errors.New("--shard with --leader-elect: every shard reconciles its own Memcacheds; drop --leader-elect")
	}
	id := cmp.Or(o.shardIdentity, os.Getenv("POD_NAME"))
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--shard: no --shard-identity, no $POD_NAME, and the host name: %w", err)
		}
		id = host
	}
	ns := o.shardNamespace
	if ns == "" {
		b, err := os.ReadFile(inClusterNamespace)
		if err != nil {
			return nil, fmt.Errorf("--shard: set --shard-namespace outside a cluster (%w)", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	return &controller.Shard{Ring: shard.Ring{Name: "memcached", Namespace: ns}, Identity: id}, nil
}

// The rights of --webhook-cert-secret outside the operator's namespace
// (config/webhook has the Role for the Secret): it writes its CA into
// the webhook configuration and the CRD's conversion webhook, and may
// update no other CRD.
//
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=update,resourceNames=memcacheds.cache.opkit.dev

// The rights the metrics endpoint's authentication and authorisation
// (--metrics-secure, securemetrics) use: it asks the API server who a
// bearer token is and whether they may get /metrics.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// parseReadyEvents reads --ready-events.
func parseReadyEvents(v string) (reconcile.ReadyEvents, error) {
	switch v {
	case "on-recovery":
		return reconcile.ReadyEventsOnRecovery, nil
	case "always":
		return reconcile.ReadyEventsAlways, nil
	}
	return 0, fmt.Errorf("--ready-events=%q: use on-recovery or always", v)
}
