# SIMPLE: one Makefile for people and CI. `make quick` runs the quick suite on the
# embedded default; `make test` runs the tests. Both create .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help install quick test faults lint typecheck checkov check bench bench-docker bench-ingest bench-aggregate bench-schedule bench-scale bench-ha bench-k8s bench-dashboard bench-batch bench-principal clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv with SIMPLE and its dev tools

quick: $(STAMP) ## Run the quick suite (7 templates) on the embedded default
	$(BIN)/simplectl run quick

PYTEST_ARGS ?=
test: $(STAMP) ## Run the tests (CI=true: missing Docker/PostgreSQL/S3/helm fail, never skip)
	$(BIN)/pytest -q $(PYTEST_ARGS)

faults: $(STAMP) ## Fault suite: Docker, PostgreSQL, S3 and HA (2 reconcilers, 2 APIs, HAProxy), then `faults: N/N held`
	SIMPLE_FAULTS=1 $(BIN)/pytest -q tests/faults -m faults $(PYTEST_ARGS)

lint: $(STAMP) ## ruff
	$(BIN)/ruff check controller sandbox_image tests bench

typecheck: $(STAMP) ## mypy
	$(BIN)/mypy

checkov: $(STAMP) ## checkov over the rendered chart and the backend's Jobs (its own venv, .venv-checkov)
	bash scripts/checkov.sh

check: lint typecheck test ## Everything CI checks

bench: $(STAMP) ## Controller overhead per sandbox on the process backend
	$(BIN)/python bench/process_overhead.py

bench-docker: $(STAMP) ## SIMPLE vs bare CLI and SDK loops: 64 no-op containers, 8 at once (builds its image)
	$(BIN)/python bench/docker_bench.py

bench-k8s: $(STAMP) ## Kubernetes API requests per sandbox: watch-fed cache vs listing per pass (kmock)
	$(BIN)/python bench/k8s_bench.py

bench-batch: $(STAMP) ## 100 no-op items: one sandbox each vs batches of 10 and 100, process and Docker
	$(BIN)/python bench/batch_bench.py

bench-scale: $(STAMP) ## 1,000 sandboxes in one run over a DB of 100 such runs (instant + process backends)
	$(BIN)/python bench/scale_bench.py

bench-ha: $(STAMP) ## The API apart from the reconciler vs one process: GET run p99 and pass p99 side by side (PostgreSQL)
	$(BIN)/python bench/ha_bench.py

bench-schedule: $(STAMP) ## Launch order: ultra's estimates as sleeps, 8 at once, vs the lower bound
	$(BIN)/python bench/schedule_bench.py

bench-dashboard: $(STAMP) ## Run page of 1,000 sandboxes: render vs the JSON API, stream fan-out to 20 viewers vs 1
	$(BIN)/python bench/dashboard_bench.py

bench-ingest: $(STAMP) ## Event ingestion on PostgreSQL vs the same endpoint without persistence
	$(BIN)/python bench/ingest_bench.py

bench-principal: $(STAMP) ## The principal's reading of an independent corpus: right/wrong/asked, dev and held-out
	$(BIN)/python -m bench.principal_bench

bench-aggregate: $(STAMP) ## Snapshot aggregation with COPY vs a minimal COPY script and row INSERTs
	$(BIN)/python bench/aggregate_bench.py

clean: ## Remove the virtualenv and local state
	rm -rf $(VENV) .venv-checkov .simple build .mypy_cache .ruff_cache .pytest_cache

include mk/images.mk
