// Package pki makes and checks the certificates of an etcd cluster that
// speaks TLS: a certificate authority, the certificates it issues to
// members and clients, and the checks a certificate brought by the user
// (a cert-manager Secret) must pass before members use it.
//
// It is built on crypto/x509 and crypto/ecdsa from the standard library:
// keys are ECDSA P-256, certificates are PEM-encoded as Kubernetes Secrets
// of type kubernetes.io/tls hold them (tls.crt, tls.key, ca.crt).
//
// Typical use, as the operator's automatic TLS does:
//
//	ca, err := pki.NewCA("demo-ca", pki.DefaultCAValidity, now)
//	pair, err := ca.Issue(pki.Request{
//		CommonName: "demo-server",
//		DNSNames:   []string{"*.demo.default.svc"},
//		Usages:     pki.ServerAndClient,
//		Validity:   pki.DefaultValidity,
//	}, now)
//	if pki.DueForRenewal(pair.Cert, now) { ... issue again ... }
//
// Renewal keeps a CA's key: ca.Renew returns a certificate with the same
// subject and key and a new validity, so certificates issued before and
// after verify against either CA certificate. Members restarted one at a
// time with the renewed CA keep trusting the members not yet restarted, and
// the other way round. A CA with a new key has no such overlap; this
// package never makes one for an existing cluster.
package pki
