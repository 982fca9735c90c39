package controller_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
	"github.com/opkit-dev/opkit/examples/etcd/internal/controller"
)

// TestSpecFlags: quota, compaction and extra flags reach etcd's arguments
// and the pod revision (so a change restarts the members); a cluster
// without them keeps the revision it had before they existed.
func TestSpecFlags(t *testing.T) {
	c := cluster("f", 3)
	c.Status.ClusterToken = "t"
	before := controller.PodRevision(c)
	if before != "2332d506910b3a72" {
		t.Errorf("revision of a cluster without flags = %s, changed from 2332d506910b3a72: every member of every cluster would restart", before)
	}
	c.Spec.QuotaBackendBytes = ptr.To(resource.MustParse("16Mi"))
	c.Spec.AutoCompaction = &v1alpha1.AutoCompactionSpec{Retention: "1000"}
	c.Spec.ExtraArgs = map[string]string{"snapshot-count": "5000", "max-txn-ops": "256"}
	args := controller.MemberPod(c, "f-0").Spec.Containers[0].Args
	var got []string
	for _, a := range args {
		for _, f := range []string{"--quota", "--auto-compaction", "--snapshot-count", "--max-txn-ops"} {
			if strings.HasPrefix(a, f) {
				got = append(got, a)
			}
		}
	}
	want := []string{"--quota-backend-bytes=16777216", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1000",
		"--max-txn-ops=256", "--snapshot-count=5000"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if controller.PodRevision(c) == before {
		t.Error("the pod revision ignores the flags: a change would not reach the members")
	}
}

// TestValidateExtraArgs: objects stored before the schema refused owned
// flags are refused by the hooks, with the field and the fix.
func TestValidateExtraArgs(t *testing.T) {
	tests := []struct {
		args map[string]string
		want []string
	}{
		{map[string]string{"snapshot-count": "1"}, nil},
		{map[string]string{"data-dir": "/x", "quota-backend-bytes": "1", "--name": "a", "Bad_Name": "1"},
			[]string{
				`spec.extraArgs[--name]: Forbidden: the operator sets --name itself; remove it (quota and compaction have fields of their own: spec.quotaBackendBytes, spec.autoCompaction)`,
				`spec.extraArgs[Bad_Name]: Invalid value: "Bad_Name": a flag name without "--": lower-case letters, digits and "-"`,
				`spec.extraArgs[data-dir]: Forbidden: the operator sets --data-dir itself; remove it (quota and compaction have fields of their own: spec.quotaBackendBytes, spec.autoCompaction)`,
				`spec.extraArgs[quota-backend-bytes]: Forbidden: the operator sets --quota-backend-bytes itself; remove it (quota and compaction have fields of their own: spec.quotaBackendBytes, spec.autoCompaction)`,
			}},
	}
	for _, tt := range tests {
		c := cluster("v", 3)
		c.Spec.ExtraArgs = tt.args
		var got []string
		for _, e := range (&controller.ClusterHooks{}).Validate(t.Context(), c) {
			got = append(got, e.Error())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Validate(%v) (-want +got):\n%s", tt.args, diff)
		}
	}
}
