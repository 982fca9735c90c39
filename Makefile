# opkit Makefile. `make help` lists the targets.
#
# Every tool is built from source through the Go module proxy by
# hack/install-tool.sh, cached per version in $(OPKIT_CACHE) and linked into
# bin/. Nothing else is downloaded.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BIN := $(ROOT)/bin
export PATH := $(BIN):$(PATH)
export KUBEBUILDER_ASSETS ?= $(BIN)

INSTALL_TOOL := $(ROOT)/hack/install-tool.sh
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint

# Local cluster (cluster-up, demo, run-*): name, fake node count, real node
# count (kubelet + containerd; needs root), kubeconfig.
CLUSTER_NAME ?= opkit
# kwok fake nodes: 3, or none beside real nodes (REAL_NODES).
CLUSTER_NODES ?= $(if $(filter-out 0,$(REAL_NODES)),0,3)
REAL_NODES ?= 0
CLUSTER_KUBECONFIG ?= $(ROOT)/.local/kubeconfig

# Test knobs.
GO_TEST_FLAGS ?= -race -count=1
UNIT_TIMEOUT ?= 25m
E2E_TIMEOUT ?= 30m
BENCH_COUNT ?= 6
# Scale benchmark (hack/scale): objects per contender in the main run, the
# further N of the scaling curve, and where scale.md, scale.json and
# scale.png go.
SCALE_N ?= 1000
SCALE_CURVE ?= 250,500,2000
SCALE_OUT ?= $(ROOT)/.local/scale

# The Go modules of this repository. The library is the root module; what
# would drag dependencies into a consumer's module graph is in modules of
# its own: the S3 store (minio-go), the e2e-framework waits, the kstatus
# assertions (cli-utils), the example
# operators (etcd's client and grpc), the local-cluster code and hack/
# programs (containerd's CRI API, go-containerregistry), and the e2e suites
# (porcupine, helm). Each nested go.mod replaces the modules it uses with
# this checkout. Every target runs in each module's own directory with
# GOWORK=off: a developer's go.work (see CONTRIBUTING.md; git ignores it)
# changes nothing here.
LIBRARY_MODULES := . statusutil/e2estatus statusutil/kstatustest backup/s3
UNIT_MODULES := $(LIBRARY_MODULES) internal/localcluster examples/memcached examples/etcd hack
GO_MODULES := $(UNIT_MODULES) e2e
export GOWORK := off

# The library also builds and passes its tests against the newest
# controller-runtime minor: this go.mod (and go.sum) is the root module's
# with controller-runtime v0.25 and k8s.io v0.37, used with -modfile. The
# root go.mod requires the oldest supported minor (README, Compatibility).
COMPAT_MODFILE := compat/controller-runtime-v0.25.mod
# The library's packages, tested against both.
LIBRARY_PKGS := ./reconcile/... ./statusutil/... ./ownership/... ./backup/... ./securemetrics/... ./webhook/... ./testenv/... ./storageversion/... ./conversiontest/... ./guard/... ./operation/... ./shard/... ./restmap/...

# Groups of modules that select the same version of every dependency they
# compile, so that one build of it in the Go build cache serves them all: a
# fresh machine (cold cache) compiles each differing version, and all that
# imports it, once more. make verify checks them (hack/modalign). The
# library's sub-modules are one group; the modules on the newest
# controller-runtime minor another (the root module is on the oldest).
ALIGNED_LIBRARY := statusutil/e2estatus statusutil/kstatustest backup/s3
ALIGNED_NEWEST := e2e examples/memcached examples/etcd hack internal/localcluster $(COMPAT_MODFILE)

##@ General

.PHONY: help
help: ## List the targets with one line each.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Tools (built from source, cached in ${XDG_CACHE_HOME:-~/.cache}/opkit)

.PHONY: tools
tools: envtest-assets cluster-tools node-tools controller-gen kustomize golangci-lint versitygw ## Build every pinned tool into bin/ (first run: ~25 min on 2 cores).

.PHONY: envtest-assets
envtest-assets: kubernetes etcd ## Build kube-apiserver and etcd for envtest (KUBEBUILDER_ASSETS=bin).

.PHONY: cluster-tools
cluster-tools: kubernetes etcd kwok ## Build everything a local kwok cluster needs.

.PHONY: node-tools
node-tools: node-packages kubelet containerd coredns local-path-provisioner registry ## Build and install everything a real node needs (REAL_NODES, E2E_REAL_NODES).

.PHONY: node-packages
node-packages: ## Install Debian's runc, CNI plugins, iptables and conntrack for real nodes (apt-get; root).
	@missing=""; for f in /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/sbin/iptables /usr/sbin/conntrack; do \
		[ -e $$f ] || missing="$$missing $$f"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "real nodes need$$missing: run make node-packages as root"; exit 1; fi; \
		echo ">> apt-get install runc containernetworking-plugins iptables conntrack (missing:$$missing)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			runc containernetworking-plugins iptables conntrack >/dev/null; \
	fi

.PHONY: kubernetes kubelet containerd etcd kwok controller-gen kustomize golangci-lint versitygw benchstat kubebuilder
kubernetes: ## Build kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.36.3.
	@$(INSTALL_TOOL) kubernetes
kubelet: ## Build kubelet and kube-proxy v1.36.3 (real nodes).
	@$(INSTALL_TOOL) kubelet
containerd: ## Build containerd v2.2, its runc shim and ctr, statically (real nodes).
	@$(INSTALL_TOOL) containerd
etcd: ## Build etcd and etcdutl v3.6.
	@$(INSTALL_TOOL) etcd
kwok: ## Build kwok and kwokctl.
	@$(INSTALL_TOOL) kwok
controller-gen: ## Build controller-gen.
	@$(INSTALL_TOOL) controller-gen
kustomize: ## Build kustomize (the examples' deploy and build-installer targets).
	@$(INSTALL_TOOL) kustomize
golangci-lint: ## Build golangci-lint.
	@$(INSTALL_TOOL) golangci-lint
versitygw: ## Build versitygw, the S3 server the backup tests run against.
	@$(INSTALL_TOOL) versitygw
benchstat: ## Build benchstat.
	@$(INSTALL_TOOL) benchstat
kubebuilder: ## Build kubebuilder (make kubebuilder-scaffold).
	@$(INSTALL_TOOL) kubebuilder

.PHONY: kubebuilder-scaffold
kubebuilder-scaffold: kubebuilder ## Write docs/testdata/kubebuilder anew with kubebuilder's memcached tutorial scaffold (docs/kubebuilder.md ports it).
	hack/kubebuilder-scaffold.sh

.PHONY: coredns local-path-provisioner registry
registry: ## Build the CNCF distribution registry the real nodes pull from.
	@$(INSTALL_TOOL) registry
coredns: ## Build CoreDNS v1.14.7 with only the cluster-DNS plugins (hack/tools/coredns; no forward).
	@$(INSTALL_TOOL) coredns
local-path-provisioner: ## Build the local-path PersistentVolume provisioner (hack/localpv) into bin/.
	cd hack && $(STATIC_BUILD_ENV) go build -o $(BIN)/local-path-provisioner ./localpv

##@ Development

.PHONY: generate
generate: controller-gen ## Generate deepcopy code (controller-gen object).
	$(CONTROLLER_GEN) object paths=./internal/testapi/...
	@for ex in $$(ls -d examples/*/api 2>/dev/null); do ex=$${ex%/api}; \
		echo "$(CONTROLLER_GEN) object in $$ex"; (cd $$ex && $(CONTROLLER_GEN) object paths=./api/...); done

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and webhook configurations from markers.
	$(CONTROLLER_GEN) crd webhook paths=./internal/testapi/... output:crd:artifacts:config=internal/testapi/crd output:webhook:artifacts:config=internal/testapi/webhook
	@for ex in $$(ls -d examples/*/api 2>/dev/null); do ex=$${ex%/api}; \
		echo "$(CONTROLLER_GEN) crd rbac in $$ex"; \
		(cd $$ex && $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases \
			rbac:roleName=manager-role paths=./... output:rbac:artifacts:config=config/rbac \
			webhook output:webhook:artifacts:config=config/webhook); \
		mkdir -p $$ex/docs; (cd hack && $(STATIC_BUILD_ENV) go run ./crdref -title "$$(basename $$ex) operator: API reference" \
			-out $(ROOT)/$$ex/docs/reference.md $(ROOT)/$$ex/config/crd/bases/*.yaml); \
	done

.PHONY: installers
installers: kustomize ## Write each example's dist/install.yaml and dist/chart/templates (make build-installer chart in examples/*).
	@for ex in $$(ls -d examples/*/ 2>/dev/null); do \
		if [ -f "$$ex/Makefile" ]; then $(MAKE) -s -C $$ex build-installer chart; fi; \
	done

.PHONY: fmt
fmt: ## Format the code (gofmt -s).
	gofmt -s -w $$(git ls-files '*.go')

# Build configurations. go vet, golangci-lint (through go list -export) and
# go test each compile every dependency of what they check, and the Go build
# cache shares a package's build only between identical configurations. So
# every step builds the way one other step must, and a fresh machine
# compiles each dependency once per configuration, not once per step:
# - UNIT_BUILD_FLAGS: the unit modules and the compat modfile, as their tests
#   run (-race where GO_TEST_FLAGS has it);
# - STATIC_BUILD_ENV: the e2e phase and the hack programs make runs, static
#   and trimmed as the images must be (hack/images: CGO_ENABLED=0,
#   -trimpath), so that the e2e suites, the operators and fixtures they
#   build (e2e/harness and e2e/teardown build with the go test process's
#   environment), the local-path provisioner, the images and hack's crdref
#   share one build. hack's modalign, small, keeps the default build: the
#   go list it runs must see each module as a default build does. The e2e
#   suites run without -race, which needs cgo: a -race in the environment's
#   GOFLAGS is dropped here.
UNIT_BUILD_FLAGS := $(filter -race,$(GO_TEST_FLAGS))
STATIC_BUILD_ENV := CGO_ENABLED=0 GOFLAGS="$(strip $(filter-out -race,$(GOFLAGS)) -trimpath)"

.PHONY: vet
vet: ## Run go vet in every module (built as the tests are, see UNIT_BUILD_FLAGS and STATIC_BUILD_ENV).
	@echo ">> vet at $$(date +%T)"
	@for m in $(UNIT_MODULES); do echo "go vet ($$m)"; (cd $$m && go vet $(UNIT_BUILD_FLAGS) ./...); done
	@echo "go vet (e2e)"; cd e2e && $(STATIC_BUILD_ENV) go vet ./...

.PHONY: lint
# golangci-lint loads dependencies from their export data, which its go list
# -export compiles: GOFLAGS gives that go list the tests' configuration.
lint: golangci-lint ## Run golangci-lint in every module (built as the tests are, see UNIT_BUILD_FLAGS and STATIC_BUILD_ENV).
	@echo ">> lint at $$(date +%T)"
	@for m in $(UNIT_MODULES); do echo "golangci-lint ($$m)"; \
		(cd $$m && GOFLAGS="$(strip $(GOFLAGS) $(UNIT_BUILD_FLAGS))" $(GOLANGCI_LINT) run --allow-parallel-runners ./...); done
	@echo "golangci-lint (e2e)"; cd e2e && $(STATIC_BUILD_ENV) $(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: verify
verify: generate manifests installers ## Fail if generated files, formatting or go.mod are out of date, or a group of modules (ALIGNED_*) compiles two versions of a dependency.
	@echo ">> verify checks at $$(date +%T)"
	@for m in $(GO_MODULES); do (cd $$m && go mod tidy); done
	@go mod tidy -modfile=$(COMPAT_MODFILE)
	@for d in hack/tools/*/; do (cd $$d && go mod tidy); done
	@cd hack && go run ./modalign -root .. $(ALIGNED_LIBRARY) && go run ./modalign -root .. $(ALIGNED_NEWEST)
	@out=$$(gofmt -s -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out (run make fmt)"; exit 1; fi
	@if [ -n "$$(git status --porcelain -- . ':!bin' ':!.local')" ]; then \
		echo "generated files or go.mod are out of date; run make generate manifests and go mod tidy, then commit:"; \
		git status --porcelain; git diff --stat; exit 1; fi

##@ Test

.PHONY: test
test: verify vet lint test-unit test-compat test-e2e ## Everything CI runs: verify, vet, lint, unit + envtest, the library on the newest controller-runtime, e2e.

.PHONY: test-unit
test-unit: envtest-assets versitygw controller-gen kustomize coredns ## Unit and envtest tests of every module but e2e (with -race, fuzz seed corpora included).
	@echo ">> test-unit at $$(date +%T)"
	@for m in $(UNIT_MODULES); do echo "go test ($$m)"; \
		(cd $$m && go test $(GO_TEST_FLAGS) -timeout $(UNIT_TIMEOUT) ./...); done

.PHONY: test-compat
test-compat: envtest-assets versitygw ## The library's tests against the newest controller-runtime minor ($(COMPAT_MODFILE)).
	@echo ">> test-compat at $$(date +%T)"
	go vet $(UNIT_BUILD_FLAGS) -modfile=$(COMPAT_MODFILE) ./...
	go test $(GO_TEST_FLAGS) -timeout $(UNIT_TIMEOUT) -modfile=$(COMPAT_MODFILE) $(LIBRARY_PKGS)

# The e2e suites: go test starts the packages' test binaries in the order
# it is given them, -p (the CPU count) at a time. The real-node suites take
# turns on the machine's one set of real nodes: incluster, the longest
# suite by far, starts first and the kwok suites run beside it; etcdnodes
# and realnode start last, so that their wait for the real nodes holds no
# slot a kwok suite could use.
.PHONY: test-e2e
test-e2e: cluster-tools node-tools images ## e2e-framework suites on throwaway local clusters, real-node suites included (root; E2E_PROVIDER=kind for kind).
	@echo ">> test-e2e at $$(date +%T)"
	cd e2e && $(STATIC_BUILD_ENV) go test -count=1 -timeout $(E2E_TIMEOUT) ./incluster \
		$$(go list ./... | grep -v -e '/e2e/incluster$$' -e '/e2e/etcdnodes$$' -e '/e2e/realnode$$' -e '/e2e/teardown$$') ./etcdnodes ./realnode
	@# Alone: it interrupts and kills real-node suites and checks what they leave.
	cd e2e && $(STATIC_BUILD_ENV) go test -count=1 -timeout $(E2E_TIMEOUT) ./teardown

# The etcd operator's fault campaign: make test runs 40 schedules on etcd
# processes (TestFaultCampaign) and 30 on the fake etcd
# (TestFaultCampaignFake) of seed 1, plus seed 1's schedules that found a
# defect; chaos runs SCHEDULES and
# FAKE_SCHEDULES longer schedules from SEED (the same seed runs the same
# schedules), then NODE_SCHEDULES on two real nodes (TestNodeCampaign),
# and ends with their totals. The library's campaign (TestLibraryCampaign
# in reconcile: 16 schedules of 40 steps in make test) runs LIB_SCHEDULES
# of LIB_STEPS from the same SEED, and the shard campaign
# (TestShardCampaign: 1 schedule in make test) SHARD_SCHEDULES.
SEED ?= $(shell date +%s)
SCHEDULES ?= 1000
FAKE_SCHEDULES ?= 1000
NODE_SCHEDULES ?= 10
CHAOS_STEPS ?= 12
LIB_SCHEDULES ?= 1000
LIB_STEPS ?= 80
SHARD_SCHEDULES ?= 20

.PHONY: chaos
chaos: envtest-assets etcd cluster-tools node-tools images ## The fault campaigns at size: the etcd operator's SCHEDULES (etcd processes), FAKE_SCHEDULES (fake etcd) and NODE_SCHEDULES (real nodes), the library's LIB_SCHEDULES, from SEED; non-zero on any violation.
	@mkdir -p .local
	@status=0; (cd examples/etcd && go test $(GO_TEST_FLAGS) -v -timeout 300m -run '^TestFaultCampaign(Fake)?$$' ./internal/controller \
		-campaign.seed=$(SEED) -campaign.schedules=$(SCHEDULES) -campaign.fakeschedules=$(FAKE_SCHEDULES) -campaign.steps=$(CHAOS_STEPS) -campaign.pause -campaign.tls=3) > $(ROOT)/.local/chaos.log 2>&1 || status=$$?; \
		go test $(GO_TEST_FLAGS) -v -timeout 120m -run '^TestLibraryCampaign$$' ./reconcile \
		-libcampaign.seed=$(SEED) -libcampaign.schedules=$(LIB_SCHEDULES) -libcampaign.steps=$(LIB_STEPS) >> $(ROOT)/.local/chaos.log 2>&1 || status=$$?; \
		go test $(GO_TEST_FLAGS) -v -timeout 120m -run '^TestShardCampaign$$' ./shard \
		-shardcampaign.seed=$(SEED) -shardcampaign.schedules=$(SHARD_SCHEDULES) >> $(ROOT)/.local/chaos.log 2>&1 || status=$$?; \
		(cd e2e && OPKIT_NODE_SCHEDULES=$(NODE_SCHEDULES) OPKIT_NODE_SEED=$(SEED) OPKIT_NODE_STEPS=$(CHAOS_STEPS) $(STATIC_BUILD_ENV) go test -count=1 -v -timeout 120m -run '^TestNodeCampaign$$' ./etcdnodes) >> $(ROOT)/.local/chaos.log 2>&1 || status=$$?; \
		grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- PASS|(fault|library) campaign)' $(ROOT)/.local/chaos.log | tail -n 300; \
		grep -E '^(fault|library) campaign' $(ROOT)/.local/chaos.log; \
		grep -E '^(fault|library) campaign' $(ROOT)/.local/chaos.log | sed -E 's/.* ([0-9]+) schedules, .* ([0-9]+) violations in .*/\1 \2/' | \
		awk '{s+=$$1; v+=$$2} END {printf "%d schedules, %d violations\n", s, v}'; exit $$status

.PHONY: cover
cover: envtest-assets versitygw controller-gen kustomize coredns ## Unit tests with coverage per package, and a total per module (profiles in .local/cover/).
	@mkdir -p .local/cover
	@for m in $(UNIT_MODULES); do out=$(ROOT)/.local/cover/$$(echo $$m | tr / - | sed 's/^\.$$/opkit/').out; \
		(cd $$m && go test -count=1 -timeout $(UNIT_TIMEOUT) -coverprofile=$$out ./... && \
		echo "total ($$m): $$(go tool cover -func=$$out | tail -1 | awk '{print $$NF}')"); done

.PHONY: bench
bench: envtest-assets cluster-tools benchstat ## Go micro-benchmarks (benchstat), then the memcached scale benchmark (hack/scale: opkit, the tutorial's way, the children created directly) on throwaway local clusters.
	@mkdir -p .local
	@: > .local/bench.txt
	@for m in $(UNIT_MODULES); do (cd $$m && go test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./...) | tee -a .local/bench.txt; done
	$(BIN)/benchstat .local/bench.txt
	cd hack && go run ./scale -n $(SCALE_N) -curve $(SCALE_CURVE) -out $(SCALE_OUT)

.PHONY: bench-backup
SHARDS_N ?= 1000
.PHONY: bench-shards
bench-shards: cluster-tools ## The memcached operator as 1 and 3 shards (hack/scale -replicas): memory, create, restart, failover (docs/benchmarks/shards.md).
	cd hack && go run ./scale -n $(SHARDS_N) -replicas 1,3 -out $(ROOT)/.local/shards

bench-backup: versitygw ## Backup throughput and peak RSS: a 1 GiB snapshot into both stores against plain copies (docs/benchmarks/backup.md).
	cd backup/s3 && go run ./internal/benchprog -size 1GiB -count 5

##@ Images (docker-archive tarballs for real nodes and kind, built without Docker)

# Where make images writes one <image>.tar per image (hack/images).
IMAGES_DIR ?= $(ROOT)/.local/images
# The tag of the operators' second build (e2e/incluster's in-place upgrade).
NEXT_TAG ?= next

.PHONY: images etcd-static memcached-deb
images: etcd-static memcached-deb versitygw ## Build the image tarballs into $(IMAGES_DIR) (load: ctr -n k8s.io images import / kind load image-archive).
	cd hack && $(STATIC_BUILD_ENV) go run ./images -out $(IMAGES_DIR) -bin $(BIN)
	@# A second build of each operator (version $(NEXT_TAG)), which e2e/incluster upgrades to in place.
	cd hack && $(STATIC_BUILD_ENV) go run ./images -out $(IMAGES_DIR) -bin $(BIN) -tag $(NEXT_TAG) -only memcached-operator,etcd-operator

# Where make images-push sends every image (host[:port][/path]; plain HTTP on
# loopback), and the platforms of each image's index.
REGISTRY ?=
PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: images-push
images-push: etcd-static memcached-deb versitygw ## Push every image to REGISTRY as an index of PLATFORMS; $(IMAGES_DIR)/digests.txt names each by digest (make deploy IMG=...).
	@test -n "$(REGISTRY)" || { echo "make images-push: set REGISTRY=host[:port][/path], for example REGISTRY=127.0.0.1:5000" >&2; exit 2; }
	mkdir -p $(IMAGES_DIR)
	cd hack && $(STATIC_BUILD_ENV) go run ./images -bin $(BIN) -push $(REGISTRY) -platforms $(PLATFORMS) -digests $(IMAGES_DIR)/digests.txt

# make release: the version, the registry its operator images go to, and
# DRY_RUN=0 to push them and change the tree (CHANGELOG.md, the library
# sub-modules' go.mod).
VERSION ?=
RELEASE_REGISTRY ?= ghcr.io/opkit-dev
DRY_RUN ?= 1
RELEASE_DIR = $(ROOT)/.local/release/$(VERSION)
release_dry_run = $(if $(filter 0,$(DRY_RUN)),false,true)

.PHONY: release
release: kustomize ## Release VERSION (a dry run unless DRY_RUN=0): installers and chart packages pinned to the image digests in .local/release/VERSION, its CHANGELOG section, the tags to push.
	@test -n "$(VERSION)" || { echo "make release: set VERSION=vMAJOR.MINOR.PATCH, for example VERSION=v0.1.0" >&2; exit 2; }
	cd hack && go run ./release -version $(VERSION) -check
	mkdir -p $(RELEASE_DIR)
	cd hack && $(STATIC_BUILD_ENV) go run ./images -bin $(BIN) -push $(RELEASE_REGISTRY) -tag $(VERSION) -platforms $(PLATFORMS) \
		-only memcached-operator,etcd-operator -digests $(RELEASE_DIR)/digests.txt -dry-run=$(release_dry_run)
	cd hack && go run ./release -version $(VERSION) -digests $(RELEASE_DIR)/digests.txt -out $(RELEASE_DIR) -dry-run=$(release_dry_run)

etcd-static: ## Build static etcd, etcdctl and etcdutl v3.6 and v3.5 for the etcd images (bin/etcd-static-VERSION/).
	@$(INSTALL_TOOL) etcd-static

# The memcached image is Debian's memcached binary and its libraries. On a
# host with systemd, installing the package also starts its service.
memcached-deb: ## Install Debian's memcached package (apt-get, needs root) unless /usr/bin/memcached exists.
	@if [ ! -x /usr/bin/memcached ]; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "memcached-deb: /usr/bin/memcached is missing and apt-get needs root; run:" >&2; \
			echo "  sudo apt-get install -y --no-install-recommends memcached" >&2; \
			echo "then make images again" >&2; \
			exit 1; \
		fi; \
		apt-get install -y --no-install-recommends memcached || \
			{ apt-get update && apt-get install -y --no-install-recommends memcached; }; \
	fi

##@ Local cluster (real apiserver, controller-manager, scheduler, etcd + kwok fake nodes)

.PHONY: cluster-up
cluster-up: cluster-tools $(if $(filter-out 0,$(REAL_NODES)),node-tools images) ## Start the local cluster (REAL_NODES=N adds real nodes; root) and write its kubeconfig to .local/kubeconfig.
	cd hack && go run ./cluster up --name $(CLUSTER_NAME) --nodes $(CLUSTER_NODES) --real-nodes $(REAL_NODES) \
		--images $(IMAGES_DIR) --kubeconfig $(CLUSTER_KUBECONFIG) --bin $(BIN)

.PHONY: cluster-down
cluster-down: kwok ## Delete the local cluster, its real nodes and their state.
	cd hack && go run ./cluster down --name $(CLUSTER_NAME) --kubeconfig $(CLUSTER_KUBECONFIG) --bin $(BIN)

.PHONY: demo
demo: cluster-tools ## Start a local cluster (unless KUBECONFIG is set) and run the memcached walkthrough.
	@hack/demo.sh

.PHONY: run-memcached
run-memcached: ## Install the Memcached CRD and run the memcached operator against $KUBECONFIG (default: the local cluster).
	export KUBECONFIG=$${KUBECONFIG:-$(CLUSTER_KUBECONFIG)}; \
	$(BIN)/kubectl apply --server-side -f examples/memcached/config/crd/bases && \
	cd examples/memcached && go run . --metrics-bind-address=127.0.0.1:8080 --metrics-secure=false

.PHONY: run-etcd
run-etcd: ## Install the etcd CRDs and run the etcd operator against $KUBECONFIG (default: the local cluster).
	export KUBECONFIG=$${KUBECONFIG:-$(CLUSTER_KUBECONFIG)}; \
	$(BIN)/kubectl apply --server-side -f examples/etcd/config/crd/bases && \
	cd examples/etcd && go run . --metrics-bind-address=127.0.0.1:8080 --metrics-secure=false

.PHONY: clean
clean: ## Remove bin/ links and .local/ (the tool cache stays).
	rm -rf bin .local
