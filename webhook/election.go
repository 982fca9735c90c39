package webhook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// errRotatorLeaseLost stops the manager of a replica that lost the
// rotator's Lease: another may be writing already.
var errRotatorLeaseLost = errors.New("webhook: lost the certificate rotator's Lease")

// rotatorElection runs the rotator on one replica at a time, elected with
// a Lease of its own: the manager's leader election may be off (sharded
// replicas all run), and with it on, a Lease apart costs nothing. The
// rotator's manager is made only once elected: cert-controller's
// controller name is unique per process.
type rotatorElection struct {
	mgr   ctrl.Manager
	lease string
	setup func(ctrl.Manager) error
	c     Certificates
}

// NeedLeaderElection is false: the Lease elects.
func (e *rotatorElection) NeedLeaderElection() bool { return false }

func (e *rotatorElection) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(e.mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("webhook: the rotator's Lease client: %w", err)
	}
	host, _ := os.Hostname()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  ctrl.ObjectMeta{Namespace: e.c.Secret.Namespace, Name: e.lease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: host + "_" + uuid.NewString()},
	}
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	var started atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   rotatorLeaseDuration,
		RenewDeadline:   rotatorRenewDeadline,
		RetryPeriod:     rotatorRetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				started.Store(true)
				done <- e.run(ctx)
				cancel() // a rotator that stopped gives the Lease up
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("webhook: the rotator's election: %w", err)
	}
	le.Run(ctx2)
	var runErr error
	if started.Load() {
		runErr = <-done
	}
	switch {
	case ctx.Err() != nil:
		return nil
	case runErr != nil:
		return runErr
	}
	return errRotatorLeaseLost
}

// The rotator's Lease timing: controller-runtime's leader election's.
const (
	rotatorLeaseDuration = 15 * time.Second
	rotatorRenewDeadline = 10 * time.Second
	rotatorRetryPeriod   = 2 * time.Second
)

// run runs the rotator in a manager of its own until ctx ends.
func (e *rotatorElection) run(ctx context.Context) error {
	m, err := ctrl.NewManager(e.mgr.GetConfig(), ctrl.Options{
		Scheme:                 e.mgr.GetScheme(),
		Logger:                 e.mgr.GetLogger().WithName("cert-rotator"),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("webhook: the rotator's manager: %w", err)
	}
	if err := e.setup(m); err != nil {
		return err
	}
	return m.Start(ctx)
}

var _ manager.LeaderElectionRunnable = &rotatorElection{}
