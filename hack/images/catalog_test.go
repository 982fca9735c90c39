package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCatalogNames(t *testing.T) {
	tests := []struct {
		tag       string
		wantFiles []string
	}{
		{tag: DefaultTag, wantFiles: []string{"memcached-operator.tar", "etcd-operator.tar", "toolbox.tar", "pause.tar",
			"memcached.tar", "versitygw.tar", "cert-manager.tar", "etcd-v3.6.16.tar", "etcd-v3.5.35.tar"}},
		{tag: "v2", wantFiles: []string{"memcached-operator-v2.tar", "etcd-operator-v2.tar", "toolbox-v2.tar", "pause.tar",
			"memcached.tar", "versitygw.tar", "cert-manager.tar", "etcd-v3.6.16.tar", "etcd-v3.5.35.tar"}},
	}
	for _, tt := range tests {
		t.Run(tt.tag, func(t *testing.T) {
			var files []string
			for _, s := range Catalog(tt.tag) {
				files = append(files, s.File)
			}
			if diff := cmp.Diff(tt.wantFiles, files); diff != "" {
				t.Errorf("tarballs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCatalogRefs checks that every image is named as containerd's CRI
// looks it up and as the pods that use it name it.
func TestCatalogRefs(t *testing.T) {
	want := map[string]string{
		"memcached-operator": "opkit.dev/memcached-operator:v2",
		"etcd-operator":      "opkit.dev/etcd-operator:v2",
		"toolbox":            "opkit.dev/toolbox:v2",
		"pause":              "registry.k8s.io/pause:3.10",
		// The memcached operator's default spec.image, memcached:1.6.
		"memcached": "docker.io/library/memcached:1.6",
		// The etcd operator's sample S3 store.
		"versitygw": "opkit.dev/versitygw:v1.8.0",
		// e2e/incluster's cert-manager variant.
		"cert-manager": "opkit.dev/cert-manager:v1.21.2",
		// The etcd operator's <spec.repository>:v<version>.
		"etcd-v3.6.16": "gcr.io/etcd-development/etcd:v3.6.16",
		"etcd-v3.5.35": "gcr.io/etcd-development/etcd:v3.5.35",
	}
	got := map[string]string{}
	for _, s := range Catalog("v2") {
		got[s.Name] = s.Ref
		if n, err := Normalize(s.Ref); err != nil || n != s.Ref {
			t.Errorf("%s: Ref %q is not normalized: Normalize = %q, %v", s.Name, s.Ref, n, err)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image names (-want +got):\n%s", diff)
	}
}

// TestEtcdVersionsMatchInstallTool keeps the catalog's etcd images in step
// with the versions hack/install-tool.sh builds statically.
func TestEtcdVersionsMatchInstallTool(t *testing.T) {
	script, err := os.ReadFile("../install-tool.sh")
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, v := range []string{"ETCD_VERSION", "ETCD35_VERSION"} {
		m := regexp.MustCompile(`(?m)^` + v + `=(\S+)$`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("hack/install-tool.sh sets no %s", v)
		}
		pinned = append(pinned, string(m[1]))
	}
	if diff := cmp.Diff(pinned, EtcdVersions); diff != "" {
		t.Errorf("EtcdVersions differ from hack/install-tool.sh (-install-tool +catalog):\n%s", diff)
	}
}

func TestSelectSpecs(t *testing.T) {
	specs := Catalog(DefaultTag)
	tests := []struct {
		only, wantErr string
		want          []string
	}{
		{only: "", want: names(specs)},
		{only: "pause,memcached-operator", want: []string{"memcached-operator", "pause"}},
		{only: " etcd-v3.5.35 ", want: []string{"etcd-v3.5.35"}},
		{only: "pause,nginx", wantErr: `no image "nginx"; the images are memcached-operator, `},
	}
	for _, tt := range tests {
		t.Run(tt.only, func(t *testing.T) {
			got, err := selectSpecs(specs, tt.only)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("selectSpecs(%q) error = %v, want one containing %q", tt.only, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("selected (-want +got):\n%s", diff)
			}
		})
	}
	if n := names(specs); len(slices.Compact(slices.Sorted(slices.Values(n)))) != len(n) {
		t.Errorf("catalog names are not unique: %v", n)
	}
}

func TestParseLdd(t *testing.T) {
	tests := []struct {
		name, out, wantErr string
		want               []string
	}{{
		name: "glibc",
		out: "\tlinux-vdso.so.1 (0x00007ffd1b5f2000)\n" +
			"\tlibevent-2.1.so.7 => /lib/x86_64-linux-gnu/libevent-2.1.so.7 (0x00007f0e6b2c1000)\n" +
			"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e6b0e0000)\n" +
			"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e6b3a0000)\n",
		want: []string{"/lib/x86_64-linux-gnu/libevent-2.1.so.7", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
	}, {
		name: "static",
		out:  "\tnot a dynamic executable\n",
	}, {
		name:    "missing library",
		out:     "\tlibsasl2.so.2 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n",
		wantErr: "libsasl2.so.2 not found",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLdd(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseLdd error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("libraries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVersityGWVersionMatchesInstallTool keeps the S3 store image's tag in
// step with the versitygw hack/install-tool.sh builds.
func TestVersityGWVersionMatchesInstallTool(t *testing.T) {
	script, err := os.ReadFile("../install-tool.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSITYGW_VERSION=(\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("hack/install-tool.sh sets no VERSITYGW_VERSION")
	}
	if got := string(m[1]); got != VersityGWVersion {
		t.Errorf("hack/install-tool.sh builds versitygw %s, the image is tagged %s: change VersityGWVersion (and the etcd operator's config/samples)", got, VersityGWVersion)
	}
}

// TestCertManagerVersionMatchesModule keeps the cert-manager image's tag in
// step with the version hack/tools/certmanager builds.
func TestCertManagerVersionMatchesModule(t *testing.T) {
	mod, err := os.ReadFile("../tools/certmanager/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github.com/cert-manager/cert-manager (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("hack/tools/certmanager/go.mod requires no github.com/cert-manager/cert-manager")
	}
	if got := string(m[1]); got != CertManagerVersion {
		t.Errorf("hack/tools/certmanager builds cert-manager %s, the image is tagged %s: change CertManagerVersion", got, CertManagerVersion)
	}
	manifests, err := os.ReadFile("../certmanager/cert-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := "image: opkit.dev/cert-manager:" + CertManagerVersion + "\n"; !strings.Contains(string(manifests), want) {
		t.Errorf("hack/certmanager/cert-manager.yaml does not run %q", want)
	}
}
