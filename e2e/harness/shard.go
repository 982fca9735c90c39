package harness

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
)

// ShardChildrenLabelled says whether every Deployment, Service and
// PodDisruptionBudget in ns of an instance in owner (instance name to
// member) carries its member under label, with at least two children per
// instance. Pods are left out: every shard caches their metadata.
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
			return false, fmt.Sprintf("%T %s labelled %q, want its instance's member %s", o, o.GetName(), got, want)
		}
	}
	if children < 2*len(owner) {
		return false, fmt.Sprintf("%d children of %d instances", children, len(owner))
	}
	return true, ""
}
