// Package guardtest installs the guard's admission policy in a test's API
// server and waits until admission enforces it:
//
//	policy, binding := guard.Policy("my-operator-guard")
//	guardtest.Install(t, c, policy, binding)
//
// Footgun: a ValidatingAdmissionPolicy is enforced a moment after it is
// created; a namespace deletion in between deletes held children. Install
// returns only once it refuses such a delete.
package guardtest
