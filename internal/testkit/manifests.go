package testkit

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/opkit-dev/opkit/internal/repo"
)

// DecodeObjects decodes a multi-document YAML (or JSON) stream, as
// kustomize build or helm template print it, into its objects; empty
// documents are skipped. It fails t on a document it cannot decode.
func DecodeObjects(t testing.TB, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var o unstructured.Unstructured
		if err := d.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding manifests: %v", err)
		}
		if o.Object != nil {
			objs = append(objs, &o)
		}
	}
}

// KustomizeBuild renders the kustomization in dir with the repository's
// kustomize (bin/kustomize, `make kustomize`) and decodes its objects.
func KustomizeBuild(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	kustomize, err := repo.Tool("kustomize", "kustomize")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), kustomize, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return DecodeObjects(t, out)
}
