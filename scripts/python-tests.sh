#!/usr/bin/env bash
# Runs the Python client's tests (clients/python, pytest) against $LEASEHOLD_SERVER (default
# redis-server) with several redis-py versions, each in a virtualenv of its own under
# build/venv/, with pinned versions from PyPI: the whole suite with the first version, and the
# tests marked every_redis_py with the others — sessions, a network blip, a replica lost for
# good, the pipeline's rules, and waits (clients/python/pyproject.toml lists the markers).
set -euo pipefail
cd "$(dirname "$0")/.."

# LEASEHOLD_REDIS_PY: the redis-py versions to test with, the first with the whole suite
# (default: the newest release of each major version the package allows, redis>=5.0, newest
# first, and the oldest release it claims).
selection=()
for redis_py in ${LEASEHOLD_REDIS_PY:-8.1.0 7.4.1 6.4.0 5.3.1 5.0.0}; do
  venv="build/venv/python-redis-$redis_py"
  if ! "$venv/bin/python" -c "import pytest, xdist" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "redis==$redis_py" pytest==9.2.0 pytest-asyncio==1.5.0 pytest-xdist==3.8.0
  fi
  echo "--- clients/python with redis-py $redis_py ${selection[*]}"
  # The package from its source, not installed (2.4 s a version: scripts/install-tests.sh
  # installs it as the README says). Six workers, each taking whole files (a module-scoped
  # cluster is made once) in the order tests/conftest.py gives, the long ones first: the tests
  # mostly wait on servers and timers, each file on servers of its own.
  (cd clients/python && PYTHONPATH="$PWD/src" "../../$venv/bin/python" -m pytest -q \
    -p no:cacheprovider -n 6 --dist loadfile --no-loadscope-reorder "${selection[@]}" tests)
  selection=(-m every_redis_py)
done
