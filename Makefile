# rollstore: `make run` serves on a local folder; `make test` is what CI runs.
GO       ?= go
PKGS     ?= ./...
AZURITE  := ./test/azurite/azurite.sh
TIMEOUT  ?= 25m
# The manifest tests are a module of their own (deploy/k8s/go.mod), so that
# kustomize, kube-score and k8s.io/api stay out of the service's go.mod;
# `go test ./...` at the root does not descend into it.
K8S      := deploy/k8s
# The alerting rules' and the dashboard's tests (promtool: Debian's package,
# pinned, unpacked into the user's cache by deploy/prometheus/promtool.sh; else
# the one pinned in its go.mod's tool directive, built) are a module of their own too
# (deploy/prometheus/go.mod): github.com/prometheus/prometheus is heavy, and
# needs a newer k8s.io/api than deploy/k8s can take.
PROM     := deploy/prometheus

# What `rollstore version` and rollstore_build_info report.
BIN      ?= bin/rollstore
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/rollstore/rollstore/internal/version
LDFLAGS  := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)

.PHONY: all build run test unit lint sim soak sim-mutants bench bench-latency bench-partitions bench-feed fixture azurite-install clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/rollstore

# The embedded default: a local folder under ./data, one shard, in-process merger.
run:
	$(GO) run ./cmd/rollstore serve

# gofmt; the documents' relative links and anchors; go vet; staticcheck
# (pinned in go.mod's tool directive); and golangci-lint for errcheck only (pinned in tools/go.mod; .golangci.yml
# records the deliberate unchecked errors), in all three modules.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	python3 test/doclinks/doclinks.py
	$(GO) vet $(PKGS)
	cd $(K8S) && $(GO) vet ./...
	cd $(PROM) && $(GO) vet ./...
	$(GO) tool staticcheck $(PKGS)
	cd $(K8S) && "$$(cd ../.. && $(GO) tool -n staticcheck)" ./...
	cd $(PROM) && "$$(cd ../.. && $(GO) tool -n staticcheck)" ./...
	"$$(cd tools && $(GO) tool -n golangci-lint)" run $(PKGS)
	cd $(K8S) && "$$(cd ../../tools && $(GO) tool -n golangci-lint)" run ./...
	cd $(PROM) && "$$(cd ../../tools && $(GO) tool -n golangci-lint)" run ./...

# Everything, under -race, with the Azure backend against a real Azurite that
# the harness installs (pinned), starts on a free port and stops by PID. With
# ROLLSTORE_REQUIRE_AZURITE=1 a missing Azurite fails the Azure tests instead
# of skipping them.
# Then the manifest tests' module (kustomize, kube-score, k8s.io/api; it
# builds the image's binary and runs it as the manifests configure it),
# without -race: they run no concurrent code of the service in-process.
# Then the monitoring module: the dashboard's and the rules' PromQL parses
# and names only metrics a running rollstore exports (it builds the binary
# and scrapes it after traffic), and `promtool test rules` passes (with
# ROLLSTORE_REQUIRE_PROMTOOL=1, a promtool that cannot be had fails
# instead of skipping).
# Last, the engine's deterministic simulation at full size (under -race it
# runs only a few seeds).
test: lint
	$(AZURITE) run -- env ROLLSTORE_REQUIRE_AZURITE=1 $(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)
	cd $(K8S) && $(GO) test -count=1 -timeout $(TIMEOUT) ./...
	cd $(PROM) && ROLLSTORE_REQUIRE_PROMTOOL=1 $(GO) test -count=1 -timeout $(TIMEOUT) ./...
	$(MAKE) sim

# The engine's deterministic simulation: SEEDS seeds from FIRST (a failure
# prints its seed and the command that replays it exactly). `make sim` is
# what `make test` runs; `make soak SEEDS=100000` runs more.
SEEDS ?= 2000
FIRST ?= 1
sim:
	$(GO) test -count=1 -timeout 60m -run 'TestSimulation$$' ./engine/ -sim.seeds=$(SEEDS) -sim.first=$(FIRST) -v
soak: SEEDS = 100000
soak: sim

# Checks that the simulation finds known kinds of bug: each is introduced in a
# scratch copy and must fail the simulation within its make-test budget.
sim-mutants:
	python3 test/simcheck/mutants.py

# Unit tests only (no Azurite; Azure tests skip; promtool skips where it
# cannot be built).
unit:
	$(GO) test -race -count=1 $(PKGS)
	cd $(K8S) && $(GO) test -count=1 ./...
	cd $(PROM) && $(GO) test -count=1 ./...

# Benchmarks: cmd/rollbench against a fresh Azurite, rollstore vs the raw
# Azure SDK in the same run (appends, memory, reads, lookups against the
# backlog and the number of writer shards with writers and a merger in
# processes of their own, partitioned tables, the change feed, 10 minutes
# of merges under sustained writes);
# prints a markdown report, the performance goal table first, and rewrites
# BENCHMARKS.md with its SVG figures in bench/, drawn by rollbench from the
# run's data (≲ 20 min). `make bench BENCH_FLAGS=-quick` is a < 90 s smoke
# run that only prints.
BENCH_FLAGS ?=
bench:
	$(AZURITE) run -- $(GO) run ./cmd/rollbench $(BENCH_FLAGS)

# The scaling tables (lookups against the backlog and the number of writer
# shards) on objstore/latency's model of Azure Blob Storage instead of
# Azurite: requests served in parallel, as on Azure. No Azurite; rewrites
# the "Latency model" section of BENCHMARKS.md and its figures in bench/
# (a few minutes).
# `make bench-latency BENCH_FLAGS=-quick` only prints (< 1 min).
bench-latency:
	$(GO) run ./cmd/rollbench -store latency $(BENCH_FLAGS)

# The partitions phase alone (part of `make bench`): absent lookups with
# writers active on the latency model (writers × partitions grid) and on
# Azurite, store calls per append, an append through a non-owner against
# one through the owner, and sustained writes with merges from 3 and 16
# writers (BENCH_FLAGS=-part-sustain=10m for the issue's 10 minutes each).
# Rewrites the "Partitions" section of BENCHMARKS.md and its figure (≈ 10 min);
# BENCH_FLAGS=-quick is a smoke run that only prints.
bench-partitions:
	$(AZURITE) run -- $(GO) run ./cmd/rollbench -phases partitions $(BENCH_FLAGS)

# The feed phase alone (part of `make bench`): freshness of a long-polling
# consumer in the owner's process and in another (two poll intervals)
# against a raw PUT + GET, whole-table reads with and without payloads
# against raw GETs and Table.Scan, before and after the WAL is merged, and
# the store calls of 1 … 100 consumers long-polling an idle table.
# Rewrites the "Feed" section of BENCHMARKS.md (≈ 5 min);
# BENCH_FLAGS=-quick is a smoke run that only prints.
bench-feed:
	$(AZURITE) run -- $(GO) run ./cmd/rollbench -phases feed $(BENCH_FLAGS)

# The staging fixture (rollstore fixture) against a fresh Azurite, as an
# operator runs it against a storage account, sized for Azurite on a small
# machine (1 × 300 MB and 1,000 × 53,248 B, ≈ 2–3 min; the full defaults,
# FIXTURE_FLAGS=, are meant for a real storage account). FIXTURE_FLAGS
# replaces the sizing flags and may add any other (rollstore fixture --help).
FIXTURE_FLAGS ?= --large-count 1 --small-count 1000
fixture:
	$(AZURITE) run -- sh -c 'ROLLSTORE_AZURE_CONNECTION_STRING="$$ROLLSTORE_AZURITE_CONNECTION_STRING" exec $(GO) run ./cmd/rollstore fixture \
		--store azure --azure-auth connection-string --azure-container fixture --azure-create-container $(FIXTURE_FLAGS)'

azurite-install:
	$(AZURITE) install

clean:
	rm -rf bin
