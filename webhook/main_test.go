package webhook_test

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opkit-dev/opkit/internal/testenv"
	publictestenv "github.com/opkit-dev/opkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, publictestenv.WithWebhooks(filepath.Join("..", "internal", "testapi", "webhook")),
		// The configurations call https://localhost:<port>, the name the
		// certificate of TestServeWithCertificates is made for.
		func(e *envtest.Environment, _ *runtime.Scheme) error {
			e.WebhookInstallOptions.LocalServingHostExternalName = "localhost"
			return nil
		})
}
