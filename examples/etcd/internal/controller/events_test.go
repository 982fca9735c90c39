package controller_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// drain returns the events recorded so far.
func (g *rig) drain() []string {
	var out []string
	for {
		select {
		case e := <-g.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestEventsOnePerStep: every membership step, backup and deletion shows
// in `kubectl describe` as one event, not one per pass; passes that wait
// emit none. Before, the operator emitted no event of its own.
func TestEventsOnePerStep(t *testing.T) {
	g := newRig(t)
	g.createBackedUp("ev", 3, 0, 30)
	for range 3 { // converged: nothing to report
		if err := g.pass("ev"); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"Normal Bootstrapping creating seed member ev-0",
		"Normal ScalingUp adding member ev-1 (2 of 3)",
		"Normal PromotingLearner promoting learner ev-1",
		"Normal ScalingUp adding member ev-2 (3 of 3)",
		"Normal PromotingLearner promoting learner ev-2",
	}
	if diff := cmp.Diff(want, g.drain()); diff != "" {
		t.Errorf("events of bootstrap and growth (-want +got):\n%s", diff)
	}

	eb := &v1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: g.ns},
		Spec: v1alpha1.EtcdBackupSpec{ClusterName: "ev", StoreRef: v1alpha1.StoreReference{PVCName: "backups"}}}
	if err := g.c.Create(t.Context(), eb); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := g.backupPass(eb.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := reasons(g.drain()); !cmp.Equal([]string{"Normal BackupTaken"}, got) {
		t.Errorf("events of an EtcdBackup reconciled twice: %v, want one BackupTaken", got)
	}

	if err := g.c.Delete(t.Context(), g.get("ev")); err != nil {
		t.Fatal(err)
	}
	if err := g.operationPass("ev"); err != nil {
		t.Fatal(err)
	}
	if got := reasons(g.drain()); !cmp.Equal([]string{"Normal FinalBackupTaken"}, got) {
		t.Errorf("events of the deletion: %v, want one FinalBackupTaken", got)
	}
}

// reasons keeps the type and reason of each event.
func reasons(evs []string) []string {
	var out []string
	for _, e := range evs {
		typ, rest, _ := strings.Cut(e, " ")
		reason, _, _ := strings.Cut(rest, " ")
		out = append(out, typ+" "+reason)
	}
	return out
}
