package guardtest_test

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/guard"
	"github.com/opkit-dev/opkit/guard/guardtest"
)

// A deletion test installs the policy before it deletes a namespace.
func ExampleInstall() {
	var t *testing.T    // the test's
	var c client.Client // on the test's API server
	policy, binding := guard.Policy("my-operator-guard")
	guardtest.Install(t, c, policy, binding)
}
