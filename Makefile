# maintenance-handler: `make help` lists the targets.
GO ?= go
SHELL := /bin/bash
# Every test, with the race detector; -v so that the test world's start-up
# time and each test's outcome are printed.
TEST_FLAGS ?= -race -count=1 -v -timeout 30m
# How many packages' tests make test runs at once on the newest Kubernetes:
# more than this machine's two cores, since most world tests wait on the
# API server, a drain's grace or the one real node rather than compute.
TEST_PARALLEL ?= 3

.PHONY: help demo test unit soak testworld prometheus vet verify generate docs build image release bench fuzz

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

demo: ## the agents at work on a local simulated GPU pool (first run builds the test world); DEMO_FLAGS=--keep to explore after, --short for 10 s graces
	CGO_ENABLED=0 $(GO) build -o bin/ ./cmd/agent ./cmd/aggregator ./cmd/kubectl-gce_maintenance
	$(GO) run ./test/cmd/demo $(DEMO_FLAGS)

test: testworld prometheus verify ## run every test on the newest Kubernetes and, beside it, OLDEST_PACKAGES on OLDEST_KUBERNETES, then the tests of pure functions (the state machine's model test over its fixed seeds, lifecycle/testdata/model-seeds.txt, and its regressions: the same on every run) and the short fuzz search (builds both test worlds and real nodes, and fetches Prometheus, once; later runs reuse the cache); says how many real-node tests this machine skipped; then kills and names anything of this run left behind; a failed run ends by naming what failed (scripts/test.sh)
	GO="$(GO)" TEST_FLAGS="$(TEST_FLAGS)" TEST_PARALLEL=$(TEST_PARALLEL) PURE_TESTS='$(PURE_TESTS)' OLDEST_KUBERNETES=$(OLDEST_KUBERNETES) OLDEST_PACKAGES="$(OLDEST_PACKAGES)" \
	TEST_FUZZTIME=$(TEST_FUZZTIME) scripts/test.sh

# The oldest Kubernetes the project supports (the chart's kubeVersion;
# testworld.OldestKubernetes, which a test holds this to), and the
# packages whose tests depend on the API server's and the kubelet's
# version (the shipped manifests, admission, RBAC, node authorization, the
# real node; the client's calls), which make test runs on it as well.
OLDEST_KUBERNETES ?= v1.34.4
OLDEST_PACKAGES ?= ./manifests ./kube

# The tests that step a pure function through many random histories on
# one goroutine: make test runs them apart, without the race
# detector, which finds nothing there and would take five times as long.
# The state machine's model test runs every fixed seed of
# lifecycle/testdata/model-seeds.txt (300,000 histories), two at once,
# and replays its regressions: the same on every run (3,000 histories of
# the first seed where go test runs it without a flag). make soak searches
# further.
PURE_TESTS := ^(TestStateMachineModel|TestStateMachineModelRegressions|TestFleetDecidesAsDecide)$$

# make soak draws random seeds of the model test, SOAK_SEED_HISTORIES
# histories each, for SOAK_TIME, or (when set) until SOAK_HISTORIES
# histories have run.
SOAK_TIME ?= 10m
SOAK_HISTORIES ?=
SOAK_SEED_HISTORIES ?= 30000

soak: ## search the state machine for defects: random seeds of its model test for SOAK_TIME (10m), or SOAK_HISTORIES histories, on every core; a failing seed is printed as a line for regressionSeeds in lifecycle/lifecycle_test.go
	set -o pipefail; $(GO) test -count=1 -v -timeout 0 -run '^TestStateMachineModel$$' ./lifecycle -args -model.histories $(SOAK_SEED_HISTORIES) \
		$(if $(SOAK_HISTORIES),-model.soak-histories $(SOAK_HISTORIES),-model.soak $(SOAK_TIME)) | grep -v -E '^(=== RUN|    --- PASS)'

# How long make test searches each fuzz target, after every test.
TEST_FUZZTIME ?= 3s
FUZZTIME ?= 1m

fuzz: ## search every parser's fuzz target for FUZZTIME each (default 1m); make test runs their seeds and checked-in corpus, then searches each for TEST_FUZZTIME (3s)
	scripts/fuzz.sh $(FUZZTIME)

unit: ## the fast tier: every test that needs no control plane (go test -short), in seconds; it starts no process of the test world and stops none
	$(GO) test -short -count=1 ./...

testworld: ## build etcd, kube-apiserver, controller-manager, scheduler and kwok into the cache, a real node's kubelet, containerd, runc and CNI plugins where the machine can run one (both for the newest Kubernetes and for OLDEST_KUBERNETES), the pinned helm and JobSet's controller
	$(GO) run ./test/cmd/testworld build
	$(GO) run ./test/cmd/testworld build-node
	MH_TESTWORLD_KUBERNETES=$(OLDEST_KUBERNETES) $(GO) run ./test/cmd/testworld build
	MH_TESTWORLD_KUBERNETES=$(OLDEST_KUBERNETES) $(GO) run ./test/cmd/testworld build-node
	$(GO) run ./test/cmd/testworld build-helm
	$(GO) run ./test/cmd/testworld build-jobset

prometheus: ## fetch prometheus and promtool from Debian's package into the cache (no system install)
	scripts/install-prometheus.sh >/dev/null

vet: ## go vet
	$(GO) vet ./...

verify: ## gofmt, go mod tidy unchanged, go vet, staticcheck (pinned), actionlint on .github/workflows (pinned), and no time.Now/time.Sleep outside cmd/, internal/, test/, examples/ and tests
	scripts/verify.sh

generate: ## write every generated file from its one source: the chart's rules, dashboard and table of values and the rule objects of manifests/components from monitoring/ and values.yaml, and the kustomize base from the chart's default render (builds the pinned helm once); edit the sources, not the copies
	helm=$$($(GO) run ./test/cmd/testworld helm) && $(GO) run ./build/generate -helm "$$helm"

docs: ## write docs/flags.md, the flag reference, from the binaries' flags and internal/flagdoc (their tests fail while it is stale)
	UPDATE_DOCS=1 $(GO) test -count=1 -run TestFlagReference ./cmd/agent ./cmd/aggregator ./cmd/kubectl-gce_maintenance

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

build: ## build the static binaries into bin/ (the agent and the aggregator as the Dockerfile does, and the kubectl plugin kubectl-gce_maintenance)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/ ./cmd/agent ./cmd/aggregator ./cmd/kubectl-gce_maintenance

image: ## the container image without a container engine: an OCI image layout in bin/image for linux/amd64 and linux/arm64 (push it with crane push --index)
	$(GO) run ./build/image -o bin/image -version $(VERSION)

# The image's repository, which the release's all-in-one YAML names and
# its chart installs by default (values.yaml's image.repository).
IMAGE ?= maintenance-handler
RELEASE_DIR ?= _output/release/$(VERSION)

release: ## one version's artefacts into RELEASE_DIR, by default _output/release/VERSION (VERSION=vX.Y.Z, IMAGE=the image's repository): the image (OCI layout), the chart, the all-in-one YAML, the plugin's archives and krew manifest, the CHANGELOG entry, SBOMs and SHA256SUMS
	$(GO) run ./build/release -version $(VERSION) -image $(IMAGE) -o $(RELEASE_DIR)

bench: ## run the benchmarks and print their figures, then each binary's size by dependency (written into docs/performance.md)
	$(GO) test -run '^$$' -bench . -benchmem -timeout 4h ./...
	$(GO) run ./build/sizes -readme docs/performance.md
