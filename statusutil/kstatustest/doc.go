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
// import it, never a consumer of the library. Each opkit release tags it
// with the release's version (statusutil/kstatustest/vX.Y.Z) and pins its
// go.mod to that opkit, so take the same version as opkit:
//
//	go get github.com/opkit-dev/opkit/statusutil/kstatustest@vX.Y.Z
//
// Between releases its go.mod requires no published opkit: to use a commit
// of main, also add replace github.com/opkit-dev/opkit =>
// github.com/opkit-dev/opkit <the same commit> to your go.mod.
package kstatustest
