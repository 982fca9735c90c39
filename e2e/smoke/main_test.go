// Package smoke proves that the e2e harness gives suites a working cluster:
// nodes become Ready, and a Deployment's pods are scheduled and run.
package smoke

import (
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"

	"github.com/opkit-dev/opkit/e2e/harness"
)

var testEnv env.Environment

func TestMain(m *testing.M) { harness.Main(m, &testEnv) }
