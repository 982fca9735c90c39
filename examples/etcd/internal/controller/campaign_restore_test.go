package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// restoreBlock offsets the loopback addresses of restored clusters from
// the schedules' own (newProcEtcd).
const restoreBlock = 20000

// restore creates a cluster from the on-demand backup name, which holds
// keys, while a fault drawn from s.rr strikes it at a random pass: a
// member killed, its claim lost, or the operator restarted. Once Ready it
// must hold exactly the backup's keys; it is then deleted. Clients keep
// writing to the schedule's cluster meanwhile.
func (s *schedule) restore(backup string, keys map[string]string) {
	g := s.g
	name := fmt.Sprintf("r%d", s.step)
	rc := cluster(name, []int32{1, 3}[s.rr.IntN(2)])
	rc.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: backup}
	g.create(rc)
	s.restoring = newProcEtcd(g.t, rc, restoreBlock+s.index)
	unlink := s.proc.link(s.restoring)
	defer func() {
		unlink()
		s.restoring = nil
	}()
	s.restores++
	fault, at := s.rr.IntN(4), s.rr.IntN(6)
	if fault == 1 {
		at %= 2 // before the restore is recorded
	}
	s.logf("restore %s into a new cluster %s of %d", backup, name, rc.Spec.Size)
	done := false
	deadline := time.Now().Add(s.wallBudget())
	for i := 0; i < s.budget(60) && !done && time.Now().Before(deadline); i++ {
		s.reconcile(name)
		s.kubelet()
		if i == at {
			// Status predates the fault: a pass must see it first.
			s.restoreFault(rc, fault)
			continue
		}
		done = s.ready(name)
	}
	if !done {
		s.violate("the cluster restored from %s is not Ready after %d passes or %s: %+v; etcd: %s",
			backup, s.budget(60), s.wallBudget(), g.get(name).Status.Conditions, s.restoring.logs())
	} else {
		s.checkRestored(name, backup, keys)
	}
	if err := g.c.Delete(g.t.Context(), rc); err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i < s.budget(20) && g.exists(rc) && time.Now().Before(deadline.Add(time.Minute)); i++ {
		s.reconcile(name)
		s.kubelet()
	}
	if g.exists(rc) {
		s.violate("the restored cluster %s is not deleted after %d passes: %+v", name, s.budget(20), g.get(name).Status.Conditions)
		return
	}
	// As the garbage collector would, which envtest does not run.
	if err := g.c.DeleteAllOf(g.t.Context(), &corev1.Pod{}, client.InNamespace(g.ns), client.MatchingLabels{controller.LabelCluster: name}); err != nil {
		g.t.Fatal(err)
	}
}

// restoreFault strikes the cluster being restored: 0 kills a member, 1
// deletes a member's pod and claim, 2 restarts the operator, 3 nothing.
// A claim is lost only before the restore is recorded: after, the seed's
// may hold the only copy of the data.
func (s *schedule) restoreFault(rc *v1alpha1.EtcdCluster, fault int) {
	g := s.g
	if fault == 1 && g.get(rc.Name).Status.Restored {
		fault = 0
	}
	names := g.names(&corev1.PodList{}, client.MatchingLabels{controller.LabelCluster: rc.Name})
	switch {
	case fault == 2:
		s.faults++
		s.logf("  operator restarted while %s restores", rc.Name)
		g.startOperator()
	case fault == 3 || len(names) == 0:
	case fault == 0:
		s.faults++
		p := names[s.rr.IntN(len(names))]
		s.logf("  pod %s killed while %s restores", p, rc.Name)
		s.killPod(p, true)
	case fault == 1:
		s.faults++
		p := names[s.rr.IntN(len(names))]
		s.logf("  pod %s and its claim lost while %s restores", p, rc.Name)
		var claim corev1.PersistentVolumeClaim
		if err := g.c.Get(g.t.Context(), client.ObjectKey{Namespace: g.ns, Name: p + "-data"}, &claim); err == nil {
			// The seed starts again on a new claim under the same ID, as
			// the restore starts over: its data is gone with the claim.
			maps.DeleteFunc(s.claimOf, func(_ uint64, uid types.UID) bool { return uid == claim.UID })
		}
		s.loseClaim(p, 0)
	}
}

// checkRestored checks that restored cluster name holds exactly the keys
// of backup.
func (s *schedule) checkRestored(name, backup string, keys map[string]string) {
	ctx, cancel := context.WithTimeout(s.g.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := s.restoring.raw().Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		s.violate("reading the cluster restored from %s: %v", backup, err)
		return
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if v, ok := got[k]; !ok || v != keys[k] {
			diff = append(diff, fmt.Sprintf("%s: %q in the backup, %q restored", k, keys[k], v))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := keys[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: not in the backup, %q restored", k, got[k]))
		}
	}
	s.logf("  %s restored %d keys of %s", name, len(got), backup)
	if len(diff) > 0 {
		s.violate("the cluster restored from %s differs from it in %d keys, first %s", backup, len(diff), diff[0])
	}
}
