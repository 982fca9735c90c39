package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
	"github.com/opkit-dev/opkit/statusutil"
)

// TestClusterBootstrap: a new cluster whose seed member has not answered
// yet is Bootstrapping, not Degraded, whether its pod is pending or runs;
// once the seed pod is older than the bootstrap timeout the cluster is
// Degraded with reason BootstrapTimeout naming the member, the timeout and,
// for a running pod, the endpoint dialed and the error. Nothing is added
// or deleted meanwhile, and a seed that answers late still converges.
func TestClusterBootstrap(t *testing.T) {
	tests := []struct {
		name string
		// run marks the seed pod Running (its member never answers).
		run bool
		// wantText must be in the Degraded message after the timeout.
		wantText []string
	}{
		{"seed pod pending", false, []string{"a-0", "5m0s", "Pending"}},
		{"seed pod running, member not answering", true,
			[]string{"a-0", "5m0s", "Running", "http://a-0.a.", ":2379", "no leader"}},
	}
	types := []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionProgressing, v1alpha1.ConditionAvailable,
		statusutil.ReconcilingCondition}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			g.create(cluster("a", 3))
			for range 3 {
				if err := g.pass("a"); err != nil {
					t.Fatal(err)
				}
				if tt.run {
					g.runPods("a", false)
				}
			}
			c := g.get("a")
			want := map[string]condition{
				v1alpha1.ConditionDegraded:      {metav1.ConditionFalse, controller.ReasonBootstrapping},
				v1alpha1.ConditionProgressing:   {metav1.ConditionTrue, controller.ReasonBootstrapping},
				v1alpha1.ConditionAvailable:     {metav1.ConditionFalse, "NoQuorum"},
				statusutil.ReconcilingCondition: {metav1.ConditionTrue, controller.ReasonBootstrapping},
			}
			if diff := cmp.Diff(want, conditionsOf(c, types...)); diff != "" {
				t.Errorf("conditions while bootstrapping (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a-0"}, g.names(&corev1.PodList{})); diff != "" {
				t.Errorf("pods while bootstrapping (-want +got):\n%s", diff)
			}

			g.clock.advance(controller.DefaultBootstrapTimeout + time.Minute)
			if err := g.pass("a"); err != nil {
				t.Fatal(err)
			}
			c = g.get("a")
			want = map[string]condition{
				v1alpha1.ConditionDegraded:      {metav1.ConditionTrue, controller.ReasonBootstrapTimeout},
				v1alpha1.ConditionProgressing:   {metav1.ConditionTrue, controller.ReasonBootstrapTimeout},
				v1alpha1.ConditionAvailable:     {metav1.ConditionFalse, "NoQuorum"},
				statusutil.ReconcilingCondition: {metav1.ConditionTrue, controller.ReasonBootstrapTimeout},
			}
			if diff := cmp.Diff(want, conditionsOf(c, types...)); diff != "" {
				t.Errorf("conditions after the bootstrap timeout (-want +got):\n%s", diff)
			}
			msg := statusutil.Get(c, v1alpha1.ConditionDegraded).Message
			for _, w := range tt.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("Degraded message %q does not mention %q", msg, w)
				}
			}
			if diff := cmp.Diff([]string{"a-0"}, g.names(&corev1.PodList{})); diff != "" {
				t.Errorf("pods after the bootstrap timeout (-want +got):\n%s", diff)
			}

			// The seed answers late: the cluster grows as usual.
			g.fake.Start("a-0", controller.PeerURL(c, "a-0"), controller.InClusterClientURL(c, "a-0"))
			g.converge("a", 20)
			c = g.get("a")
			if got := conditionsOf(c, v1alpha1.ConditionDegraded)[v1alpha1.ConditionDegraded]; got.Status != metav1.ConditionFalse {
				t.Errorf("Degraded = %+v after the seed answered", got)
			}
			if diff := cmp.Diff(voters("a-0", "a-1", "a-2"), g.etcdMembers()); diff != "" {
				t.Errorf("etcd members (-want +got):\n%s", diff)
			}
		})
	}
}
