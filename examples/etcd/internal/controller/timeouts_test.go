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
		statusutil.ConditionReconciling}
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
				statusutil.ConditionReconciling: {metav1.ConditionTrue, controller.ReasonBootstrapping},
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
				statusutil.ConditionReconciling: {metav1.ConditionTrue, controller.ReasonBootstrapTimeout},
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
			g.startMember("a", "a-0")
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

// TestClusterStuckMember: while a cluster grows, the new learner is
// starting, not a degradation; once its pod is older than the member start
// timeout without the learner being promoted, the cluster is Degraded with
// a reason naming the learner and what it waits on. Nothing is deleted, and
// a learner that starts late is still promoted.
func TestClusterStuckMember(t *testing.T) {
	tests := []struct {
		name string
		// run marks the learner's pod Running (its member never starts).
		run        bool
		wantReason string
		wantText   []string
	}{
		{"learner pod pending", false, controller.ReasonMemberPodPending, []string{"s-1", "Pending", "10m0s"}},
		{"learner pod running, member never joins", true, controller.ReasonLearnerNotCaughtUp, []string{"learner s-1", "not joined", "10m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			g.create(cluster("s", 1))
			g.converge("s", 10)
			c := g.get("s")
			c.Spec.Size = 2
			if err := g.c.Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := g.pass("s"); err != nil {
					t.Fatal(err)
				}
				if tt.run {
					g.runPods("s", false)
				}
			}
			types := []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionProgressing}
			want := map[string]condition{
				v1alpha1.ConditionDegraded:    {metav1.ConditionFalse, "MembersHealthy"},
				v1alpha1.ConditionProgressing: {metav1.ConditionTrue, "MemberUnhealthy"},
			}
			if diff := cmp.Diff(want, conditionsOf(g.get("s"), types...)); diff != "" {
				t.Errorf("conditions while the learner starts (-want +got):\n%s", diff)
			}
			// A learner that has not started has no name yet, as in etcd.
			members := []string{" learner=true", "s-0 learner=false"}
			if diff := cmp.Diff(members, g.etcdMembers()); diff != "" {
				t.Errorf("etcd members while the learner starts (-want +got):\n%s", diff)
			}

			g.clock.advance(controller.DefaultMemberStartTimeout + time.Minute)
			if err := g.pass("s"); err != nil {
				t.Fatal(err)
			}
			c = g.get("s")
			want = map[string]condition{
				v1alpha1.ConditionDegraded:    {metav1.ConditionTrue, tt.wantReason},
				v1alpha1.ConditionProgressing: {metav1.ConditionTrue, tt.wantReason},
			}
			if diff := cmp.Diff(want, conditionsOf(c, types...)); diff != "" {
				t.Errorf("conditions after the member start timeout (-want +got):\n%s", diff)
			}
			msg := statusutil.Get(c, v1alpha1.ConditionDegraded).Message
			for _, w := range tt.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("Degraded message %q does not mention %q", msg, w)
				}
			}
			if diff := cmp.Diff([]string{"s-0", "s-1"}, g.names(&corev1.PodList{})); diff != "" {
				t.Errorf("pods after the member start timeout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(members, g.etcdMembers()); diff != "" {
				t.Errorf("etcd members after the member start timeout (-want +got):\n%s", diff)
			}

			// The learner starts late: it is promoted.
			g.startMember("s", "s-1")
			g.converge("s", 10)
			if diff := cmp.Diff(voters("s-0", "s-1"), g.etcdMembers()); diff != "" {
				t.Errorf("etcd members (-want +got):\n%s", diff)
			}
			if got := conditionsOf(g.get("s"), v1alpha1.ConditionDegraded)[v1alpha1.ConditionDegraded]; got.Status != metav1.ConditionFalse {
				t.Errorf("Degraded = %+v after the learner was promoted", got)
			}
		})
	}
}
