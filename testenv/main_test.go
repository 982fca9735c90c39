package testenv_test

import (
	"path/filepath"
	"runtime"
	"testing"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	crds := filepath.Join(filepath.Dir(file), "..", "internal", "testapi", "crd")
	testenv.Main(m, &env, testenv.WithCRDs(crds), testenv.WithScheme(testv1.AddToScheme))
}
