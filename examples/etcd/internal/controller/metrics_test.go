package controller_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// clusterMetrics returns the series of the cluster ns/name on
// controller-runtime's registry, keyed by metric name and, for
// MetricBackups, "/trigger/result". Series of one member are left out
// (memberMetrics has them).
func clusterMetrics(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	return metricsOf(t, ns, name, false)
}

// memberMetrics returns the series of the members of cluster ns/name,
// keyed by metric name and "/member".
func memberMetrics(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	return metricsOf(t, ns, name, true)
}

func metricsOf(t *testing.T, ns, name string, members bool) map[string]float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] != ns || labels["name"] != name || (labels["member"] != "") != members {
				continue
			}
			key := f.GetName()
			if members {
				key += "/" + labels["member"]
			}
			switch f.GetName() {
			case controller.MetricBackups:
				key += "/" + labels["trigger"] + "/" + labels["result"]
			case controller.MetricDefragmentations:
				key += "/" + labels["result"]
			}
			if c := m.GetCounter(); c != nil {
				out[key] = c.GetValue()
			} else {
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestClusterMetrics follows the metrics of one cluster through growth, a
// leader change, a lost quorum, backups that succeed and fail, and
// deletion.
func TestClusterMetrics(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("m", 3, 3, 20)
	c := g.get("m")
	peer := func(member string) string { return controller.PeerURL(c, member) }

	const (
		members  = controller.MetricMembers
		healthy  = controller.MetricHealthyMembers
		quorum   = controller.MetricHasQuorum
		changes  = controller.MetricLeaderChanges
		demandOK = controller.MetricBackups + "/on-demand/success"
		demandKO = controller.MetricBackups + "/on-demand/failure"
		finalOK  = controller.MetricBackups + "/final/success"
	)
	backupOnce := func(name string, fail bool) {
		t.Helper()
		if fail {
			// The revision read every attempt starts with: a failed
			// snapshot of one member goes on to the next voter.
			g.fake.FailNext("Revision", errors.New("injected"), false)
		}
		eb := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.ns},
			Spec: v1alpha1.EtcdBackupSpec{ClusterName: "m", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}
		if err := g.c.Create(t.Context(), eb); err != nil {
			t.Fatal(err)
		}
		if err := g.backupPass(eb.Name); err != nil {
			t.Fatalf("backup %s: %v", name, err)
		}
	}

	steps := []struct {
		name string
		act  func()
		want map[string]float64
	}{
		{"converged at 3", func() {}, map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 0}},
		{"leader moves to m-1", func() { g.fake.SetLeader(peer("m-1")) },
			map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 1}},
		{"two members unhealthy: no quorum, no leader seen", func() {
			g.fake.SetHealthy(peer("m-1"), false)
			g.fake.SetHealthy(peer("m-2"), false)
		}, map[string]float64{members: 3, healthy: 1, quorum: 0, changes: 1}},
		{"healthy again under the same leader: no change", func() {
			g.fake.SetHealthy(peer("m-1"), true)
			g.fake.SetHealthy(peer("m-2"), true)
		}, map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 1}},
		{"leader moves to m-2", func() { g.fake.SetLeader(peer("m-2")) },
			map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 2}},
		{"on-demand backup succeeds", func() { backupOnce("ok", false) },
			map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 2, demandOK: 1}},
		{"on-demand backup fails, then succeeds", func() { backupOnce("ko", true) },
			map[string]float64{members: 3, healthy: 3, quorum: 1, changes: 2, demandOK: 2, demandKO: 1}},
	}
	for _, s := range steps {
		s.act()
		if err := g.pass("m"); err != nil {
			t.Fatalf("%s: pass: %v", s.name, err)
		}
		if diff := cmp.Diff(s.want, clusterMetrics(t, g.ns, "m")); diff != "" {
			t.Errorf("%s: metrics (-want +got):\n%s", s.name, diff)
		}
	}

	// A failed final backup is counted while deletion waits; the series go
	// with the cluster.
	if err := g.c.Delete(t.Context(), g.get("m")); err != nil {
		t.Fatal(err)
	}
	g.fake.FailNext("Revision", errors.New("injected"), false)
	for i := 0; clusterMetrics(t, g.ns, "m")[controller.MetricBackups+"/final/failure"] == 0; i++ {
		if i == 5 {
			t.Fatal("no failed final backup counted after 5 passes")
		}
		_ = g.pass("m")
	}
	if got := clusterMetrics(t, g.ns, "m")[finalOK]; got != 0 {
		t.Errorf("final backup successes = %v before one succeeded", got)
	}
	if err := g.operationPass("m"); err != nil {
		t.Fatalf("finalizing pass: %v", err)
	}
	if got := clusterMetrics(t, g.ns, "m"); len(got) != 0 {
		t.Errorf("series left after deletion: %v", got)
	}
	if got := memberMetrics(t, g.ns, "m"); len(got) != 0 {
		t.Errorf("member series left after deletion: %v", got)
	}
}
