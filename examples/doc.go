// Package examples holds the tests of what the example operators share:
// their deployment configuration (config/, hack/operator.mk) and installers
// (dist/install.yaml). Each operator is a command of its own below.
package examples
