#!/usr/bin/env bash
# install-tool.sh builds one pinned tool from source through the Go module
# proxy, caches it per version outside the clone, and links it into bin/.
#
#   hack/install-tool.sh NAME     NAME is one of the tools listed in usage().
#
# The cache lives in $OPKIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/opkit),
# one directory per tool and version. A directory is used only once its
# .complete stamp exists, so an interrupted build is redone on the next call.
# Concurrent calls for the same tool wait for each other (flock).
set -euo pipefail
# Each tool builds in its own module (hack/tools/*): a developer's go.work at
# the root must not pull it into a workspace.
export GOWORK=off

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${OPKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opkit}
bindir=${BIN_DIR:-$root/bin}

# Pinned versions. Bump here (and in hack/tools/*/go.mod) only.
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
# etcd 3.5 for the etcd images of make images (etcd-static), from hack/tools/etcd35.
ETCD35_VERSION=v3.5.35
KWOK_VERSION=v0.7.0
CONTROLLER_GEN_VERSION=v0.23.0
KUSTOMIZE_VERSION=v5.8.1
GOLANGCI_LINT_VERSION=v2.15.0
VERSITYGW_VERSION=v1.8.0
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da
# kubebuilder generates docs/testdata/kubebuilder (make kubebuilder-scaffold).
KUBEBUILDER_VERSION=v4.16.0
# containerd for real nodes: v2.2 is the oldest minor in Kubernetes 1.36's tested
# matrix. Built statically (no cgo: no btrfs snapshotter; overlayfs is used).
CONTAINERD_VERSION=v2.2.9
# CoreDNS for real nodes' cluster DNS, built from hack/tools/coredns (its
# go.mod pins this version) with only the plugins that module's main.go lists.
COREDNS_VERSION=v1.14.7
# The CNCF distribution registry the real nodes pull every image from.
DISTRIBUTION_VERSION=v3.1.2

usage() {
	cat >&2 <<USAGE
usage: $0 NAME
NAME: kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)
      kubelet (kubelet, kube-proxy) | containerd (containerd, containerd-shim-runc-v2, ctr)
      etcd (etcd, etcdutl) | kwok (kwok, kwokctl) | controller-gen | kustomize | golangci-lint | versitygw | benchstat | kubebuilder
      coredns | registry
      etcd-static (etcd, etcdctl, etcdutl of ETCD_VERSION and ETCD35_VERSION, static, in bin/etcd-static-VERSION/)
USAGE
	exit 2
}

# build NAME VERSION BINARIES... -- runs build_NAME into a fresh cache dir
# unless a complete one exists, then links BINARIES into bin/.
install() {
	local name=$1 version=$2
	shift 2
	local dest="$cache/$name-$version"
	mkdir -p "$cache" "$bindir"
	exec 9>"$cache/.$name-$version.lock"
	flock 9
	if [[ ! -f "$dest/.complete" ]]; then
		rm -rf "$dest"
		mkdir -p "$dest"
		echo ">> building $name $version into $dest (this can take minutes on 2 cores)" >&2
		local start=$SECONDS
		# Build output (module downloads, compiler) goes to a log shown on failure.
		if ! "build_${name//-/_}" "$dest" "$version" >"$dest.log" 2>&1; then
			cat "$dest.log" >&2
			echo "install-tool: building $name $version failed (log: $dest.log)" >&2
			exit 1
		fi
		touch "$dest/.complete"
		echo ">> built $name $version in $((SECONDS - start))s" >&2
	fi
	local b
	for b in "$@"; do
		if [[ ! -x "$dest/$b" ]]; then
			echo "install-tool: $name $version did not produce $b" >&2
			exit 1
		fi
		ln -sfn "$dest/$b" "$bindir/$b"
	done
	exec 9>&-
}

# k8s_build DEST VERSION CMD... builds commands of the pinned
# k8s.io/kubernetes module (hack/tools/k8s) into DEST, stamped with VERSION
# as kubectl version and the API server's /version report it.
k8s_build() {
	local dest=$1 version=$2 minor cmd pkgs=()
	shift 2
	minor=${version#v1.}
	minor=${minor%%.*}
	for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
	(cd "$root/hack/tools/k8s" && go build -trimpath -o "$dest/" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		"${pkgs[@]}")
}

build_kubernetes() { k8s_build "$1" "$2" kube-apiserver kube-controller-manager kube-scheduler kubectl; }

# kubelet and kube-proxy, for real nodes, come from the same pinned module as
# the control plane but in a cache directory of their own, so that the
# control-plane binaries built before them are kept.
build_kubelet() { k8s_build "$1" "$2" kubelet kube-proxy; }

# containerd carries its own go.mod with no replace directives, so go install
# pins it by version alone. CGO_ENABLED=0 leaves out the btrfs snapshotter;
# the local node uses overlayfs.
build_containerd() {
	local dest=$1 version=$2 pkg=github.com/containerd/containerd/v2/cmd
	CGO_ENABLED=0 GOBIN="$dest" GOFLAGS=-trimpath go install -tags "no_btrfs no_zfs no_devmapper" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" \
		"$pkg/containerd@$version" "$pkg/containerd-shim-runc-v2@$version" "$pkg/ctr@$version"
}

# etcd and etcdutl are built exactly as etcd-static builds ETCD_VERSION for
# the images (CGO_ENABLED=0, the same flags), so that on a fresh machine one
# compile of etcd's packages in the Go build cache serves both and the
# second is only linked.
build_etcd() {
	local dest=$1
	(cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/etcd" go.etcd.io/etcd/server/v3)
}

# etcdutl (offline snapshot restore) comes from the same pinned module as
# etcd, in a cache directory of its own so that an etcd built before it
# is kept.
build_etcdutl() {
	local dest=$1
	(cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/etcdutl" go.etcd.io/etcd/etcdutl/v3)
}

# etcd-static: etcd, etcdctl and etcdutl built with CGO_ENABLED=0 for the etcd
# images of make images (a scratch image has no C library), from the module
# pinning that version: hack/tools/etcd (ETCD_VERSION) or hack/tools/etcd35
# (ETCD35_VERSION). Linked into bin/etcd-static-VERSION/, so that bin/etcd and
# bin/etcdutl (envtest, local cluster) stay what the etcd tool builds.
build_etcd_static() {
	local dest=$1 version=$2 mod b
	case $version in
	"$ETCD_VERSION") mod=$root/hack/tools/etcd ;;
	"$ETCD35_VERSION") mod=$root/hack/tools/etcd35 ;;
	*) echo "etcd-static: no module of hack/tools pins etcd $version" >&2 && return 1 ;;
	esac
	if ! grep -q "go.etcd.io/etcd/server/v3 $version\$" "$mod/go.mod"; then
		echo "etcd-static: $mod/go.mod does not pin go.etcd.io/etcd/server/v3 $version" >&2
		return 1
	fi
	for b in etcd:server etcdctl:etcdctl etcdutl:etcdutl; do
		(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/${b%%:*}" "go.etcd.io/etcd/${b#*:}/v3") || return 1
	done
}

install_etcd_static() {
	local bindir="$bindir/etcd-static-$1"
	install etcd-static "$1" etcd etcdctl etcdutl
}

# coredns is a main package of our own (hack/tools/coredns) that links only
# the plugins cluster DNS needs; its go.mod pins COREDNS_VERSION.
build_coredns() {
	local dest=$1
	(cd "$root/hack/tools/coredns" && go build -trimpath -ldflags "-s -w" -o "$dest/coredns" .)
}

# goinstall DEST PKG@VERSION... installs with GOBIN=DEST; these tools carry
# their own go.mod, so no module of ours pins their dependencies.
goinstall() {
	local dest=$1
	shift
	GOBIN="$dest" GOFLAGS=-trimpath go install -ldflags "-s -w" "$@"
}

build_kwok() { goinstall "$1" "sigs.k8s.io/kwok/cmd/kwok@$2" "sigs.k8s.io/kwok/cmd/kwokctl@$2"; }
build_controller_gen() { goinstall "$1" "sigs.k8s.io/controller-tools/cmd/controller-gen@$2"; }
build_kustomize() { goinstall "$1" "sigs.k8s.io/kustomize/kustomize/v5@$2"; }
build_golangci_lint() { goinstall "$1" "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$2"; }
build_versitygw() { goinstall "$1" "github.com/versity/versitygw/cmd/versitygw@$2"; }
build_benchstat() { goinstall "$1" "golang.org/x/perf/cmd/benchstat@$2"; }
build_registry() { goinstall "$1" "github.com/distribution/distribution/v3/cmd/registry@$2"; }
build_kubebuilder() { goinstall "$1" "sigs.k8s.io/kubebuilder/v4@$2"; }

[[ $# -eq 1 ]] || usage
case $1 in
kubernetes) install kubernetes "$K8S_VERSION" kube-apiserver kube-controller-manager kube-scheduler kubectl ;;
etcd)
	install etcd "$ETCD_VERSION" etcd
	install etcdutl "$ETCD_VERSION" etcdutl
	;;
etcd-static)
	install_etcd_static "$ETCD_VERSION"
	install_etcd_static "$ETCD35_VERSION"
	;;
kubelet) install kubelet "$K8S_VERSION" kubelet kube-proxy ;;
containerd) install containerd "$CONTAINERD_VERSION" containerd containerd-shim-runc-v2 ctr ;;
# The cache key adds a digest of the module, so a changed plugin list rebuilds.
coredns) install coredns "$COREDNS_VERSION-$(cat "$root"/hack/tools/coredns/{main.go,go.mod,go.sum} | sha256sum | cut -c1-12)" coredns ;;
kwok) install kwok "$KWOK_VERSION" kwok kwokctl ;;
controller-gen) install controller-gen "$CONTROLLER_GEN_VERSION" controller-gen ;;
kustomize) install kustomize "$KUSTOMIZE_VERSION" kustomize ;;
golangci-lint) install golangci-lint "$GOLANGCI_LINT_VERSION" golangci-lint ;;
versitygw) install versitygw "$VERSITYGW_VERSION" versitygw ;;
benchstat) install benchstat "$BENCHSTAT_VERSION" benchstat ;;
kubebuilder) install kubebuilder "$KUBEBUILDER_VERSION" kubebuilder ;;
registry) install registry "$DISTRIBUTION_VERSION" registry ;;
*) usage ;;
esac
