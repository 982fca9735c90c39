package kstatustest_test

import (
	"testing"

	"github.com/opkit-dev/opkit/internal/testenv"
)

// env is the envtest control plane shared by this package's tests.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
