#!/usr/bin/env python3
"""Runs test binaries in lanes side by side: `run-tests.py LANES -- NAME=BINARY... -- ARG...`.

`cargo test` runs its test binaries one after the other, and the integration tests mostly wait
on servers, Sentinel and timers, so one binary at a time leaves the machine idle while a long
test of a binary finishes. Here each lane runs one binary at a time, the longest first (by the
times of the last run, kept in build/test-times.json), with ARG... (`--skip name`); a lane's
servers take ports from a range of its own (`LEASEHOLD_TEST_PORTS`, below the kernel's
ephemeral ports, and apart from the 20000-29999 of tests/failover.rs beside), so a port a
binary frees is never another lane's server that its replicas or Sentinels would reach.

NAME names the binary (`leasehold/insync`: two packages may have tests of the same name). Its
output goes to build/tests/<NAME with `_` for `/`>.log, printed when it fails; the run prints
each binary's time, and fails when any failed.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time

TIMES = "build/test-times.json"
PORT_RANGES = ["10000-14999", "15000-19999", "30000-32767"]


def main() -> int:
    lanes = int(sys.argv[1])
    rest = sys.argv[3:]
    split = rest.index("--")
    binaries, args = rest[:split], rest[split + 1:]
    os.makedirs("build/tests", exist_ok=True)
    try:
        with open(TIMES) as file:
            last = json.load(file)
    except (OSError, ValueError):
        last = {}
    binaries = [binary.split("=", 1) for binary in binaries]
    binaries.sort(key=lambda binary: -last.get(binary[0], 0))
    work = queue.Queue()
    for binary in binaries:
        work.put(binary)
    times, failed, lock = {}, [], threading.Lock()

    def lane(ports: str) -> None:
        env = dict(os.environ, LEASEHOLD_TEST_PORTS=ports)
        while True:
            try:
                name, path = work.get_nowait()
            except queue.Empty:
                return
            log = f"build/tests/{name.replace('/', '_')}.log"
            started = time.monotonic()
            with open(log, "w") as out:
                code = subprocess.call([path, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
            with lock:
                times[name] = round(time.monotonic() - started, 1)
                if code != 0:
                    failed.append(log)

    threads = [threading.Thread(target=lane, args=(PORT_RANGES[i],)) for i in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with open(TIMES, "w") as file:
        json.dump({**last, **times}, file, indent=0, sort_keys=True)
    print(" ".join(f"{test} {seconds} s" for test, seconds in sorted(times.items(), key=lambda t: -t[1])))
    for log in failed:
        with open(log) as file:
            sys.stdout.write(file.read())
        print(f"FAILED: {log}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
