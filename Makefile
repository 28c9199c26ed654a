# hvd — common tasks. Everything needs only Go (and, for `make anchors`, the
# Debian packages listed in bench/anchors/README.md).
GO      ?= go
BIN     := bin
NP      ?= 3
PYNP    ?= 2

.PHONY: build-mpi python-mpi test-mpi chaos all build run run-go run-split run-gpt python generate check-generated torch test test-short race vet bench bench-python anchors simulate clean plugins proto

PYTHON  ?= /usr/bin/python3
PYBUILD := build/python
PY_SRC  := $(shell find python/hvd -name '*.py' -o -name '*.c')

all: build

# Go binaries (cmd/libhvd is a c-shared library: built by `make python`).
build:
	$(GO) build -o $(BIN)/ $$($(GO) list ./cmd/... ./examples/... | grep -v /cmd/libhvd)

# The main job: hvd.torch trains a small model on 2 processes
# (examples/pytorch); installs Debian's python3-torch when it is missing.
run: build torch python
	PYTHONPATH=$(PYBUILD) $(BIN)/hvdrun -np $(PYNP) $(PYTHON) examples/pytorch/train.py

# The model-parallel example: hvdgen generates the pipeline job for
# examples/split/hvd.yaml into build/split, which trains under hvdrun (NP
# ranks = stages x data_parallel) and is compared with the same model run
# in one process (float64, 20 steps).
SPLIT_NP ?= 2
run-split: build torch python plugins
	$(BIN)/hvdgen generate -f examples/split/hvd.yaml --plugin-dir $(BIN) --python $(PYTHON) --out $(CURDIR)/build/split --np $(SPLIT_NP)
	PYTHONPATH=$(PYBUILD) $(BIN)/hvdrun -np $(SPLIT_NP) $(PYTHON) build/split/train.py --steps 20 --dtype float64 --dump build/split/pipeline.npz
	PYTHONPATH=$(PYBUILD) $(PYTHON) build/split/train.py --reference --steps 20 --dtype float64 --dump build/split/reference.npz
	$(PYTHON) examples/split/compare.py build/split/pipeline.npz build/split/reference.npz

# The transformer split (docs/split.md): hvdgen generates the GPT of examples/gpt/hvd.yaml split
# 2 tensor x 2 pipeline stages (interleaved, 2 chunks each) x 2 data-parallel replicas with the
# optimizer state sharded (ZeRO-1) into build/gpt; it trains 20 steps under hvdrun -np 8 and is
# compared with the same model trained in one process (float64), with every rank's peak memory.
run-gpt: build torch python plugins
	$(BIN)/hvdgen generate -f examples/gpt/hvd.yaml --plugin-dir $(BIN) --python $(PYTHON) --out $(CURDIR)/build/gpt --np 8
	PYTHONPATH=$(PYBUILD) $(BIN)/hvdrun -np 8 $(PYTHON) build/gpt/train.py --steps 20 --batch-size 8 --dtype float64 --memory --dump build/gpt/split.npz
	PYTHONPATH=$(PYBUILD) $(PYTHON) build/gpt/train.py --reference --steps 20 --batch-size 8 --dtype float64 --memory --dump build/gpt/reference.npz
	$(PYTHON) build/gpt/compare.py build/gpt/split.npz build/gpt/reference.npz

# The Go example: linear regression through the Go SDK.
run-go: build
	$(BIN)/hvdrun -np $(NP) $(BIN)/linreg

# libhvd.so (+ header) and the importable package under build/python:
# PYTHONPATH=build/python python3 -c 'import hvd.torch'
python: $(PYBUILD)/hvd/libhvd.so $(PY_SRC) $(PYBUILD)/hvd/torch/.tensorinfo
	mkdir -p $(PYBUILD)
	cp -r python/hvd $(PYBUILD)/
	find $(PYBUILD)/hvd -name __pycache__ -prune -exec rm -rf {} +
	rm -f $(PYBUILD)/hvd/common/_fastpath.c $(PYBUILD)/hvd/torch/_tensorinfo.cpp
	@# hvd.torch's per-op fast path (hvd/common/_fastpath.c) for $(PYTHON), when its headers are
	@# installed (python3-dev); without it the same calls run through ctypes.
	@inc=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	suf=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'); \
	if [ -f "$$inc/Python.h" ]; then \
	  $(CC) -O2 -shared -fPIC -Wall -Werror -I"$$inc" -o $(PYBUILD)/hvd/common/_fastpath$$suf python/hvd/common/_fastpath.c; \
	else echo "note: no Python.h for $(PYTHON) (install python3-dev): hvd.torch's per-op calls go through ctypes"; fi

# The C fast path's reader of torch's tensors (hvd/torch/_tensorinfo.cpp),
# built against the torch $(PYTHON) imports when its C++ headers are there
# (Debian: libtorch-dev; about 15 s); without it the fast path asks the
# tensor's Python attributes. The stamp is left only after a build, so a
# torch installed later is picked up, and it is older than torch's
# version.py after an upgrade (found without importing torch), which
# rebuilds it for the new torch.
TORCH_VERSION_PY = $(shell $(PYTHON) -c 'import importlib.util as u, os; s = u.find_spec("torch"); print(os.path.join(s.submodule_search_locations[0], "version.py") if s else "")' 2>/dev/null)
$(PYBUILD)/hvd/torch/.tensorinfo: python/hvd/torch/_tensorinfo.cpp python/build_tensorinfo.py $(wildcard $(TORCH_VERSION_PY))
	@mkdir -p $(@D)
	@echo "$(PYTHON) python/build_tensorinfo.py $(PYBUILD) $(CXX)"; \
	$(PYTHON) python/build_tensorinfo.py $(PYBUILD) $(CXX) && touch $@ || \
	  echo "note: hvd.torch's fast path reads tensors through their Python attributes (hvd/torch/_tensorinfo.cpp not built)"

$(PYBUILD)/hvd/libhvd.so: $(shell find cmd/libhvd sdk backends -name '*.go' -not -name '*_test.go') go.mod
	mkdir -p $(PYBUILD)/hvd
	$(GO) build -buildmode=c-shared -o $@ ./cmd/libhvd

# hvdgen, the framework plugins, hvdrun, libhvd.so and SHA256SUMS in bin/:
# what `hvdgen plugin install <framework>` expects next to itself (it copies
# hvdrun into the environment's bin/).
PLUGINS := pytorch tensorflow mxnet
plugins: $(PYBUILD)/hvd/libhvd.so
	mkdir -p $(BIN)
	$(GO) build -o $(BIN)/hvdgen ./cmd/hvdgen
	$(GO) build -o $(BIN)/hvdrun ./cmd/hvdrun
	for p in $(PLUGINS); do $(GO) build -o $(BIN)/hvd-plugin-$$p ./plugins/$$p || exit 1; done
	cp $(PYBUILD)/hvd/libhvd.so $(BIN)/libhvd.so
	cd $(BIN) && sha256sum $(addprefix hvd-plugin-,$(PLUGINS)) hvdrun > SHA256SUMS

# Regenerate plugin/v1/internal/pb from plugin/v1/proto/adapter.proto
# (needs protoc: apt-get install protobuf-compiler; the Go generators are
# pinned as tools in go.mod). plugin/v1's tests check the result is fresh.
PROTO_TOOLS := build/tools
proto:
	$(GO) build -o $(PROTO_TOOLS)/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	cd plugin/v1 && protoc --plugin=protoc-gen-go=../../$(PROTO_TOOLS)/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=../../$(PROTO_TOOLS)/protoc-gen-go-grpc -I proto \
	  --go_out=internal/pb --go_opt=paths=source_relative \
	  --go-grpc_out=internal/pb --go-grpc_opt=paths=source_relative adapter.proto

# Debian's PyTorch stack, Python's headers for hvd.torch's C fast path
# (hvd/common/_fastpath.c) and torch's C++ headers for its tensor reader
# (hvd/torch/_tensorinfo.cpp), when $(PYTHON) lacks them.
torch:
	@{ $(PYTHON) -c 'import os, sys, sysconfig, torch, numpy, pytest; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' && \
	  $(PYTHON) python/build_tensorinfo.py --check; } 2>/dev/null || { \
	  echo "installing python3-torch python3-numpy python3-pytest python3-dev libtorch-dev with apt-get"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq python3-torch python3-numpy python3-pytest python3-dev libtorch-dev >/dev/null; }

# Regenerate the C ABI's two sides from codegen/abi/hvd.go.
generate:
	$(GO) run ./codegen/abi/genabi

check-generated:
	$(GO) run ./codegen/abi/genabi -check

# The MPI build (docs/mpi.md): Go binaries in bin/mpi and libhvd.so in
# build/python-mpi linked against the system Open MPI (libopenmpi-dev), with
# the MPI data plane (backends/mpi, HVD_BACKEND=mpi). The default build
# needs no MPI and starts under mpirun too (through mpi4py).
build-mpi:
	$(GO) build -tags mpi -o $(BIN)/mpi/ $$($(GO) list ./cmd/... ./examples/... | grep -v /cmd/libhvd)

python-mpi: $(PY_SRC)
	mkdir -p build/python-mpi/hvd
	cp -r python/hvd build/python-mpi/
	find build/python-mpi/hvd -name __pycache__ -prune -exec rm -rf {} +
	$(GO) build -tags mpi -buildmode=c-shared -o build/python-mpi/hvd/libhvd.so ./cmd/libhvd

# The MPI data plane's conformance suite under real mpirun (np 2 and 3);
# says so and skips where Open MPI's headers are missing (apt-get install
# openmpi-bin libopenmpi-dev: .ci/setup.d/10-mpi.sh).
# The elastic chaos test's long form (docs/elastic.md, "Chaos"): 10 minutes of
# seeded faults against real workers; prints the table (HVD_CHAOS_SEED repeats
# a run). The short form (45 s of faults) runs in go test.
chaos:
	HVD_CHAOS_SECONDS=$${HVD_CHAOS_SECONDS:-600} $(GO) test -count=1 -timeout 30m -v -run 'TestElasticChaos$$' ./internal/launch

test-mpi:
	@if pkg-config --exists ompi-c 2>/dev/null && command -v mpirun >/dev/null; then \
	  echo "$(GO) test -count=1 -tags mpi -run 'MPI|Mpirun' ./backends/mpi ./sdk/rendezvous"; \
	  $(GO) test -count=1 -tags mpi -run 'MPI|Mpirun' ./backends/mpi ./sdk/rendezvous; \
	else echo "test-mpi: SKIP: no Open MPI development files (pkg-config ompi-c) or mpirun: apt-get install openmpi-bin libopenmpi-dev"; fi

# The test suite (unit, in-process conformance, multi-process end to end).
# build and python first: e2e/readme_test.go runs the README's own lines
# (bin/hvdrun, build/python) as printed. ./e2e is named first: go test
# starts the packages' test binaries in the order named (two at a time on
# two cores), and e2e, the longest by far (~15 minutes), would otherwise
# start after most of the others and run its last ~7 minutes alone; named
# first, the other packages run beside it (their results print after its
# own).
test: build python
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./e2e ./...
	$(MAKE) test-mpi

# Go's race detector over the packages with concurrency of their own (the
# three longest named first: they start first, the short ones fill in).
race:
	$(GO) test -count=1 -race -short -timeout 20m ./backends/tcp ./backends/shm ./backends/hier ./sdk/... ./internal/... ./backends/...

test-short:
	$(GO) test -count=1 -short ./...

# hvdbench sweep for docs/performance.md (run alone: 2-core machines).
bench: build
	bench/run_hvdbench.sh

anchors:
	bench/anchors/run_anchors.sh --np 2

# The scale simulator's tables (docs/performance.md, "Scale"): N = 16, 64,
# 256, 1,024 ranks on hosts of 8, in one process (< 5 minutes on 2 cores).
simulate:
	$(GO) run ./cmd/hvdsim

# hvd.torch vs torch DDP (gloo) step time, Python vs Go allreduce sweep.
bench-python: build python
	bench/python/run.sh

clean:
	rm -rf $(BIN) build
