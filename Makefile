# Bulkhead's two entry points: `make run` and `make test`.
GO ?= go
BIN := bin/bulkhead
SHARED ?= ../shared
# make run serves the platform (`bulkhead dev`): MODEL=path.gguf registers a model
# as MODEL_NAME; with no MODEL, dev serves the built-in TinyStories model
# (models/builtin, MIT licence) as @cf/tinyllamas/stories260k.
MODEL ?=
MODEL_NAME ?= @cf/tinyllamas/stories260k
ARGS ?=

.PHONY: build run test vet bench fuzz clean deps

# deps installs what the tests need beyond Go: a real redis-server (Debian package).
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq redis-server || sudo apt-get install -y -qq redis-server); }

build:
	$(GO) build -o $(BIN) ./cmd/bulkhead

run: build
	$(BIN) dev $(if $(MODEL),--model '$(MODEL_NAME)=$(MODEL)') $(ARGS)

vet:
	$(GO) vet ./...

test: deps vet
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -tags purego ./workers/kernels

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20x ./workers/... ./models/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./models/gguf

clean:
	rm -rf bin
