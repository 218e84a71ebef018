#!/usr/bin/env bash
# Runs the Node client's tests (clients/node, node --test) against $LEASEHOLD_SERVER (default
# redis-server): installs the pinned node-redis 6, 5 and 4, ioredis 6 and 5 (the newest release
# of each major the package claims) and TypeScript from the lockfile, builds with `tsc --strict`
# (the package and a type test), checks that the committed dist/ is what that build made, then
# tests.
set -euo pipefail
cd "$(dirname "$0")/../clients/node"

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules ]; then
  npm ci --silent --no-audit --no-fund
fi
npm run --silent build
# dist/ is committed, so that `npm install <path>` (which builds nothing) gives a working
# package: it must be what src/ builds to.
if git rev-parse --git-dir >/dev/null 2>&1 && [ -n "$(git status --porcelain -- dist)" ]; then
  echo "clients/node/dist is not what src/ builds to: run 'npm run build' there and commit dist/" >&2
  exit 1
fi
# LEASEHOLD_NODE_CLIENTS=all (the default): every test with node-redis 6 and ioredis 6, and all
# but those of what a write that does not count does with the older majors; current: node-redis
# 6 and ioredis 6 only (test/helpers.mjs).
versions=$(node -e 'const v = (name) => require(`./node_modules/${name}/package.json`).version;
  console.log(`node-redis ${v("redis")}, ${v("redis5")} and ${v("redis4")}, ioredis ${v("ioredis")} and ${v("ioredis5")}`);')
echo "--- clients/node with $versions (${LEASEHOLD_NODE_CLIENTS:-all})"
# Four test files at once: the tests mostly wait on servers and timers, each on servers of its own.
node --test --test-concurrency=4 --test-reporter=dot test/
