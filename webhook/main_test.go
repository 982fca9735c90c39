package webhook_test

import (
	"path/filepath"
	"testing"

	"github.com/opkit-dev/opkit/internal/testenv"
	publictestenv "github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, publictestenv.WithWebhooks(filepath.Join("..", "internal", "testapi", "webhook")))
}
