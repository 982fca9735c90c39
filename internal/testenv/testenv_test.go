package testenv_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	testv1 "github.com/opkit-dev/opkit/internal/testapi/v1"
	"github.com/opkit-dev/opkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestWidgetCRDInstalled(t *testing.T) {
	w := &testv1.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "default"},
		Spec:       testv1.WidgetSpec{Replicas: 2},
	}
	if err := env.Client.Create(t.Context(), w); err != nil {
		t.Fatalf("creating a Widget: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), w) })

	// Validation from the CRD's OpenAPI schema is enforced.
	bad := &testv1.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec:       testv1.WidgetSpec{Replicas: 101},
	}
	err := env.Client.Create(t.Context(), bad)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.replicas") {
		t.Fatalf("creating a Widget with replicas 101: got %v, want an Invalid error naming spec.replicas", err)
	}
}

func TestAssetsDirNamesMakeTarget(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := testenv.AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "make envtest-assets") {
		t.Fatalf("AssetsDir with an empty directory: got %v, want an error naming `make envtest-assets`", err)
	}
}
