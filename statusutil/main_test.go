package statusutil_test

import (
	"flag"
	"os"
	"testing"

	"github.com/opkit-dev/opkit/internal/testenv"
)

// env is the envtest control plane shared by this package's tests.
var env *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	// Fuzz workers re-run this binary only to execute fuzz targets, which are
	// pure logic; starting a control plane per worker would just eat the CPU.
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	testenv.Main(m, &env)
}
