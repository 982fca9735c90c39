package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/membership"
)

// TestStatusVersionCountsEveryMember: status.version, against which a new
// spec.version is checked (one minor at a time), is the lowest version any
// member runs. Counting healthy members only, a cluster whose one member
// still on 3.5 was down reported 3.6 and accepted 3.7: a two-minor jump for
// that member.
func TestStatusVersionCountsEveryMember(t *testing.T) {
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	pod := func(name, version string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelVersion: version}}}
	}
	obs := &observation{
		pods: map[string]*corev1.Pod{"c-0": pod("c-0", "3.6.16"), "c-1": pod("c-1", "3.6.16"), "c-2": pod("c-2", "3.5.35")},
		planned: membership.Observed{Reached: true, Members: []membership.Member{
			{ID: 1, Name: "c-0", Healthy: true, Leader: true}, {ID: 2, Name: "c-1", Healthy: true}, {ID: 3, Name: "c-2"},
		}},
	}
	(&ClusterHooks{}).recordStatus(c, obs)
	if c.Status.Version != "3.5.35" {
		t.Errorf("status.version = %q, want 3.5.35 (the unhealthy member's)", c.Status.Version)
	}
	if err := membership.CheckUpgrade(c.Status.Version, "3.7.0"); err == nil {
		t.Error("3.7.0 accepted while a member runs 3.5")
	}
}

// TestStatusVersionKeepsAMemberWithoutItsPod: a member whose pod is gone
// or not labelled (deleted, evicted, being recreated) still holds data of
// the version it last ran, which status.members recorded. Counting only
// the members with a pod, deleting the last pods on 3.5 of a cluster
// half-way to 3.6 made status.version 3.6, a refused 3.7 became
// accepted, and the members were recreated on 3.7 over 3.5 data (issue
// #80, M1).
func TestStatusVersionKeepsAMemberWithoutItsPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods map[string]*corev1.Pod
	}{
		{"the old members' pods are gone", map[string]*corev1.Pod{"c-0": versionPod("c-0", "3.6.16")}},
		{"a recreated pod is not labelled yet", map[string]*corev1.Pod{"c-0": versionPod("c-0", "3.6.16"), "c-1": versionPod("c-1", ""), "c-2": versionPod("c-2", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
			c.Status.Version = "3.5.35"
			c.Status.Members = []v1alpha1.MemberStatus{{Name: "c-0", ID: "1", Version: "3.6.16"}, {Name: "c-1", ID: "2", Version: "3.5.35"}, {Name: "c-2", ID: "3", Version: "3.5.35"}}
			obs := &observation{
				pods: tc.pods,
				planned: membership.Observed{Reached: true, Members: []membership.Member{
					{ID: 1, Name: "c-0", Healthy: true, Leader: true}, {ID: 2, Name: "c-1"}, {ID: 3, Name: "c-2"},
				}},
			}
			(&ClusterHooks{}).recordStatus(c, obs)
			if c.Status.Version != "3.5.35" {
				t.Errorf("status.version = %q, want 3.5.35 (the members without a pod)", c.Status.Version)
			}
			if err := membership.CheckUpgrade(c.Status.Version, "3.7.0"); err == nil {
				t.Error("3.7.0 accepted while members hold 3.5 data")
			}
		})
	}
}

func versionPod(name, version string) *corev1.Pod {
	labels := map[string]string{}
	if version != "" {
		labels[LabelVersion] = version
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}
