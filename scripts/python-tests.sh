#!/usr/bin/env bash
# Runs the Python client's tests (clients/python, pytest) against $LEASEHOLD_SERVER (default
# redis-server) with the newest redis-py and with the oldest one the package supports, each in
# a virtualenv of its own under build/venv/, with pinned versions from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

# LEASEHOLD_REDIS_PY: the redis-py versions to test with (default: the current one and the
# oldest the package supports).
for redis_py in ${LEASEHOLD_REDIS_PY:-8.1.0 5.0.0}; do
  venv="build/venv/python-redis-$redis_py"
  if ! "$venv/bin/python" -c "import pytest, xdist" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "redis==$redis_py" pytest==9.2.0 pytest-asyncio==1.5.0 pytest-xdist==3.8.0
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall ./clients/python
  echo "--- clients/python with redis-py $redis_py"
  # Four workers, each taking whole files (a module-scoped cluster is made once): the tests
  # mostly wait on servers and timers, each file on servers of its own.
  (cd clients/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider -n 4 --dist loadfile tests)
done
