# paddock's build. `make test` is the README's test command and what CI runs.
GO        ?= /usr/local/go/bin/go
export PATH := /usr/local/go/bin:$(PATH)
# The Go release paddock is built and tested with: the go command fetches it through the
# module proxy once (golang.org/toolchain) whatever Go is installed, so that the standard
# library's security fixes are in every build (make vuln checks).
export GOTOOLCHAIN := go1.26.11
PADDOCK_PREFIX ?= /usr/local/lib/paddock
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/paddockhq/paddock/internal/cli.Version=$(VERSION)
AGENTLDFLAGS := -X github.com/paddockhq/paddock/internal/agent.Version=$(VERSION)
FUZZTIME  ?= 10s

.PHONY: all setup build test unit lint vuln fuzz bench clean proto desktop

all: build

# setup installs what paddock needs on this machine at pinned versions (idempotent).
setup:
	@scripts/setup.sh

# AGENTTAGS: grpcnotrace leaves out grpc's request tracing (golang.org/x/net/trace, and
# html/template with it), which the agent never serves: less for every idle sandbox's
# agent to map (table 4 of docs/benchmarks.md).
AGENTTAGS ?= grpcnotrace

# CLITAGS: the CLI serves no grpc, so it leaves grpc's request tracing out as the agent does.
CLITAGS ?= grpcnotrace

# The binaries are static (CGO_ENABLED=0; nothing in paddock needs cgo: SQLite is
# modernc's Go): no dynamic loader at each start, about 0.4 ms of every `paddock` command,
# and a CLI that runs on any Linux of its architecture. paddock links no package of the
# control plane (cmd/paddock's TestLean); paddock-server, beside it, runs the commands
# that need them (serve, admin, the key rotations), which paddock hands to it.

build:
	CGO_ENABLED=0 $(GO) build -tags '$(CLITAGS)' -ldflags '$(LDFLAGS)' -o bin/paddock ./cmd/paddock
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/paddock-server ./cmd/paddock-server
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(AGENTTAGS)' -ldflags '$(AGENTLDFLAGS)' -o bin/paddock-agent ./cmd/paddock-agent
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/paddock-exec ./cmd/paddock-exec

# test is the whole suite: vet, every package's tests with the race detector (privileged
# ones run for real as root), the containment suite a second time with its sandboxes under
# runsc (gVisor) instead of runc, the backend conformance suite and the containment
# suite's guest probes on the microVM tier, and a short run of every fuzz target. The
# microvm tag adds that tier to the conformance suite (internal/runner), a guest boot per
# test; it runs on its own after the rest, so that its guests do not share the cores with
# the other packages' microVM tests (see docs/limitations.md, microvm). The kube tag adds
# the backend on a Kubernetes cluster: the conformance suite and the cluster's own tests on
# the test cluster (internal/testenv/kube), started once per package, and the scale test
# on its simulated nodes at 100 sandboxes (-short; without it, 1,000: docs/kubernetes.md),
# and the shipped NetworkPolicy on a cluster that enforces it (kube-router's firewall).
TESTTAGS ?= microvm kube

test: setup build
	$(GO) vet -tags '$(TESTTAGS)' ./...
	@$(MAKE) --no-print-directory lint vuln
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -race -count=1 -timeout 10m ./internal/containment -args -runtime=runsc
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -timeout 20m -run '/microvm' ./internal/runner
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -timeout 10m -run 'TestMicroVM' ./internal/containment
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -timeout 20m -run '/kubernetes|TestCluster' ./internal/runner
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -timeout 20m -run 'TestServeOnCluster|TestEvictedOnCluster|TestServicesOnCluster|TestHistoryOnCluster|TestReplicasTakeOverOnCluster|TestNodeLostOnCluster' ./internal/server
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -short -timeout 20m -run 'TestScale' ./internal/sandbox/kube
	$(GO) test -race -count=1 -tags '$(TESTTAGS)' -timeout 20m ./internal/sandbox/kube/netpol
	@$(MAKE) --no-print-directory fuzz

# lint runs golangci-lint with .golangci.yml (setup installs the pinned version).
lint:
	$(PADDOCK_PREFIX)/bin/golangci-lint run --allow-parallel-runners --build-tags '$(TESTTAGS)' ./...

# vuln reports known vulnerabilities that paddock's code reaches, in its modules and in the
# standard library of GOTOOLCHAIN, from the database snapshot setup indexed.
vuln:
	$(PADDOCK_PREFIX)/bin/govulncheck -db file://$(PADDOCK_PREFIX)/vulndb/current ./...

unit:
	$(GO) test -count=1 ./...

# fuzz runs each fuzz target for FUZZTIME.
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

bench: setup build
	$(GO) run ./internal/bench/cmd -out docs/benchmarks.md

# desktop rebuilds the sandbox desktop's page (web/desktop) into internal/agent/desktop/dist,
# which is committed, so `make build` needs no npm: npm ci installs the packages the
# lockfile pins, esbuild bundles them, and the build fails past 400 KB gzipped.
desktop:
	cd web/desktop && npm ci --no-audit --no-fund && node build.mjs

proto:
	PATH=$$($(GO) env GOPATH)/bin:$$PATH protoc -I proto --go_out=. --go_opt=module=github.com/paddockhq/paddock \
		--go-grpc_out=. --go-grpc_opt=module=github.com/paddockhq/paddock proto/paddock/agent/v1/agent.proto

clean:
	rm -rf bin
