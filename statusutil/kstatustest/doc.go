// Package kstatustest asserts what kstatus, the library behind Flux's and
// kpt's health checks and kubectl-style waits, computes for an object:
// github.com/fluxcd/cli-utils's pkg/kstatus/status (Flux's maintained fork
// of sigs.k8s.io/cli-utils) run on the object itself, not opkit's own
// reading of the kstatus rules.
//
//	kstatustest.AssertStatus(t, memcached, status.CurrentStatus)
//
// It is a module of its own (github.com/opkit-dev/opkit/statusutil/kstatustest),
// so that cli-utils and its dependencies reach only the test modules that
// import it, never a consumer of the library.
package kstatustest
