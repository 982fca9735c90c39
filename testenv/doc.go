// Package testenv runs an operator's tests against a real API server
// (controller-runtime's envtest): a control plane with the module's CRDs,
// a namespace per test, a manager per test (serving the webhooks of
// WithWebhooks), waits on conditions, updates that retry on a conflict
// with the operator's own writes (Update), the
// status a built-in controller would write where envtest runs none, the
// real kube-controller-manager where deletion matters
// (Env.StartControllerManager), and
// clients that count their requests (Env.CountingClient) for tests of how
// many writes a pass makes.
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		testenv.Main(m, &env, testenv.WithCRDs("../../config/crd/bases"), testenv.WithScheme(v1alpha1.AddToScheme))
//	}
//
// The binaries come from $KUBEBUILDER_ASSETS, as for envtest itself
// (setup-envtest prints the directory).
package testenv
