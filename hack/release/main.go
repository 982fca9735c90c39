// Command release prepares a release of opkit: `make release VERSION=v0.N.M`
// runs it after pushing (or, in a dry run, only building) the operator
// images for VERSION, whose digests it reads:
//
//	cd hack && go run ./release -version v0.1.0 -digests FILE -out DIR [-dry-run=false]
//
// Into DIR it writes, per operator, install-VERSION.yaml and the chart
// package OPERATOR-VERSION.tgz, both pinned to the image's digest; the
// CHANGELOG section of the version (CHANGELOG.md); and RELEASE.txt, the
// plan: what it wrote, what it changes in the tree, and the git tags to
// push. Without -dry-run it also makes those changes in the tree: the
// CHANGELOG's Unreleased section becomes the version's, and each library
// sub-module requires the root module at VERSION.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/repo"
)

func main() {
	var r Release
	flag.StringVar(&r.Version, "version", "", "the version, vMAJOR.MINOR.PATCH")
	digests := flag.String("digests", "", "the pushed operator images by digest (hack/images -digests)")
	flag.StringVar(&r.Out, "out", "", "the directory the release's files are written to")
	flag.BoolVar(&r.DryRun, "dry-run", true, "write the release's files only; change nothing in the tree")
	check := flag.Bool("check", false, "only check that -version can be released (before building anything)")
	flag.Parse()
	if flag.NArg() > 0 || r.Version == "" || !*check && (*digests == "" || r.Out == "") {
		fmt.Fprintln(os.Stderr, "usage: release -version vX.Y.Z (-check | -digests FILE -out DIR [-dry-run=false])")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := func() error {
		var err error
		if r.Root, err = repo.Root(); err != nil {
			return err
		}
		r.Date = time.Now().UTC()
		if *check {
			return r.Check()
		}
		b, err := os.ReadFile(*digests)
		if err != nil {
			return err
		}
		if r.Images, err = ParseDigests(b); err != nil {
			return fmt.Errorf("%s: %w", *digests, err)
		}

		plan, err := r.Run(ctx)
		if err != nil {
			return err
		}
		fmt.Print(plan)
		return nil
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
