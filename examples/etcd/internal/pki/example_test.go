package pki_test

import (
	"fmt"
	"time"

	"github.com/opkit-dev/opkit/examples/etcd/internal/pki"
)

// A CA issues a member's server certificate, which Verify then accepts for
// every member of the cluster through its wildcard name.
func Example() {
	now := time.Now()
	ca, err := pki.NewCA("demo-ca", pki.DefaultCAValidity, now)
	if err != nil {
		panic(err)
	}
	server, err := ca.Issue(pki.Request{
		CommonName: "demo-server",
		DNSNames:   []string{"*.demo.default.svc"},
		Usages:     pki.ServerAndClient,
		Validity:   pki.DefaultValidity,
	}, now)
	if err != nil {
		panic(err)
	}
	_, err = pki.Verify(server.CertPEM, server.KeyPEM, server.CAPEM,
		pki.Expect{Usages: pki.ServerAndClient, DNSNames: []string{"demo-2.demo.default.svc"}}, now)
	fmt.Println("valid:", err == nil, "renew now:", pki.DueForRenewal(server.Cert, now))
	// Output: valid: true renew now: false
}
