package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/reconcile"
)

// The ratios are only honest if every contender's Deployments, and so
// their ReplicaSets and pods, are the objects opkit's are: a bigger pod
// costs more in every write, watch event and etcd read of it. The
// benchmark builds the others' Deployments itself (newDeployment and the
// tutorial's mutateDeployment), so it checks them against what the
// operator created, in the run, after each create step.

// deploymentShape is what of a Deployment must be the same for every
// contender: its spec and its pod template's spec as the API server holds
// them (defaults included), and the keys of its labels and selector. The
// values name the contender; opkit's applied-digest label is the library's
// own cost and stays out.
type deploymentShape struct {
	Spec           appsv1.DeploymentSpec
	Labels         []string
	TemplateLabels []string
	SelectorKeys   []string
}

// shapeOf is d's shape.
func shapeOf(d *appsv1.Deployment) deploymentShape {
	spec := *d.Spec.DeepCopy()
	spec.Selector = nil
	spec.Template.Labels, spec.Template.Annotations = nil, nil
	keys := func(m map[string]string) []string {
		return slices.DeleteFunc(slices.Sorted(maps.Keys(m)), func(k string) bool { return k == reconcile.LabelAppliedDigest })
	}
	var selector []string
	if d.Spec.Selector != nil {
		selector = keys(d.Spec.Selector.MatchLabels)
	}
	return deploymentShape{Spec: spec, Labels: keys(d.Labels), TemplateLabels: keys(d.Spec.Template.Labels), SelectorKeys: selector}
}

// sameChildren fails when the contender's Deployment differs in shape from
// opkit's, naming what to change.
func sameChildren(contender string, opkit, other *appsv1.Deployment) error {
	if diff := cmp.Diff(shapeOf(opkit), shapeOf(other)); diff != "" {
		return fmt.Errorf("the %s contender's Deployments are not the ones examples/memcached creates, so its ratios would not compare the same objects; "+
			"make hack/scale build them as the operator does (newDeployment in contenders.go, mutateDeployment in tutorial/controller.go) (-opkit +%s):\n%s", contender, contender, diff)
	}
	return nil
}

// checkChildren records the contender's sample Deployment d and compares
// it with opkit's as soon as both are known: opkit's with every contender
// measured before it, another's with opkit's.
func (b *bench) checkChildren(d *appsv1.Deployment) error {
	b.deployments[b.cur.name] = d
	o := b.deployments[contOpkit]
	if o == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(b.deployments)) {
		if name == contOpkit || (b.cur.name != contOpkit && name != b.cur.name) {
			continue
		}
		if err := sameChildren(name, o, b.deployments[name]); err != nil {
			return err
		}
	}
	return nil
}

// sampleDeployment reads the Deployment of the contender's first object.
func sampleDeployment(ctx context.Context, c client.Client, ns, name string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return nil, fmt.Errorf("reading a Deployment to compare the contenders' children: %w", err)
	}
	return d, nil
}
