# leasehold — distributed locks as a Redis module. `make help` lists the targets.

PORT ?= 6379
DURATION ?= 60
FUZZ_SECONDS ?= 60
MODULE := target/release/libleasehold.so

.PHONY: help deps build test chaos fuzz run bench fmt lint

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

deps: ## install what is missing: redis-server, redis-cli, libclang, pip, venv, Node.js (Debian packages)
	@scripts/install-deps.sh

build: deps ## build the module: target/release/libleasehold.so
	cargo build --release

test: deps ## build, then run every test (module, Rust, Python and Node clients) on Redis 7.0, 8.2 and Valkey 8.1 (or LEASEHOLD_SERVER)
	scripts/test.sh

chaos: deps ## fencing under random crashes, pauses, partitions and Sentinel failovers for $(DURATION) s on each server (or LEASEHOLD_SERVER), then at least 300 s at Sentinel's default timeouts beside its control without the module
	scripts/chaos.sh $(DURATION)

fuzz: ## run every libFuzzer target in fuzz/ for $(FUZZ_SECONDS) s each (cargo fuzz, installed if missing)
	scripts/fuzz.sh $(FUZZ_SECONDS)

run: build ## start redis-server on 127.0.0.1:$(PORT) with the module loaded, in the foreground
	redis-server --port $(PORT) --bind 127.0.0.1 --save "" --appendonly no \
		--loadmodule $(CURDIR)/$(MODULE) --enable-module-command yes

bench: build ## measure against SET NX PX, the Lua scripts it replaces and Redisson's; writes BENCHMARKS.md
	scripts/install-deps.sh bench
	scripts/bench.py

fmt: ## format the code
	cargo fmt --all
	cargo fmt --manifest-path fuzz/Cargo.toml

lint: ## formatting and clippy, warnings as errors
	cargo fmt --all --check
	cargo fmt --manifest-path fuzz/Cargo.toml --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --manifest-path fuzz/Cargo.toml -- -D warnings
