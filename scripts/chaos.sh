#!/usr/bin/env bash
# `make chaos`: tests/chaos.rs for DURATION seconds (the first argument, default 60) on every
# server of the matrix (scripts/servers.sh), or only on $LEASEHOLD_SERVER when it is set.
# Each run prints one summary line; it fails on any token regression.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}

cargo build
matrix=$(scripts/servers.sh)
while read -r name server; do
  echo "=== chaos on $name for $duration s: $("$server" --version)"
  LEASEHOLD_SERVER="$server" LEASEHOLD_CHAOS_SECONDS="$duration" \
    cargo test --test chaos -- --nocapture
done <<< "$matrix"
