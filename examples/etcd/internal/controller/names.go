package controller

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// Labels on every object the operator creates for a cluster.
const (
	LabelCluster = "etcd.opkit.dev/cluster"
	LabelMember  = "etcd.opkit.dev/member"
	LabelVersion = "etcd.opkit.dev/version"
	// LabelServing ("true") marks the member pods the client Service sends
	// clients to: every member of a cluster, except while a backup is being
	// restored into its seed (a client would read a partial keyspace).
	LabelServing = "etcd.opkit.dev/serving"
	// LabelVoter ("true") marks the pods of voting members, which the
	// cluster's PodDisruptionBudget selects: a learner or a member being
	// removed is not one of the pods that keep the quorum.
	LabelVoter = "etcd.opkit.dev/voter"
	// AnnotationClusterToken records the initial-cluster-token on pods.
	AnnotationClusterToken = "etcd.opkit.dev/cluster-token"
	// AnnotationPodRevision records on a member pod the revision of what
	// the user chose for it besides the version (spec.repository,
	// spec.podTemplate, see PodRevision): a pod of another revision is
	// restarted, one member at a time.
	AnnotationPodRevision = "etcd.opkit.dev/pod-revision"
	// AnnotationForceNewCluster ("true") marks the pod of the member a
	// cluster that lost its quorum is rebuilt from (spec.recovery): etcd
	// runs with --force-new-cluster until the member answers as a
	// one-member cluster, and is then restarted without it.
	AnnotationForceNewCluster = "etcd.opkit.dev/force-new-cluster"
)

// MinVersion is the oldest etcd version admitted: members are probed for
// readiness on /readyz, which etcd serves from 3.5.11 on.
const MinVersion = "3.5.11"

// reservedLabel reports whether the label key k is the operator's (its
// prefix) or the guard's: set through spec.podTemplate.labels, it would
// send clients to a member being restored or count a learner as a voter.
func reservedLabel(k string) bool {
	return strings.HasPrefix(k, "etcd.opkit.dev/") || strings.HasPrefix(k, "opkit.dev/")
}

// The ports of a member.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Endpoints maps members to URLs. The zero value uses pod DNS names on the
// cluster's headless Service, which resolve inside the cluster.
type Endpoints struct {
	// ClientURL overrides the client URL of a member, for example to reach
	// it through a port-forward when the operator runs outside the cluster.
	ClientURL func(c *v1alpha1.EtcdCluster, member string) string
}

func memberHost(c *v1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s.%s.%s.svc", member, c.Name, c.Namespace)
}

// scheme is the URL scheme of c's members: https with spec.tls.
func scheme(c *v1alpha1.EtcdCluster) string {
	if tlsEnabled(c) {
		return "https"
	}
	return "http"
}

// PeerURL returns the peer URL of member; it is what etcd knows the member by.
func PeerURL(c *v1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s://%s:%d", scheme(c), memberHost(c, member), PeerPort)
}

// InClusterClientURL returns the in-cluster client URL of member.
func InClusterClientURL(c *v1alpha1.EtcdCluster, member string) string {
	return fmt.Sprintf("%s://%s:%d", scheme(c), memberHost(c, member), ClientPort)
}

// clientURL returns the URL the operator dials for member.
func (e Endpoints) clientURL(c *v1alpha1.EtcdCluster, member string) string {
	if e.ClientURL != nil {
		return e.ClientURL(c, member)
	}
	return InClusterClientURL(c, member)
}

// MemberName returns the pod name encoded in a peer URL made by PeerURL, or
// "" for a URL of another form.
func MemberName(peerURL string) string {
	u, err := url.Parse(peerURL)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	name, _, ok := strings.Cut(host, ".")
	if !ok {
		return ""
	}
	return name
}

func dataClaimName(member string) string { return member + "-data" }
