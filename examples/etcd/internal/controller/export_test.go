package controller

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// RetentionRetry is retentionRetry, for the tests of package controller_test.
const RetentionRetry = retentionRetry

// MemberPod is memberPod of a member that joins an existing cluster.
func MemberPod(c *v1alpha1.EtcdCluster, member string) *corev1.Pod {
	return memberPod(c, member, c.Spec.Version, "", "existing", nil)
}

// TrustEachOther is trustEachOther: whether members running copy old and
// members given next talk to each other.
var TrustEachOther = trustEachOther

// PodQuota is podQuota: the quota a member pod's etcd runs with.
var PodQuota = podQuota

// NoQuota is noQuota: the quota of a member that runs with none.
const NoQuota = noQuota
