package restmap_test

import (
	"testing"

	"github.com/opkit-dev/opkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
