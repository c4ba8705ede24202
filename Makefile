# Two commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv and install the pinned working set first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
LAKE   ?= lake

# Prefect's local server needs time to start on two cores, and must not phone home.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_LOGGING_LEVEL ?= WARNING

.PHONY: setup demo test test-quick test-later lint bench bench-peers clean

# pip shows each package as it comes: the first install takes a few minutes, later ones none.
$(STAMP): pyproject.toml constraints.txt
	@echo "Installing the pinned working set into $(VENV) (the first time takes a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -c constraints.txt -e ".[dev]"
	touch $(STAMP)
	@echo "Installed: $(VENV) is ready"

setup: $(STAMP)

# The main job on the embedded defaults: a local Prefect run of the ingest flow
# over data/feeds into ./lake, then a look at the records it wrote.
demo: setup
	CATALOG_LAKE_URI=$(LAKE) $(BIN)/python flows/catalog_flows.py data/feeds
	$(BIN)/catalog-lake records --lake $(LAKE) --limit 5 --columns object_id,client_item_id,product_name,price,on_sale,tags

# Two processes, each taking whole test files: session fixtures (a Prefect test server,
# an S3 server) start once per process. Measured on two cores (2026-11-28, `/usr/bin/time -v
# make test`, 1,017 tests, load average 3.8): 9 min 15 s of wall time, 16 CPU-minutes (844 s
# user, 120 s system).
test: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile
	$(MAKE) --no-print-directory test-later

# While working: the suite without the tests marked slow (real clusters, servers, flows, kills),
# about 2 minutes on two cores. CI runs everything (make test).
test-quick: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow"

# No test may depend on today's date: the tests marked `clock` (prices, discount windows,
# ages, as-of reads) run again with the clock a year ahead. libfaketime moves the clock of
# Python and of delta-rs alike; the S3 server keeps the real one, so its tests skip here.
FAKETIME_LIB = $(shell $(BIN)/python -c "import libfaketime, pathlib; print(pathlib.Path(libfaketime.__file__).parent / 'vendor/libfaketime/src/libfaketime.so.1')" 2>/dev/null)
test-later: setup
	FAKETIME=+365d DONT_FAKE_MONOTONIC=1 LD_PRELOAD=$(FAKETIME_LIB) \
		$(BIN)/python -m pytest -n 2 --dist loadfile -m clock -p no:cacheprovider -q

# Benchmark against the DuckDB baseline; appends the report to bench/results.md.
# WORKERS=2 runs the ingests with a Dask LocalCluster of two workers (docs/scaling.md);
# REPEAT=3 runs baselines and ingests three times and reports each scenario's median run.
ITEMS ?= 100000
WORKERS ?= 0
REPEAT ?= 1
bench: setup
	$(BIN)/python -m bench --items $(ITEMS) --workers $(WORKERS) --repeat $(REPEAT) \
		--record bench/results.md

# The first ingest beside DuckDB, pandas and dlt on one feed, each a process of its own,
# medians of three (issue 29). dlt is a bench-only dependency, installed here.
bench-peers: setup
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,bench]"
	$(BIN)/python -m bench.peers --items $(ITEMS) --rounds 3 --record bench/results.md

lint: setup
	$(BIN)/ruff check src flows tests bench

clean:
	rm -rf $(VENV) $(LAKE) .pytest_cache
