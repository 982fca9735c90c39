// Package testkit is the one home of the small test helpers shared across
// the module's packages: failing a test on an error ([Must]) and picking a
// free loopback port ([FreePort], [MustFreePort]), running a manager for
// the length of a test ([Run]), asking a server's readiness endpoint
// ([HTTPOK]), reading rendered manifests ([DecodeObjects],
// [KustomizeBuild]), and the environment of a go command a test runs, built
// as the test binary was ([GoEnv]).
//
// A helper that more than one package needs belongs here rather than in a
// copy in each package's _test.go files. Helpers that only make sense for
// one subsystem (an envtest control plane, etcd member processes) live in
// that subsystem's own test package, such as internal/testenv.
//
// The package imports "testing" only for [testing.TB]; it registers no flags
// and starts nothing by itself, so [FreePort] may also be used by the module's
// development commands (hack/scale, benchmark programs).
package testkit
