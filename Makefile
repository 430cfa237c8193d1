# Bulkhead's two entry points: `make run` and `make test`.
GO ?= go
BIN := bin/bulkhead
# STATICCHECK is the staticcheck release make vet runs (from the Go module proxy).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
SHARED ?= ../shared
# make run serves the platform (`bulkhead dev`): MODEL=path.gguf registers a model
# as MODEL_NAME; with no MODEL, dev serves the built-in TinyStories model
# (models/builtin, MIT licence) as @cf/tinyllamas/stories260k.
MODEL ?=
MODEL_NAME ?= @cf/tinyllamas/stories260k
ARGS ?=

.PHONY: build run test test-flood test-cluster test-deploy cluster cluster-down vet bench fuzz clean deps screenshots

# deps installs what the tests need beyond Go: a real redis-server, chromium
# (the dashboard's browser test) and node with npm (the official npm SDKs'
# test installs them from the npm registry), Debian packages.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq redis-server || sudo apt-get install -y -qq redis-server); }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium for the dashboard's browser test (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq chromium || sudo apt-get install -y -qq chromium); }
	@{ command -v node && command -v npm; } >/dev/null 2>&1 || { \
		echo "installing node and npm for the npm SDKs' test (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq nodejs npm || sudo apt-get install -y -qq nodejs npm); }
	@command -v patch >/dev/null 2>&1 || { \
		echo "installing patch for the Jinja fork's check (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq patch || sudo apt-get install -y -qq patch); }

build:
	$(GO) build -o $(BIN) ./cmd/bulkhead

run: build
	$(BIN) dev $(if $(MODEL),--model '$(MODEL_NAME)=$(MODEL)') $(ARGS)

# vet is the static gates: gofmt, go vet and staticcheck (also over the kernels'
# amxemu build), go.mod tidy, the Jinja fork
# against upstream plus its patch (models/chat/internal/jinja/UPSTREAM), and the layout
# tests (the design card's layering, no test support in the product, the
# README naming every package, docs naming only tests that exist, the house
# style's file and function sizes).
vet: deps
	@out=$$(gofmt -l cmd edge queue workers billing models deploy); \
		if [ -n "$$out" ]; then echo "gofmt -w these files:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	bash .ci/check-jinja-patch
	$(GO) run $(STATICCHECK) ./...
	$(GO) vet -tags amxemu ./workers/kernels
	$(GO) run $(STATICCHECK) -tags amxemu ./workers/kernels
	$(GO) test -count=1 -run 'TestLayering|TestProductImportsNoTestSupport|TestReadmeNamesEveryPackage|TestDocsNameRealTests|TestSizes|TestSizeFindings' ./models/testkit

# test runs the suite under the race detector, then what -race makes too
# slow or cannot show: structured output over
# the whole qwen2 vocabulary, the engine's numerics tests on the portable
# kernel set (under -race they run every other set the CPU has, and the
# kernels package runs every set of every op), a build without assembly, and
# the AMX kernels with their tile instructions emulated (amx.go).
test: deps vet
	$(GO) test -race -count=1 -timeout 35m ./...
	$(GO) test -count=1 -run 'TestStructuredOutput' ./workers/engine
	$(GO) test -count=1 -run '(Golden|Invariance|Arch|Attention|EmbedderMatchesLlamaCpp)/^go$$' ./workers/engine
	$(GO) test -count=1 -run '(MatchesLlamaCpp|BatchInvariance)/^go$$' ./workers/encoder
	$(GO) test -count=1 -tags purego ./workers/kernels
	$(GO) test -count=1 -tags amxemu -run 'TestTileKernelAMX|TestTilePath|TestNoLegacySSE' ./workers/kernels

# test-flood is issue 21's flood as a load measurement (build tag flood):
# tenant B's p99 time to first token under tenant A's flood, against its
# unloaded p99, on one worker, four, dev and dev --workers 4, without the
# race detector. It judges latency, so it wants a machine that runs nothing
# else: CI runs it after make test, never beside it. make test runs the
# one-worker flood under -race for what must hold however slow the machine
# (every B request served, A answered 200 or 429 and nothing else).
test-flood: deps
	$(GO) test -tags flood -count=1 -timeout 15m -run 'TestFloodFairness' ./cmd/bulkhead

# cluster starts the local cluster of real processes (deploy/local: three
# NATS servers in one JetStream cluster, Redis, two edges, a prefill and two
# decode workers, billing) and prints its endpoints; cluster-down stops it.
CLUSTER_DIR ?= $(CURDIR)/tmp/cluster
cluster: build
	$(GO) run ./deploy/local/cmd/local up --bin $(CURDIR)/$(BIN) --dir $(CLUSTER_DIR) $(ARGS)

cluster-down:
	$(GO) run ./deploy/local/cmd/local down --dir $(CLUSTER_DIR)

# test-cluster runs the fault tests against one local cluster (build tag
# cluster): kill -9 a NATS server, kill -9 a decode worker mid-stream,
# SIGTERM a worker, stop Redis, restart an edge. A few minutes at most.
test-cluster: deps
	$(GO) test -tags cluster -count=1 -timeout 8m -v -run . ./deploy/local

# test-deploy tests deploy/helm, its own Go module (so the product's module
# never depends on Kubernetes): the chart rendered through helm's SDK and
# decoded strictly into the Kubernetes, KEDA and Prometheus Operator types,
# and the Dockerfile (stages, base, user; the static binary it builds).
test-deploy:
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20x ./workers/... ./models/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./models/gguf

# screenshots reruns the dashboard's browser test, writing its 1280 and 390
# pixel screenshots into docs/.
screenshots:
	BULKHEAD_SCREENSHOTS=$(CURDIR)/docs $(GO) test -count=1 -run TestDashboardInBrowser ./cmd/bulkhead

clean:
	rm -rf bin
