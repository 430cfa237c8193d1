# Bulkhead's two entry points: `make run` and `make test`.
GO ?= go
BIN := bin/bulkhead
SHARED ?= ../shared
# A model to run when MODEL is not given: a random-weight one made by `models synth`.
SYNTH := bin/synth-stories15m-q8_0.gguf
MODEL ?= $(SYNTH)
PROMPT ?= Once upon a time

.PHONY: build run test vet bench fuzz clean deps

# deps installs what the tests need beyond Go: a real redis-server (Debian package).
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server (apt-get)"; \
		(apt-get update -qq || sudo apt-get update -qq) && \
		(apt-get install -y -qq redis-server || sudo apt-get install -y -qq redis-server); }

build:
	$(GO) build -o $(BIN) ./cmd/bulkhead

$(SYNTH): build
	$(BIN) models synth --arch llama --shape stories15m --type q8_0 --seed 1 --out $@

# run generates from MODEL (default: a random-weight model, so its text is noise;
# try MODEL=$(SHARED)/models/stories260K.gguf for real stories).
run: build $(if $(filter $(SYNTH),$(MODEL)),$(SYNTH))
	$(BIN) generate --model $(MODEL) --prompt "$(PROMPT)" --max-tokens 64

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
