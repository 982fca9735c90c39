package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/opkit-dev/opkit/reconcile"
)

// opkitDeployment is the Deployment examples/memcached creates for a
// Memcached of size 1 with the CRD's defaults (its desiredDeployment, with
// the digest label its library adds), as testdata holds it.
func opkitDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "opkit-deployment.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := json.Unmarshal(data, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDirectChildrenAreOpkits: the direct and floor contenders create the
// Deployment the operator creates, up to the labels' values (and the
// operator's digest label).
func TestDirectChildrenAreOpkits(t *testing.T) {
	if err := sameChildren(contDirect, opkitDeployment(t), newDeployment("scale-direct", "mc-00000")); err != nil {
		t.Error(err)
	}
}

func TestSameChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(d *appsv1.Deployment)
		want   string // in the error; "" for none
	}{
		{name: "same", change: func(*appsv1.Deployment) {}},
		{name: "other label values", change: func(d *appsv1.Deployment) {
			d.Labels["app.kubernetes.io/name"] = "other"
			d.Spec.Template.Labels["app.kubernetes.io/name"] = "other"
			d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "other"
		}},
		{name: "no digest label", change: func(d *appsv1.Deployment) { delete(d.Labels, reconcile.LabelAppliedDigest) }},
		{name: "no security context", change: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].SecurityContext = nil }, want: "SecurityContext"},
		{name: "a label fewer on the pods", change: func(d *appsv1.Deployment) {
			delete(d.Spec.Template.Labels, "app.kubernetes.io/managed-by")
		}, want: "TemplateLabels"},
		{name: "a selector key more", change: func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchLabels["app.kubernetes.io/managed-by"] = "x"
		}, want: "SelectorKeys"},
		{name: "other probe", change: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds = 5 }, want: "PeriodSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := opkitDeployment(t)
			other.Namespace = "scale-direct"
			tc.change(other)
			err := sameChildren(contDirect, opkitDeployment(t), other)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want no error, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "newDeployment")):
				t.Errorf("want an error naming %q and newDeployment, got %v", tc.want, err)
			}
		})
	}
}
