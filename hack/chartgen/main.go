// Command chartgen writes an example operator's Helm chart templates
// (dist/chart/templates) from its config/ and the shared templates of
// hack/chart/templates. `make -C examples/<operator> chart` runs it:
//
//	cd hack && go run ./chartgen -example ../examples/memcached
//
// It writes, besides the shared templates:
//   - crd/<file>: each CRD of config/crd/bases behind crd.enable, with
//     helm.sh/resource-policy: keep behind crd.keep;
//   - rbac/_manager_rules.tpl: the rules of config/rbac/role.yaml;
//   - _crds.tpl: the CRDs' names, for NOTES.txt;
//   - guard/policy.yaml: config/guard's admission policy and binding, if
//     any, named after the release.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opkit-dev/opkit/internal/repo"
)

func main() {
	example := flag.String("example", "", "the example's directory (holding config/ and dist/chart/)")
	shared := flag.String("templates", "", "the shared templates (default: hack/chart/templates of this checkout)")
	flag.Parse()
	if *example == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: chartgen -example DIR [-templates DIR]")
		os.Exit(2)
	}
	if *shared == "" {
		root, err := repo.Root()
		if err != nil {
			fmt.Fprintln(os.Stderr, "chartgen:", err)
			os.Exit(1)
		}
		*shared = filepath.Join(root, "hack", "chart", "templates")
	}
	out := filepath.Join(*example, "dist", "chart", "templates")
	if err := Generate(*example, *shared, out); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", out)
}
