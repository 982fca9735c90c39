// Command etcd is the etcd example operator: EtcdClusters with quorum-safe
// membership changes, upgrades, backups and restores, built from opkit's
// reconcile, statusutil, ownership and backup packages.
//
// Run it against the cluster of $KUBECONFIG with `go run .` in examples/etcd
// (make run-etcd). Outside the cluster, pod DNS names do not resolve: pass
// --member-access=port-forward to reach every member through a
// port-forward of the API server (as kubectl port-forward does), or
// --client-url-template to reach members at URLs of your own.
//
// The same binary runs the init containers of a physically restored seed
// member (see --restore-image):
//
//	etcd-operator fetch-backup --data-dir=DIR --backup-id=ID --prefix=NS/CLUSTER (--store-dir=DIR | --s3-secret-dir=DIR)
//	etcd-operator finish-restore --data-dir=DIR
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/examples/etcd/internal/seedrestore"
	"github.com/opkit-dev/opkit/securemetrics"
	"github.com/opkit-dev/opkit/webhook"
)

// version is this build of the operator, logged when it starts. The linker
// sets it: go build -ldflags "-X main.version=v2" (make images sets the
// images' tag).
var version = "(devel)"

func main() {
	if len(os.Args) > 1 {
		if sub, ok := subcommands[os.Args[1]]; ok {
			if err := sub(ctrl.SetupSignalHandler(), os.Args[2:], os.Stdout); err != nil {
				// The kubelet shows the end of the log as the init
				// container's termination message.
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			return
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd operator:", err)
		os.Exit(1)
	}
}

// subcommands run the steps of a physical restore, and of a rebuild from a
// surviving member, in a member pod's init containers.
var subcommands = map[string]func(context.Context, []string, io.Writer) error{
	seedrestore.CommandFetch:       seedrestore.RunFetch,
	seedrestore.CommandStageMember: seedrestore.RunStageMember,
	seedrestore.CommandFinish:      seedrestore.RunFinish,
}

// The values of --member-access.
const (
	memberAccessDNS         = "dns"
	memberAccessPortForward = "port-forward"
)

func run() error {
	var (
		metricsAddr, probeAddr, backupRoot, urlTemplate, memberAccess, restoreImage string
		leaderElect, metricsSecure                                                  bool
		bootstrapTimeout, memberStartTimeout                                        time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint; 0 disables it")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "serve metrics over HTTPS to authenticated, authorised clients only (a bearer token allowed to get /metrics); false serves plain HTTP to anyone, for local runs")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the health probes")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader among replicas of the operator")
	flag.StringVar(&backupRoot, "backup-root", "/backups", "directory under which backup claims are mounted: <root>/<namespace>/<pvcName> serves storeRef.pvcName of that namespace")
	flag.StringVar(&memberAccess, "member-access", memberAccessDNS,
		"how members are reached: dns (their pod DNS names, inside the cluster) or port-forward "+
			"(a port-forward through the API server per member pod, for running outside the cluster; needs create on pods/portforward)")
	flag.StringVar(&urlTemplate, "client-url-template", "",
		"client URL of a member, with {member}, {cluster} and {namespace} replaced; empty uses in-cluster pod DNS names (with --member-access=dns only)")
	flag.DurationVar(&bootstrapTimeout, "bootstrap-timeout", controller.DefaultBootstrapTimeout,
		"how long the seed member of a new EtcdCluster may take to answer before the cluster is reported Degraded (reason BootstrapTimeout)")
	flag.DurationVar(&memberStartTimeout, "member-start-timeout", controller.DefaultMemberStartTimeout,
		"how long a member's pod may stay Pending, and a learner may take to be promoted, before the cluster is reported Degraded (reasons MemberPodPending, LearnerNotCaughtUp)")
	flag.StringVar(&restoreImage, "restore-image", "",
		"image of this operator, run as init containers of the seed pod of a restored EtcdCluster to restore it physically "+
			"(fetch-backup, then the cluster's etcdutl, then finish-restore); empty restores logically through the client API, "+
			"losing revisions and leased keys")
	wh := webhook.Flags{
		Service:                 "etcd-operator-webhook-service",
		ValidatingConfiguration: "etcd-operator-validating-webhook-configuration",
	}
	wh.BindFlags(flag.CommandLine)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if restoreImage == "" {
		ctrl.Log.Info("--restore-image is empty: EtcdClusters with spec.restore are restored logically (revisions and leased keys are lost, and a client addressing the seed pod by name reads part of the backup until it is restored)")
	} else {
		ctrl.Log.Info("EtcdClusters with spec.restore are restored physically", "restoreImage", restoreImage)
	}
	if bootstrapTimeout <= 0 {
		return errors.New("--bootstrap-timeout must be positive, for example 5m")
	}
	if memberStartTimeout <= 0 {
		return errors.New("--member-start-timeout must be positive, for example 10m")
	}
	switch memberAccess {
	case memberAccessDNS:
	case memberAccessPortForward:
		if urlTemplate != "" {
			return errors.New("--client-url-template cannot be combined with --member-access=port-forward, which dials the pods themselves: drop one of them")
		}
	default:
		return fmt.Errorf("--member-access=%q: want %s or %s", memberAccess, memberAccessDNS, memberAccessPortForward)
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cacheOpts, err := controller.CacheOptions()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                securemetrics.ServerOptions(metricsAddr, metricsSecure),
		HealthProbeBindAddress: probeAddr,
		WebhookServer:          wh.Server(),
		LeaderElection:         leaderElect,
		LeaderElectionID:       "etcd-operator.etcd.opkit.dev",
		// Step down on SIGTERM so that a new replica takes over at once
		// (a rollout of the operator's Deployment), not after the lease.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	endpoints := controller.Endpoints{}
	if urlTemplate != "" {
		endpoints.ClientURL = func(c *v1alpha1.EtcdCluster, member string) string {
			return strings.NewReplacer("{member}", member, "{cluster}", c.Name, "{namespace}", c.Namespace).Replace(urlTemplate)
		}
	}
	factory, err := etcdFactory(mgr, memberAccess)
	if err != nil {
		return err
	}
	err = controller.SetupWithManager(mgr, controller.Options{
		Etcd: factory, Endpoints: endpoints, BackupRoot: backupRoot, RestoreImage: restoreImage,
		BootstrapTimeout: bootstrapTimeout, MemberStartTimeout: memberStartTimeout, Webhooks: wh.Enabled(),
	})
	if err != nil {
		return err
	}
	if err := wh.Setup(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	ctrl.Log.Info("starting", "version", version, "leaderElection", leaderElect, "webhookPort", wh.Port)
	return mgr.Start(ctx)
}

// etcdFactory returns the etcd client factory for --member-access. A
// port-forward factory is closed, its forwards with it, when the manager
// stops.
func etcdFactory(mgr manager.Manager, memberAccess string) (etcdclient.Factory, error) {
	if memberAccess != memberAccessPortForward {
		return etcdclient.NewFactory(0), nil
	}
	pf, err := etcdclient.NewPortForwardFactory(mgr.GetConfig(), mgr.GetClient(),
		etcdclient.WithLogger(ctrl.Log.WithName("port-forward")))
	if err != nil {
		return nil, fmt.Errorf("--member-access=port-forward: %w", err)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return pf.Close()
	}))
	if err != nil {
		return nil, fmt.Errorf("--member-access=port-forward: %w", err)
	}
	return pf, nil
}
