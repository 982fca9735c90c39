package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// PodRevision identifies what of c's spec shapes its member pods besides
// the version: the image repository and the pod template overrides. A
// member pod records it (AnnotationPodRevision) when it is made; when the
// spec changes, the members are restarted on their data one at a time,
// followers first, as for an upgrade.
func PodRevision(c *v1alpha1.EtcdCluster) string {
	// The spec was decoded from JSON: it encodes again.
	raw, _ := json.Marshal(struct {
		Repository  string                        `json:"repository"`
		PodTemplate v1alpha1.PodTemplateOverrides `json:"podTemplate"`
	}{c.Spec.Repository, c.Spec.PodTemplate})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
