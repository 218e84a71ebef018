#!/usr/bin/env bash
# Installs each client package the way README.md says, into a fresh project outside the
# repository, from a copy of what a clone has (the files git tracks, no build outputs), and runs
# the README's snippet for that language against a real server with the module; then makes
# each package ready to publish: `npm pack`, `python -m build` (sdist and wheel),
# `cargo package`. Uses $LEASEHOLD_SERVER (default redis-server) and the debug build of the
# module.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${LEASEHOLD_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --loadmodule "$root/target/debug/libleasehold.so" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.05
done
export REDIS_URL="redis://127.0.0.1:$port"

# copy PACKAGE: the tracked files of clients/PACKAGE, as a clone has them, into $work/PACKAGE.
copy() {
  mkdir -p "$work/$1"
  git ls-files -z "clients/$1" | (cd "clients/$1" && sed -z "s|^clients/$1/||" | xargs -0 cp --parents -t "$work/$1")
}

# blocks LANGUAGE: the README's ```LANGUAGE blocks, NUL-separated.
blocks() {
  python3 - "$1" <<'PY'
import re, sys
readme = open("README.md").read()
for block in re.findall(r"```" + sys.argv[1] + r"\n(.*?)```", readme, re.S):
    sys.stdout.write(block + "\0")
PY
}

echo "--- Node: npm install --install-links <path> beside node-redis and ioredis, then the README's JavaScript"
copy node
mkdir "$work/node-app"
(cd "$work/node-app" && npm init -y >/dev/null &&
  npm install --silent --no-audit --no-fund --install-links "$work/node" redis@6.3.1 ioredis@6.0.0)
while IFS= read -r -d '' block; do
  (cd "$work/node-app" && node --input-type=module -e "$block")
done < <(blocks js)
(cd "$work/node" && npm pack --silent --pack-destination "$work" >/dev/null)
# tar fails unless the member is there (a `| grep -q` would end tar with SIGPIPE under pipefail).
tar -tzf "$work"/leasehold-*.tgz package/dist/index.js >/dev/null

echo "--- Python: pip install <path> into a fresh virtualenv, then the README's Python"
copy python
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$work/python" build==1.3.0
while IFS= read -r -d '' block; do
  (cd "$work" && "$work/venv/bin/python" -c "$block")
done < <(blocks python)
"$work/venv/bin/python" -m build --sdist --wheel --outdir "$work/python-dist" "$work/python" >/dev/null
ls "$work"/python-dist/leasehold-*.tar.gz "$work"/python-dist/leasehold-*.whl >/dev/null

echo "--- Rust: a project with a path dependency, then the README's Rust"
copy rust
mkdir -p "$work/rust-app/src"
cat >"$work/rust-app/Cargo.toml" <<TOML
[package]
name = "rust-app"
version = "0.1.0"
edition = "2024"

[dependencies]
leasehold-client = { path = "$work/rust" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
TOML
blocks rust | tr -d '\0' >"$work/rust-app/src/main.rs"
# The workspace's lockfile and target directory: the same dependency versions, already built.
cp Cargo.lock "$work/rust-app/"
CARGO_TARGET_DIR="$root/target" cargo run --quiet --manifest-path "$work/rust-app/Cargo.toml"
# The package's contents; building them is what the run above just did.
cargo package --quiet --allow-dirty --no-verify -p leasehold-client

echo "install-tests: 3 passed, 0 failed"
