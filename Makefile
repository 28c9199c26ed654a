# hvd — common tasks. Everything needs only Go (and, for `make anchors`, the
# Debian packages listed in bench/anchors/README.md).
GO      ?= go
BIN     := bin
NP      ?= 3

.PHONY: all build run test test-short race vet bench anchors clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

# The main job: a real multi-process data-parallel training run.
run: build
	$(BIN)/hvdrun -np $(NP) $(BIN)/linreg

# The test suite (unit, in-process conformance, multi-process end to end).
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# Go's race detector over the packages with concurrency of their own.
race:
	$(GO) test -count=1 -race -short -timeout 20m ./sdk/... ./internal/... ./backends/...

test-short:
	$(GO) test -count=1 -short ./...

# hvdbench sweep for docs/performance.md (run alone: 2-core machines).
bench: build
	bench/run_hvdbench.sh

anchors:
	bench/anchors/run_anchors.sh --np 2

clean:
	rm -rf $(BIN)
