# capms: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
CAPMS_CACHE ?= $(HOME)/.cache/capms
export CAPMS_CACHE

.PHONY: all build generate binaries test test-unit bench chaos fuzz controlplane controlplane-down fmt lint release-manifests demo demo-down

all: build

build:
	$(CARGO) build --locked

## Regenerate the committed CRDs from the Rust types.
generate:
	$(CARGO) run --locked --quiet -p capms -- crds --dir manifests/crd
	$(CARGO) run --locked --quiet -p capms -- webhooks > webhooks/manifests.yaml

## Build (only what is missing) the real Kubernetes, etcd and Cluster API binaries.
binaries:
	bash tests/scripts/build.sh >/dev/null

## Every test: unit tests, CRD drift and lint, the integration tests against a real
## kube-apiserver and etcd (built beside the tests when the cache is cold), and the benchmark
## at a tiny size so that it cannot rot. The suites that run workload clusters go in a lane of
## their own beside the others (tests/scripts/run-tests.sh says why).
test:
	CARGO="$(CARGO)" bash tests/scripts/run-tests.sh

## Provisioning and admission at scale, measured (release build) and judged against capms's
## targets (exit 1 when one is missed); the report goes to target/bench. The apiserver keeps
## an audit log of the writes to Machines and MetalStackMachines, to tell which capms write
## preceded each of Cluster API's Machine status conflicts.
## `make bench BENCH_ARGS="--clusters 10 --workers 100 --idle 30 --admission-rate 500 --admission-seconds 5"`
## for 1,000 workers (BENCH_ARGS replaces every default; docs/benchmarks.md lists the sizes).
BENCH_ARGS ?= --clusters 5 --workers 40 --idle 30 --admission-rate 500 --admission-seconds 60
## The whole workspace's binaries in one build: `cargo run -p capms-bench` would unify fewer
## features than the capms binary the benchmark builds, and compile most of it twice.
bench: binaries
	$(CARGO) build --locked --release --workspace --bins
	CAPMS_APISERVER_AUDIT=1 "$${CARGO_TARGET_DIR:-target}/release/capms-bench" $(BENCH_ARGS)

## Fault tolerance at full size, reported in target/chaos/report.txt (each part also in its own
## file there): capms killed (SIGKILL) before and after each of its metal-api calls and
## Kubernetes writes, in a run of 40 workers through provisioning, a firewall rollout, a
## scale-down, a clusterctl move, a Go provider's cluster and the deletion, failing unless every
## write site of tests/controllers/write-sites.txt was killed at before and after; 200 workers provisioned and freed while metal-api fails a
## fifth of the calls, loses answers, times out, drops connections and spikes; 40 workers through
## a kube-apiserver kill with etcd compacted (410 Gone), a leader kill and 30 s of 409 Conflict
## on every write. `make test` runs each at 2 or 3 workers.
CHAOS_WORKERS ?= 40
CHAOS_FAULT_WORKERS ?= 200
CHAOS_KUBE_FAULT_WORKERS ?= 40
chaos: binaries
	mkdir -p target/chaos
	rm -f target/chaos/*.txt
	CAPMS_CRASH_WORKERS=$(CHAOS_WORKERS) CAPMS_CRASH_READS=1 \
	CAPMS_CRASH_REPORT=$(CURDIR)/target/chaos/crash-points.txt \
	$(CARGO) test --locked -p capms-tests --test controllers crash_points -- --nocapture
	CAPMS_FAULT_WORKERS=$(CHAOS_FAULT_WORKERS) CAPMS_FAULT_REPORT=$(CURDIR)/target/chaos/metal-faults.txt \
	$(CARGO) test --locked -p capms-tests --test controllers metal_faults -- --nocapture
	CAPMS_KUBE_FAULT_WORKERS=$(CHAOS_KUBE_FAULT_WORKERS) CAPMS_KUBE_FAULT_REPORT=$(CURDIR)/target/chaos/kube-faults.txt \
	$(CARGO) test --locked -p capms-tests --test controllers kube_faults -- --nocapture
	{ echo "# make chaos, $$(date -u +%FT%TZ)"; echo; echo "## Kubernetes faults"; cat target/chaos/kube-faults.txt; \
	  echo; echo "## metal-api faults"; cat target/chaos/metal-faults.txt; \
	  echo; echo "## Crash points (totals; every write site of the product, killed at before and after its write or NEVER; each kill)"; cat target/chaos/crash-points.txt; \
	  echo; echo "## Crash points of a cluster on API v2"; cat target/chaos/crash-points-over-API-v2.txt; } \
	  > target/chaos/report.txt
	head -20 target/chaos/report.txt

## The fuzz tests longer than `make test` runs them: 200,000 generated admission reviews and
## metal-api answers of each sort instead of 10,000.
FUZZ_CASES ?= 200000
fuzz:
	FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --locked --release -p capms-tests --test fuzz -- --nocapture

## Tests that need no binaries: every crate's unit tests.
test-unit:
	$(CARGO) test --workspace --locked --lib --bins

## Start a local control plane (etcd, kube-apiserver, kube-controller-manager) for a person.
controlplane: binaries
	bash tests/scripts/controlplane.sh start .controlplane

controlplane-down:
	bash tests/scripts/controlplane.sh stop .controlplane

fmt:
	$(CARGO) fmt --all

## Formatting, clippy, and the house rules of docs/architecture.md (layers, no import circles).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --locked --all-targets -- -D warnings
	$(CARGO) test --locked --quiet -p capms --test layers

## The clusterctl release files (infrastructure-components.yaml, metadata.yaml,
## cluster-template.yaml) in out/release.
release-manifests:
	bash manifests/release.sh out/release

## The whole flow locally: control plane, simulator, capms, Cluster API, a cluster with two
## workers; it keeps running until `make demo-down`. `make demo TEMPLATE=go-provider` applies
## metal-stack's Go provider's own cluster template instead of capms's; `make demo API=v2` gives
## the cluster a metal-apiserver project token (metal-stack's API v2) instead of metal-api's key.
demo:
	CAPMS_DEMO_TEMPLATE="$${CAPMS_DEMO_TEMPLATE:-$(TEMPLATE)}" CAPMS_DEMO_API="$${CAPMS_DEMO_API:-$(API)}" \
	  bash tests/scripts/demo.sh up

demo-down:
	bash tests/scripts/demo.sh down
