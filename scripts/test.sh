#!/usr/bin/env bash
# Runs the unit tests once, then the integration tests against every server of the matrix
# (scripts/servers.sh), or only against $LEASEHOLD_SERVER when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --all-targets
cargo test --lib

if [ -n "${LEASEHOLD_SERVER:-}" ]; then
  matrix="custom $LEASEHOLD_SERVER"
else
  matrix=$(scripts/servers.sh)
fi
while read -r name server; do
  echo "=== integration tests on $name: $("$server" --version)"
  LEASEHOLD_SERVER="$server" cargo test --test '*'
done <<< "$matrix"
