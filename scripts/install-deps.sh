#!/usr/bin/env bash
# Installs what building, running and testing leasehold needs and this machine lacks, from
# Debian's packages: redis-server, redis-cli (redis-tools), libclang (bindgen,
# which redis-module runs at build time, loads it), pip and venv (the test matrix fetches
# Redis 8.2 and Valkey 8.1 from PyPI wheels; the Python client is tested in virtualenvs),
# Node.js with npm (the Node client), and the openssl command (the TLS tests make their
# certificates with it); with the argument `bench`, also valgrind (the
# benchmark's instruction counts). Rust itself comes from rustup.
set -euo pipefail

command -v cargo >/dev/null || { echo "cargo is missing: install Rust from https://rustup.rs" >&2; exit 1; }

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v openssl >/dev/null || missing+=(openssl)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
python3 -c "import ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${1:-}" = bench ]; then
  command -v valgrind >/dev/null || missing+=(valgrind)
fi
if command -v dpkg-query >/dev/null; then
  dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "install ok installed" || missing+=(libclang-dev)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "Please install: ${missing[*]} (not a Debian-like system, so not installing them here)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "Installing ${missing[*]} from Debian's packages"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
