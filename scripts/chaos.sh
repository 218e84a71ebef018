#!/usr/bin/env bash
# `make chaos`: tests/chaos.rs for DURATION seconds (the first argument, default 60) on every
# server of the matrix (scripts/servers.sh), or only on $LEASEHOLD_SERVER when it is set.
# Each run prints one summary line; it fails on any token regression. Each server also runs
# tests/failover.rs's test of a person's way out at Sentinel's defaults, which `make test`
# leaves out (it stops its Sentinels for a minute).
# Holder processes killed with kill -9 while holding with a session are on here
# (LEASEHOLD_CHAOS_KILL_CLIENTS=1, tests/chaos.rs's header; `make test`'s 20 s run leaves them
# out); LEASEHOLD_CHAOS_KILL_CLIENTS=0 leaves them out here too.
# The Sentinels run at down-after-milliseconds 1000; the first server then runs the twin at
# Sentinel's own defaults (down-after-milliseconds 30000, failover-timeout 180000) for at least
# 300 s, where each failover takes half a minute (LEASEHOLD_CHAOS_TIMING=default).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
export LEASEHOLD_CHAOS_KILL_CLIENTS=${LEASEHOLD_CHAOS_KILL_CLIENTS:-1}

cargo build
matrix=$(scripts/servers.sh)
while read -r name server; do
  echo "=== chaos on $name for $duration s: $("$server" --version)"
  LEASEHOLD_SERVER="$server" LEASEHOLD_CHAOS_SECONDS="$duration" \
    cargo test --test chaos -- --nocapture
  # A person's way out at Sentinel's defaults: make test leaves it to this run.
  LEASEHOLD_SERVER="$server" cargo test --test failover -- \
    at_sentinels_defaults_a_persons_promotion_after_the_leases_ended_works
done <<< "$matrix"
read -r name server <<< "$matrix"
long=$(( duration > 300 ? duration : 300 ))
echo "=== chaos on $name for $long s at Sentinel's default timeouts"
LEASEHOLD_SERVER="$server" LEASEHOLD_CHAOS_SECONDS="$long" LEASEHOLD_CHAOS_TIMING=default \
  cargo test --test chaos -- --nocapture
