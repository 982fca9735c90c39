package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMismatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  []selection
		want []mismatch
		// newest is each mismatch's version to require (versions()[0]).
		newest []string
	}{
		{
			name: "the same versions",
			sel: []selection{
				{module: "e2e", versions: map[string]string{"golang.org/x/sys": "v0.49.0", "k8s.io/api": "v0.37.1"}},
				{module: "hack", versions: map[string]string{"golang.org/x/sys": "v0.49.0"}},
			},
		},
		{
			name: "a dependency only one module compiles",
			sel: []selection{
				{module: "e2e", versions: map[string]string{"github.com/anishathalye/porcupine": "v1.0.3"}},
				{module: "hack", versions: map[string]string{"github.com/google/go-containerregistry": "v0.20.6"}},
			},
		},
		{
			name: "two versions: the newest is the one to require",
			sel: []selection{
				{module: "e2e", versions: map[string]string{"golang.org/x/sys": "v0.49.0", "k8s.io/api": "v0.37.1"}},
				{module: "examples/etcd", versions: map[string]string{"golang.org/x/sys": "v0.49.0"}},
				{module: "hack", versions: map[string]string{"golang.org/x/sys": "v0.9.0", "k8s.io/api": "v0.37.1"}},
			},
			want: []mismatch{{path: "golang.org/x/sys", by: map[string][]string{
				"v0.49.0": {"e2e", "examples/etcd"}, "v0.9.0": {"hack"},
			}}},
			newest: []string{"v0.49.0"},
		},
		{
			name: "sorted by path",
			sel: []selection{
				{module: "a", versions: map[string]string{"z.io/m": "v1.1.0", "b.io/m": "v1.0.0-rc.1"}},
				{module: "b", versions: map[string]string{"z.io/m": "v1.0.0", "b.io/m": "v1.0.0"}},
			},
			want: []mismatch{
				{path: "b.io/m", by: map[string][]string{"v1.0.0-rc.1": {"a"}, "v1.0.0": {"b"}}},
				{path: "z.io/m", by: map[string][]string{"v1.1.0": {"a"}, "v1.0.0": {"b"}}},
			},
			newest: []string{"v1.0.0", "v1.1.0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mismatches(tc.sel)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(mismatch{})); diff != "" {
				t.Errorf("mismatches (-want +got):\n%s", diff)
			}
			var newest []string
			for _, m := range got {
				newest = append(newest, m.versions()[0])
			}
			if diff := cmp.Diff(tc.newest, newest); diff != "" {
				t.Errorf("newest versions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMismatchMessage(t *testing.T) {
	m := mismatch{path: "golang.org/x/sys", by: map[string][]string{
		"v0.49.0": {"e2e", "examples/etcd"}, "v0.9.0": {"hack"},
	}}
	got := m.String()
	for _, want := range []string{"golang.org/x/sys", "v0.49.0 in e2e, examples/etcd", "v0.9.0 in hack", "go get golang.org/x/sys@v0.49.0"} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q does not say %q", got, want)
		}
	}
}

func TestParseList(t *testing.T) {
	// go list -deps -test -json=Module: std packages have no module, the
	// main module and modules replaced by a directory are built from
	// their files (their version means nothing to the build cache), a
	// module replaced by another version is built at that version.
	out := `{}
{"Module": {"Path": "github.com/opkit-dev/opkit/e2e", "Main": true}}
{"Module": {"Path": "github.com/opkit-dev/opkit", "Version": "v0.0.0", "Replace": {"Path": ".."}}}
{"Module": {"Path": "golang.org/x/sys", "Version": "v0.49.0"}}
{"Module": {"Path": "golang.org/x/sys", "Version": "v0.49.0"}}
{"Module": {"Path": "k8s.io/api", "Version": "v0.36.0", "Replace": {"Path": "k8s.io/api", "Version": "v0.37.1"}}}
`
	got, err := parseList(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"golang.org/x/sys": "v0.49.0", "k8s.io/api": "v0.37.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseList (-want +got):\n%s", diff)
	}
	for name, bad := range map[string]string{
		"two versions of one module": `{"Module": {"Path": "golang.org/x/sys", "Version": "v0.49.0"}}
{"Module": {"Path": "golang.org/x/sys", "Version": "v0.48.0"}}`,
		"not JSON": `golang.org/x/sys v0.49.0`,
	} {
		if _, err := parseList(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
