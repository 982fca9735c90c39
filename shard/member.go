package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ErrIdentity is returned by a Member started without an identity.
var ErrIdentity = errors.New("shard: a member needs an identity, such as its pod's name")

// Member returns a manager Runnable that makes identity a member of r
// while it runs: it creates the member's Lease, renews it at a third of
// the lease duration, and deletes it on return so that the others take
// over at once rather than after the lease expires. It runs on every
// replica, leader or not. Start returns the first error renewing the
// Lease, which stops the manager: a replica that cannot renew must not go
// on acting as a member. leases is client-go's, as leader election's is,
// so the manager's scheme need not know Leases:
//
//	leases, err := coordinationv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
func (r Ring) Member(leases coordinationv1client.LeasesGetter, identity string) manager.Runnable {
	return &member{ring: r, leases: leases, identity: identity}
}

type member struct {
	ring     Ring
	leases   coordinationv1client.LeasesGetter
	identity string
}

var _ manager.LeaderElectionRunnable = (*member)(nil)

func (m *member) NeedLeaderElection() bool { return false }

func (m *member) Start(ctx context.Context) error {
	if m.identity == "" {
		return ErrIdentity
	}
	if err := m.renew(ctx); err != nil {
		return err
	}
	defer m.release()
	tick := time.NewTicker(m.ring.leaseDuration() / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := m.renew(ctx); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// renew moves the Lease's renewTime to now, or creates it. It reads
// nothing.
func (m *member) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	name, leases := m.ring.leaseName(m.identity), m.leases.Leases(m.ring.Namespace)
	patch := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, now.Format(metav1.RFC3339Micro))
	_, err := leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ring.Namespace, Labels: map[string]string{RingLabel: m.ring.Name}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(m.identity),
				LeaseDurationSeconds: ptr.To(int32(m.ring.leaseDuration() / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("shard: renewing the Lease %s/%s of ring %s: %w", m.ring.Namespace, name, m.ring.Name, err)
	}
	return nil
}

// release deletes the Lease, with a context of its own: the manager's
// has ended.
func (m *member) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.leases.Leases(m.ring.Namespace).Delete(ctx, m.ring.leaseName(m.identity), metav1.DeleteOptions{})
}
