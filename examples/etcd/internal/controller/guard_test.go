package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/guard/guardtest"
)

// shippedGuardPolicy decodes config/guard/policy.yaml.
func shippedGuardPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	raw, err := os.ReadFile("../../config/guard/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("config/guard/policy.yaml holds %d documents, want the policy and its binding", len(docs))
	}
	p, b := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), p); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), b); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// TestGuardPolicyIsTheLibrarys: the installers' policy is guard.Policy's.
func TestGuardPolicyIsTheLibrarys(t *testing.T) {
	gotP, gotB := shippedGuardPolicy(t)
	wantP, wantB := guard.Policy(controller.GuardPolicy)
	if diff := cmp.Diff(wantP, gotP); diff != "" {
		t.Errorf("config/guard policy (-guard.Policy +shipped):\n%s", diff)
	}
	if diff := cmp.Diff(wantB, gotB); diff != "" {
		t.Errorf("config/guard binding (-guard.Policy +shipped):\n%s", diff)
	}
}

var installGuardPolicy sync.Once

// withGuardPolicy installs the shipped policy in the test API server, as
// the installers do in a cluster, and returns once admission enforces it:
// it reaches admission through informers, and the real namespace
// controller would not wait for them.
func withGuardPolicy(t *testing.T) {
	t.Helper()
	installGuardPolicy.Do(func() {
		p, b := shippedGuardPolicy(t)
		for _, o := range []client.Object{p, b} {
			if err := env.Client.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		if err := guardtest.WaitEnforced(context.Background(), env.Client); err != nil {
			t.Fatal(err)
		}
	})
}

// deleteChildren deletes every pod, claim, Service and Secret of cluster,
// as the namespace controller does, and returns the errors by object.
func (g *rig) deleteChildren(cluster string, opts ...client.DeleteOption) map[string]string {
	g.t.Helper()
	refused := map[string]string{}
	for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.PersistentVolumeClaimList{}, &corev1.ServiceList{}, &corev1.SecretList{}} {
		if err := g.c.List(g.t.Context(), list, client.InNamespace(g.ns), client.MatchingLabels{controller.LabelCluster: cluster}); err != nil {
			g.t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			if err := g.c.Delete(g.t.Context(), obj, opts...); client.IgnoreNotFound(err) != nil {
				refused[fmt.Sprintf("%T %s", obj, obj.GetName())] = err.Error()
			}
		}
	}
	return refused
}

// eventually polls cond every 100 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last: %s", what, err, last)
	}
}
