#!/usr/bin/env bash
# Every test of the workspace, in two lanes at once (what `make test` runs):
#   - the suites that run workload clusters on the simulator's loopback addresses (kubeadm,
#     clusterctl_move), one after the other: two simulators hand out the same addresses, and
#     their workload clusters' processes would bind them twice; then e2e, which evens out the
#     lanes' lengths (in CI: lane 1 ended 3.5 min after lane 2 with management in it too);
#   - everything else: unit tests, doc tests, the other suites, then the tiny benchmark.
# Both lanes mostly wait on Cluster API's queues and the simulated lifecycle rather than on the
# two cores, so running them side by side saves most of the shorter one's time.
# Each lane picks its ports from a range of its own (CAPMS_TEST_PORTS). The Go binaries are
# built (only what is missing) while cargo builds the tests, and the lanes start without
# waiting for them: a test that needs them waits for tests/scripts/build.sh's lock, and the
# suites that do not (quick_suites) run meanwhile. Exit status: 1 when a lane failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
cargo=${CARGO:-cargo}
workload_suites=(kubeadm clusterctl_move)
lane_1_suites=("${workload_suites[@]}" e2e)
quick_suites=(layers api fuzz reconcile)
logs=target/test-lanes
mkdir -p "$logs"
stamp() { printf '[run-tests %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

set -m
bash tests/scripts/build.sh >/dev/null &
binaries=$!
set +m
trap 'kill -- "-$binaries" 2>/dev/null' EXIT
stamp "building the tests and the workspace's binaries (and the Go binaries beside them)"
# The binaries too (the benchmark's, the simulator's): the tests and the benchmark build them
# with the same features (test-support's workspace_binary), so the lanes compile nothing.
$cargo test --workspace --locked --no-run && $cargo build --workspace --locked --bins || exit 1

# Every test target of the workspace but lane 1's and the quick ones, as `--test NAME`.
# shellcheck disable=SC2207
lane_2_suites=($($cargo metadata --locked --no-deps --format-version 1 | python3 -c '
import json, sys
skip = set(sys.argv[1:])
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"] and target["name"] not in skip:
            print("--test", target["name"])
' "${lane_1_suites[@]}" "${quick_suites[@]}"))

lane_1() {
  local suites=()
  for suite in "${lane_1_suites[@]}"; do suites+=(--test "$suite"); done
  CAPMS_TEST_PORTS=20000-26000 $cargo test --workspace --locked --no-fail-fast "${suites[@]}"
}

lane_2() {
  local failed=0
  local -x CAPMS_TEST_PORTS=26000-32000
  local quick=()
  for suite in "${quick_suites[@]}"; do quick+=(--test "$suite"); done
  $cargo test --workspace --locked --no-fail-fast --lib --bins "${quick[@]}" || failed=1
  $cargo test --workspace --locked --no-fail-fast "${lane_2_suites[@]}" || failed=1
  $cargo test --workspace --locked --no-fail-fast --doc || failed=1
  CAPMS_APISERVER_AUDIT=1 "${CARGO_TARGET_DIR:-target}/debug/capms-bench" --ideal reported --out target/bench-tiny ||
    failed=1
  # A cluster on API v2 whose token lives 20 s: capms must refresh it as it goes, or the run
  # misses its targets (or cannot free what it allocated).
  "${CARGO_TARGET_DIR:-target}/debug/capms-bench" --api v2 --token-lifetime 20 --no-baseline \
    --out target/bench-tiny-v2 || failed=1
  return "$failed"
}

# Lane 1 streams its lines prefixed with "[lane 1]" (and keeps them in its log); it runs in a
# process group of its own, ended with this script.
stamp "lane 1: ${lane_1_suites[*]} (its lines prefixed; also in $logs/lane-1.log)"
set -m
(
  lane_1 2>&1 | tee "$logs/lane-1.log" | sed -u 's/^/[lane 1] /'
  exit "${PIPESTATUS[0]}"
) &
lane_1_pid=$!
set +m
trap 'kill -- "-$lane_1_pid" "-$binaries" 2>/dev/null' EXIT
stamp "lane 2: everything else"
lane_2
lane_2_status=$?
stamp "lane 2 done (status $lane_2_status); waiting for lane 1"
wait "$lane_1_pid"
lane_1_status=$?
stamp "lane 1 done (status $lane_1_status)"
wait "$binaries"
binaries_status=$?
trap - EXIT
[ "$binaries_status" -eq 0 ] || echo "tests/scripts/build.sh failed (status $binaries_status)" >&2
[ "$lane_1_status" -eq 0 ] && [ "$lane_2_status" -eq 0 ] && [ "$binaries_status" -eq 0 ]
