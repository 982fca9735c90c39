package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/opkit-dev/opkit/examples/etcd/api/v1alpha1"
)

// PodRevision identifies what shapes c's member pods besides the version:
// the image repository, the pod template overrides and, for a TLS cluster,
// the certificates and CAs the members mount (status.tls.revision, set by
// the pass before it makes pods), and the flags of the spec. A member pod records it
// (AnnotationPodRevision) when it is made; when it changes, the members
// are restarted on their data one at a time, followers first, as for an
// upgrade.
func PodRevision(c *v1alpha1.EtcdCluster) string {
	var certs string
	if tlsEnabled(c) && c.Status.TLS != nil {
		certs = c.Status.TLS.Revision
	}
	// The spec was decoded from JSON: it encodes again. A cluster without
	// TLS or flags keeps the revision it had before they existed.
	raw, _ := json.Marshal(struct {
		Repository   string                        `json:"repository"`
		PodTemplate  v1alpha1.PodTemplateOverrides `json:"podTemplate"`
		Certificates string                        `json:"certificates,omitempty"`
		Flags        []string                      `json:"flags,omitempty"`
	}{c.Spec.Repository, c.Spec.PodTemplate, certs, specFlags(c)})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
