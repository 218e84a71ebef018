#!/usr/bin/env bash
# `make fuzz`: runs every libFuzzer target in fuzz/ (cargo fuzz list) for SECONDS each (the
# first argument, default 60). On the stable toolchain, so with `--sanitizer none`: the core is
# safe Rust (#![forbid(unsafe_code)]) and AddressSanitizer needs a nightly compiler; the
# targets build with debug assertions and overflow checks. Installs cargo-fuzz (pinned) when it
# is missing. A failure prints the end of that target's log and stops; libFuzzer leaves the
# input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
mkdir -p target
for target in $(cargo fuzz list); do
  log="target/$target.log"
  if ! cargo fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz target $target failed: see fuzz/$log and fuzz/artifacts/$target/" >&2
    exit 1
  fi
  echo "fuzz $target: $(grep -E '^Done [0-9]+ runs' "$log")"
done
