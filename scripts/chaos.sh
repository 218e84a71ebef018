#!/usr/bin/env bash
# `make chaos`: tests/chaos.rs for DURATION seconds (the first argument, default 60) on every
# server of the matrix (scripts/servers.sh), or only on $LEASEHOLD_SERVER when it is set.
# Each run prints one summary line; it fails on any token regression. Each server also runs
# tests/failover.rs's long tests at Redis's default timeouts, which `make test` leaves out: a
# person's way out (it stops its Sentinels for a minute), a down-after-milliseconds raised at
# runtime, a Cluster master paused for 60 s then killed, and FAILOVER taken again a minute
# after the Sentinels left; the first server also a failover
# whose first election fails, done at Sentinel's retry six minutes on.
# Holder processes killed with kill -9 while holding with a session are on here
# (LEASEHOLD_CHAOS_KILL_CLIENTS=1, tests/chaos.rs's header; `make test`'s 20 s run leaves them
# out); LEASEHOLD_CHAOS_KILL_CLIENTS=0 leaves them out here too.
# The Sentinels run at down-after-milliseconds 1000; the first server then runs the twin at
# Sentinel's own defaults (down-after-milliseconds 30000, failover-timeout 180000) for at least
# 300 s, where each failover takes half a minute (LEASEHOLD_CHAOS_TIMING=default), and right
# after it its control: the same seed's faults on the same layout without the module
# (LEASEHOLD_CHAOS_CONTROL=1, tests/chaos.rs's header). Both print the seconds in which a
# master took plain SETs; the two lines are printed side by side, and make chaos fails if the
# run with the module had more than 10 % more seconds without than the control (or if the two
# did not follow the same schedule). The seed is LEASEHOLD_CHAOS_SEED, or a new one, printed.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
export LEASEHOLD_CHAOS_KILL_CLIENTS=${LEASEHOLD_CHAOS_KILL_CLIENTS:-1}

cargo build
matrix=$(scripts/servers.sh)
retry=at_sentinels_defaults_a_failover_whose_first_election_fails_is_done_at_the_retry
while read -r name server; do
  echo "=== chaos on $name for $duration s: $("$server" --version)"
  LEASEHOLD_SERVER="$server" LEASEHOLD_CHAOS_SECONDS="$duration" \
    cargo test --test chaos -- --nocapture
  # The long tests at Redis's defaults (#[ignore]: make test leaves them to this run), the
  # six-minute one on the first server only.
  LEASEHOLD_SERVER="$server" cargo test --test failover -- --ignored --skip "$retry"
done <<< "$matrix"
read -r name server <<< "$matrix"
echo "=== a failover whose first election fails, at Sentinel's defaults, on $name"
LEASEHOLD_SERVER="$server" cargo test --test failover -- --ignored --exact --nocapture "$retry"
long=$(( duration > 300 ? duration : 300 ))
seed=${LEASEHOLD_CHAOS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
mkdir -p build
for run in module control; do
  if [ "$run" = module ]; then
    echo "=== chaos on $name for $long s at Sentinel's default timeouts, seed $seed"
    control=0
  else
    echo "=== its control: the same seed ($seed) on the same layout without the module"
    control=1
  fi
  LEASEHOLD_SERVER="$server" LEASEHOLD_CHAOS_SECONDS="$long" LEASEHOLD_CHAOS_TIMING=default \
    LEASEHOLD_CHAOS_SEED="$seed" LEASEHOLD_CHAOS_CONTROL="$control" \
    cargo test --test chaos -- --nocapture 2>&1 | tee "build/chaos-default-$run.log"
done

# What each run printed: its line on plain SETs, the seconds without, and its schedule.
line() { grep -m1 "^$1" "build/chaos-default-$2.log" || { echo "no '$1' line in the $2 run" >&2; exit 1; }; }
without() { line "chaos writable:" "$1" | sed -E 's/.*\(([0-9]+) s without.*/\1/'; }
planned() { line "chaos schedule" "$1" | sed -E 's/.*faults: ?//'; }
module=$(without module)
control=$(without control)
schedule=$(planned module)
read -ra planned_module <<< "$schedule"
schedule=$(planned control)
read -ra planned_control <<< "$schedule"
echo "=== Redis's own availability at Sentinel's defaults, $long s, seed $seed"
echo "  with the module: $(line "chaos writable:" module)"
echo "  the control:     $(line "chaos writable:" control)"
echo "  seconds without a master taking plain SET: $module with the module, $control in the control"
# Each run does as many faults as fit in its time; those both did must be the same.
both=$(( ${#planned_module[@]} < ${#planned_control[@]} ? ${#planned_module[@]} : ${#planned_control[@]} ))
if [ "${planned_module[*]:0:both}" != "${planned_control[*]:0:both}" ]; then
  echo "the two runs did not follow the same schedule:" >&2
  echo "  with the module: ${planned_module[*]}" >&2
  echo "  the control:     ${planned_control[*]}" >&2
  exit 1
fi
echo "  the same schedule: the first $both faults of both runs (${#planned_module[@]} with the module, ${#planned_control[@]} in the control)"
if (( 10 * module > 11 * control )); then
  echo "the module's run had more than 10 % more seconds without a master taking writes than its control ($module > $control + 10 %)" >&2
  exit 1
fi
