package main

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/repo"
)

// The tutorial reads and writes a version of the Memcached CRD that the API
// server serves without the opkit operator's conversion webhook, with the
// spec fields it sets. Until this test, v1alpha1 stopped being served and
// the tutorial's cache never synced.
func TestServedVersion(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "examples", "memcached", "config", "crd", "bases", "cache.opkit.dev_memcacheds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != groupVersion.Group {
		t.Fatalf("the CRD's group is %q, the tutorial's %q", crd.Spec.Group, groupVersion.Group)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != groupVersion.Version {
			continue
		}
		if !v.Served {
			t.Fatalf("the tutorial's version %s is not served by the CRD", v.Name)
		}
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		for _, field := range []string{"replicas", "image"} {
			if _, ok := spec.Properties[field]; !ok {
				t.Errorf("%s has no spec.%s, which the tutorial sets", v.Name, field)
			}
		}
		return
	}
	t.Fatalf("the CRD has no version %s", groupVersion.Version)
}
