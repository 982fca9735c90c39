package harness

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/opkit-dev/opkit/shard"
)

// ShardHolders says which of members holds each of ring's slots, from
// the SlotsAnnotation of their Leases in leaseNS, or why not every slot
// is held by one of members, each holding some. Other Leases are
// ignored.
func ShardHolders(ctx context.Context, cfg *envconf.Config, ring shard.Ring, leaseNS string, members []string) (map[int]string, string) {
	ring.Namespace = leaseNS
	leases, err := ring.Holders(ctx, cfg.Client().Resources().GetControllerRuntimeClient())
	if err != nil {
		return nil, err.Error()
	}
	held, per := map[int]string{}, map[string]int{}
	for _, m := range members { // a killed member's Lease lists its slots until it expires
		for _, n := range leases[m] {
			held[n] = m
			per[m]++
		}
	}
	slots := cmp.Or(ring.Slots, shard.DefaultSlots)
	for s := range slots {
		if !slices.Contains(members, held[s]) {
			return nil, fmt.Sprintf("slot %d held by %q, want one of %v (slots per member %v)", s, held[s], members, per)
		}
	}
	for _, m := range members {
		if per[m] == 0 {
			return nil, fmt.Sprintf("%s holds no slot: %v", m, per)
		}
	}
	return held, ""
}

// ShardChildrenLabelled says whether every Deployment, Service and
// PodDisruptionBudget in ns of an instance in owner (instance name to
// slot) carries its slot under label, with at least two children per
// instance.
func ShardChildrenLabelled(ctx context.Context, cfg *envconf.Config, ns, label string, owner map[string]string) (bool, string) {
	var deps appsv1.DeploymentList
	var svcs corev1.ServiceList
	var pdbs policyv1.PodDisruptionBudgetList
	var objs []client.Object
	for _, l := range []k8s.ObjectList{&deps, &svcs, &pdbs} {
		if err := cfg.Client().Resources(ns).List(ctx, l); err != nil {
			return false, err.Error()
		}
	}
	for i := range deps.Items {
		objs = append(objs, &deps.Items[i])
	}
	for i := range svcs.Items {
		objs = append(objs, &svcs.Items[i])
	}
	for i := range pdbs.Items {
		objs = append(objs, &pdbs.Items[i])
	}
	children := 0
	for _, o := range objs {
		want, ok := owner[o.GetLabels()["app.kubernetes.io/instance"]]
		if !ok {
			continue
		}
		children++
		if got := o.GetLabels()[label]; got != want {
			return false, fmt.Sprintf("%T %s labelled %q, want its instance's slot %s", o, o.GetName(), got, want)
		}
	}
	if children < 2*len(owner) {
		return false, fmt.Sprintf("%d children of %d instances", children, len(owner))
	}
	return true, ""
}
