// Command etcd is the etcd example operator: EtcdClusters with quorum-safe
// membership changes, upgrades, backups and restores, built from opkit's
// reconcile, statusutil, ownership and backup packages.
//
// Run it against the cluster of $KUBECONFIG with `go run ./examples/etcd`
// (make run-etcd). Outside the cluster, pod DNS names do not resolve: pass
// --client-url-template to reach members another way, for example through
// one kubectl port-forward per member.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/examples/etcd/internal/etcdclient"
	"github.com/opkit-dev/opkit/reconcile"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr, probeAddr, backupRoot, urlTemplate string
		leaderElect                                     bool
		bootstrapTimeout, memberStartTimeout            time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the health probes")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader among replicas of the operator")
	flag.StringVar(&backupRoot, "backup-root", "/backups", "directory under which backup PVCs are mounted, one directory per claim name")
	flag.StringVar(&urlTemplate, "client-url-template", "",
		"client URL of a member, with {member}, {cluster} and {namespace} replaced; empty uses in-cluster pod DNS names")
	flag.DurationVar(&bootstrapTimeout, "bootstrap-timeout", controller.DefaultBootstrapTimeout,
		"how long the seed member of a new EtcdCluster may take to answer before the cluster is reported Degraded (reason BootstrapTimeout)")
	flag.DurationVar(&memberStartTimeout, "member-start-timeout", controller.DefaultMemberStartTimeout,
		"how long a member's pod may stay Pending, and a learner may take to be promoted, before the cluster is reported Degraded (reasons MemberPodPending, LearnerNotCaughtUp)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if bootstrapTimeout <= 0 {
		return errors.New("--bootstrap-timeout must be positive, for example 5m")
	}
	if memberStartTimeout <= 0 {
		return errors.New("--member-start-timeout must be positive, for example 10m")
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "etcd-operator.etcd.opkit.dev",
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := controller.RegisterMetrics(); err != nil {
		return err
	}
	endpoints := controller.Endpoints{}
	if urlTemplate != "" {
		endpoints.ClientURL = func(c *v1alpha1.EtcdCluster, member string) string {
			return strings.NewReplacer("{member}", member, "{cluster}", c.Name, "{namespace}", c.Namespace).Replace(urlTemplate)
		}
	}
	const fieldOwner = "opkit-etcdcluster"
	children, err := reconcile.NewChildren(mgr.GetClient(), mgr.GetScheme(), fieldOwner)
	if err != nil {
		return err
	}
	stores := controller.DefaultStores(mgr.GetAPIReader(), backupRoot)
	factory := etcdclient.NewFactory(0)
	_, err = reconcile.SetupWithManager[*v1alpha1.EtcdCluster](mgr, &controller.ClusterHooks{
		Client: mgr.GetClient(), Children: children, Etcd: factory, Endpoints: endpoints, Stores: stores,
		BootstrapTimeout: bootstrapTimeout, MemberStartTimeout: memberStartTimeout,
	},
		reconcile.WithFieldOwner(fieldOwner),
		reconcile.WithOwns(&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}),
		reconcile.WithConditions(v1alpha1.ConditionAvailable),
		reconcile.WithNegativePolarityConditions(v1alpha1.ConditionDegraded),
		reconcile.WithMaxConcurrentReconciles(4))
	if err != nil {
		return fmt.Errorf("setting up the EtcdCluster controller: %w", err)
	}
	_, err = reconcile.SetupWithManager[*v1alpha1.EtcdBackup](mgr, &controller.BackupHooks{
		Client: mgr.GetClient(), Etcd: factory, Endpoints: endpoints, Stores: stores,
	}, reconcile.WithConditions(controller.ConditionComplete))
	if err != nil {
		return fmt.Errorf("setting up the EtcdBackup controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	return mgr.Start(ctx)
}
