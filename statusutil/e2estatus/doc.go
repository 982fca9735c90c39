// Package e2estatus has sigs.k8s.io/e2e-framework wait conditions for
// objects that use package statusutil, for end-to-end tests. It is a module
// of its own (github.com/opkit-dev/opkit/statusutil/e2estatus), so that
// e2e-framework and its dependencies reach only the test modules that
// import it, never a consumer of the library.
//
// The wait conditions poll an object through e2e-framework's
// resources.Resources until a condition has the wanted status for the
// object's current generation:
//
//	err := wait.For(e2estatus.HasCondition(cfg.Client().Resources(), widget, "Ready", metav1.ConditionTrue),
//		wait.WithTimeout(time.Minute), wait.WithInterval(time.Second))
//
// Footgun: resources.New builds its client from client-go's global scheme,
// which does not know custom resources. Register your API types with
// r.GetScheme() (for example myv1.AddToScheme(r.GetScheme())) before
// waiting; HasCondition returns an error at once, rather than timing out,
// when the type is not registered.
package e2estatus
