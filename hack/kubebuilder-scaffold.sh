#!/usr/bin/env bash
# Writes docs/testdata/kubebuilder anew: kubebuilder's own scaffold of its
# memcached tutorial (the deploy-image plugin) with a validating webhook,
# which docs/kubebuilder.md
# ports to opkit and docs/kubebuilder_test.go checks. Run by
# `make kubebuilder-scaffold`; the project's bin/kubebuilder is used.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kb=${KUBEBUILDER:-$root/bin/kubebuilder}
out=$root/docs/testdata/kubebuilder
tmp=$(mktemp -d)/memcached-operator && mkdir "$tmp"
trap 'rm -rf "$(dirname "$tmp")"' EXIT
cd "$tmp"
"$kb" init --domain example.com --repo example.com/memcached-operator
"$kb" create api --group cache --version v1alpha1 --kind Memcached \
	--image=memcached:1.6.26-alpine3.19 \
	--image-container-command=memcached,--memory-limit=64,-m,64,-o,modern,-v \
	--image-container-port=11211 --run-as-user=1001 \
	--plugins=deploy-image/v1-alpha --make=false
"$kb" create webhook --group cache --version v1alpha1 --kind Memcached \
	--programmatic-validation --make=false
# The scaffold's own tool binaries (make manifests) are not sources.
rm -rf bin
# As the scaffold's `make fmt` would: this tree's make verify wants it.
gofmt -s -w .
rm -rf "$out"
cp -r "$tmp" "$out"
