#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, run by `make fuzz`), then runs the lock rules' tests with no server (leasehold-core: unit tests, the fencing simulation
# and the model-based test of the hand-over), the unit tests, doctests and the
# install-as-documented tests of the client packages (scripts/install-tests.sh) once, then against every server of the matrix
# (scripts/servers.sh), or only against $LEASEHOLD_SERVER when it is set: the integration tests
# of the module and of the Rust client (clients/rust is a member of the Cargo workspace, so
# `cargo test --workspace` runs its tests), and the tests of the Python and Node clients.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's time, so that a CI log shows where the 20 minutes go.
stage() {
  local started=$SECONDS
  "$@"
  echo "=== $(( SECONDS - started )) s: $*"
}

stage cargo build --workspace --all-targets
# The fuzz targets (run by `make fuzz`) must still build.
stage cargo build --manifest-path fuzz/Cargo.toml
stage cargo test -p leasehold-core
cargo test --workspace --exclude leasehold-core --lib
cargo test --workspace --doc
stage scripts/install-tests.sh

# tests/failover.rs waits out real Sentinel and Cluster timers, Redis's own defaults among them
# (about 90 s, mostly asleep): its binary runs in the background beside each server's Python and
# Node suites (beside the other Sentinel tests, their elections failed under the load), not
# after them, its servers on ports of their own (LEASEHOLD_TEST_PORTS, below the kernel's
# ephemeral range the other suites' servers come from): a port it frees is never another
# suite's server, which its replicas or Sentinels would reach. It is run directly: cargo holds
# its build lock while it runs tests.
# The test binaries, built: tests/failover.rs apart, the others run in two lanes
# (scripts/run-tests.py). Run directly: cargo holds its build lock while it runs tests.
tests=()
for name in $(basename -s .rs tests/*.rs clients/rust/tests/*.rs | sort -u); do
  tests+=(--test "$name")
done
executables=$(cargo test --workspace --exclude leasehold-core "${tests[@]}" --no-run \
    --message-format=json 2>/dev/null |
  python3 -c 'import json, os, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["target"]["kind"] == ["test"] and message.get("executable"):
        source = os.path.relpath(message["target"]["src_path"]).removesuffix(".rs")
        print(source + "=" + message["executable"])')
failover=$(sed -n 's|^tests/failover=||p' <<< "$executables")
mapfile -t binaries < <(grep -v '^tests/failover=' <<< "$executables")
integration_tests() { scripts/run-tests.py 2 -- "${binaries[@]}" -- "$@"; }
mkdir -p build

matrix=$(scripts/servers.sh)
# Four tests of a binary at once, as the Python and Node suites run four files: the integration
# tests mostly wait on servers, Sentinel and timers, and cargo's default (one per core) left
# two cores idle (130 s to 95 s per server here). For the same reason two binaries run at once,
# each lane on ports of its own (scripts/run-tests.py, which prints each binary's time).
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
# On the first server only, to keep `make test` near 20 minutes on two cores: every major
# version of redis-py, node-redis and ioredis the packages allow, and the oldest redis-py
# (the newest of each runs the whole suite on every server; the others the session, blip,
# failover and waiting tests: scripts/python-tests.sh, clients/node/test/helpers.mjs), and the
# 20 s `make chaos` run (tests/chaos.rs; `make chaos` runs it on every server).
export LEASEHOLD_REDIS_PY="8.1.0 7.4.1 6.4.0 5.3.1 5.0.0" LEASEHOLD_NODE_CLIENTS=all
skip=()
# The tests of tests/failover.rs that take a minute or more at Redis's defaults are marked
# #[ignore]: `make chaos` runs them (scripts/chaos.sh).
while read -r name server; do
  echo "=== integration tests on $name: $("$server" --version)"
  export LEASEHOLD_SERVER="$server"
  stage integration_tests "${skip[@]}"
  started=$SECONDS
  LEASEHOLD_TEST_PORTS=20000-29999 "$failover" > "build/failover-$name.log" 2>&1 &
  failover_pid=$!
  trap 'kill "$failover_pid" 2>/dev/null || true' EXIT
  stage scripts/python-tests.sh
  stage scripts/node-tests.sh
  if ! wait "$failover_pid"; then
    cat "build/failover-$name.log"
    exit 1
  fi
  grep -E '^test result' "build/failover-$name.log"
  echo "=== $(( SECONDS - started )) s: tests/failover.rs (beside the above)"
  export LEASEHOLD_REDIS_PY="8.1.0" LEASEHOLD_NODE_CLIENTS=current
  skip=(--skip fencing_holds_under_random_crashes)
done <<< "$matrix"
echo "=== make test took $SECONDS s"
