# One-command set-up: `make test` and `make demo` create .venv if missing and install what they need.
# torch==2.13.0 (CPU build, on local disk) goes in first: an unpinned torch would pull a multi-GB CUDA build.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mlsysopt-installed
# Two workers on 2 cores for the CPU-bound tests, beside the Ray group's own session (below). Three workers with the
# Ray group among them kept the cores busier (98% against 87%) but put its latency checks beside two CPU-bound
# workers: a Ray Serve window's p99 went past 1 s (2026-12-06, fresh clone at -n 3), so CI would be red by chance.
PYTEST_WORKERS ?= 2

.PHONY: install system-packages test test-durations lint chromium demo bench-quick clean

install: $(STAMP)

# With uv (the same versions pip resolves, ~15 s instead of ~75 s of a fresh clone's `make test`): torch from pip's
# own find-links (where this machine keeps the CPU wheel), then the rest; pip does it all where uv cannot be installed.
# The venv is made without pip and the system's pip (23.x: `--python`) installs uv into it, while the venv's own pip
# is seeded beside the installs (ensurepip, ~4 s of a fresh clone otherwise spent first); upgrading pip cost ~6 s.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv --without-pip $(VENV)
	$(MAKE) system-packages
	{ $(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null; } & seed=$$!; \
	links="$${PIP_FIND_LINKS:-$$(python3 -m pip config get global.find-links 2>/dev/null)}"; \
	if python3 -m pip --python $(PY) install -q uv 2>/dev/null || { wait $$seed; $(PY) -m pip install -q uv; }; then \
		$(PY) -c "import torch" 2>/dev/null || if [ -n "$$links" ]; then \
			$(VENV)/bin/uv pip install -q --python $(PY) --find-links "$$links" torch==2.13.0; \
		else wait $$seed; $(PY) -m pip install -q torch==2.13.0; fi; \
		$(VENV)/bin/uv pip install -q --python $(PY) -e ".[dev,ray,postgres,docs]"; \
		rc=$$?; wait $$seed; test $$rc = 0; \
	else \
		wait $$seed; \
		$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0; \
		$(PY) -m pip install -q -e ".[dev,ray,postgres,docs]"; \
	fi
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports

# Bytecode caches on for the tests, even where the environment turns them off (PYTHONDONTWRITEBYTECODE=1): without
# them every pytest process rewrites the asserts of every test module again (~6 s each), and every interpreter the
# suite starts (CLI runs, pool and Ray workers) compiles the mlsysopt modules it imports again (~0.2 s each).
test test-durations: export PYTHONDONTWRITEBYTECODE :=
# The string-hash seed the `mlsysopt` command fixes for itself (src/mlsysopt/hashseed.py), for the test processes too:
# a saga tie-break inside a test then goes the same way in every run, as in the command (tests/test_hashseed.py
# removes it to check the command's own step).
test test-durations: export PYTHONHASHSEED := 0

# First, beside lint, tests/warm_caches.py fills once the caches the processes of the run would otherwise fill side by
# side: the bytecode of the site-packages (uv compiles none) and numba's cache of the graph kernels. The Ray workers
# of the first session below import torch and Ray by the dozen (that session took ~30 s longer without it).
#
# Then two sessions side by side. One, at normal priority, runs the Ray group (`-m ray`: clusters, Ray Serve, load
# windows; it mostly waits, and its latency checks must not queue behind CPU-bound tests), the README's and docs
# pages' commands (`-m pages`: they tune real serving to an SLO) and checks against the clock (`-m realtime`: the
# serving engine's and load generator's windows, where at nice 10 a light load once read saturated, a stall of the
# loaded box; a SIGTERM stop that must end within 10 s). The other runs every other test on $(PYTEST_WORKERS)
# workers at `nice` 10 (their commands and pool workers inherit it), taking the cores the first leaves. Both end at
# about the same time and share the NAS transfer priors they fit (MLSYSOPT_PRIOR_CACHE). The first session's output
# follows the other's.
#
# Last, the tests marked `quiet` (they compare real timings of two runs) alone; their fixture waits for an idle
# machine first (the exiting workers and Ray processes). Run first, they left the other core idle for 35-60 s of a
# fresh clone (with the first compile of torch, ONNX Runtime and matplotlib); last, ~25 s. `make test` fails if any
# of the three runs fails.
FIRST := (ray or pages or realtime) and not quiet
test: $(STAMP) chromium
	@$(PY) tests/warm_caches.py imports & w=$$!; $(PY) tests/warm_caches.py kernels & k=$$!; \
	$(MAKE) --no-print-directory lint; rc=$$?; wait $$w $$k; test $$rc = 0
	@log=$$(mktemp); export MLSYSOPT_PRIOR_CACHE=$$(mktemp -d); \
	$(PY) -m pytest -q -m "$(FIRST)" >$$log 2>&1 & first=$$!; \
	MLSYSOPT_README_TIMES=$$log.times nice -n 10 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup \
		-m "not ($(FIRST)) and not quiet"; rest=$$?; \
	wait $$first; rc=$$?; echo "---- pytest -m \"$(FIRST)\" (its own session, at normal priority)"; cat $$log; \
	rm -rf $$log $$log.times $$MLSYSOPT_PRIOR_CACHE; \
	echo "---- pytest -m quiet (alone, last)"; $(PY) -m pytest -q -m quiet; quiet=$$?; \
	test $$rest = 0 && test $$rc = 0 && test $$quiet = 0

# Refresh tests/durations.json (the longest tests are handed to the xdist workers first, so both end together).
test-durations: $(STAMP) chromium
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not ($(FIRST)) and not quiet" --store-durations

# Debian packages: graphviz headers (saga's pygraphviz builds against them) and the PostgreSQL server the store's
# tests start on loopback. Installed only when missing (run as root, as CI does).
system-packages:
	@(test -f /usr/include/graphviz/cgraph.h && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1) || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libgraphviz-dev graphviz postgresql)

# Headless Chromium renders the demo page in tests/report/test_page_chromium.py (Debian package; run as root).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update && apt-get install -y chromium)

# The documentation site (mkdocs.yml, docs/): --strict, so a broken link or a missing reference fails the build.
.PHONY: docs
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

demo: $(STAMP)
	$(VENV)/bin/mlsysopt demo --out runs/demo

bench-quick: $(STAMP)
	$(PY) benchmarks/simulator.py --quick --out runs/bench/simulator.json

clean:
	rm -rf runs .pytest_cache
