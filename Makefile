# One-command set-up: `make test` and `make demo` create .venv if missing and install what they need.
# torch==2.13.0 (CPU build, on local disk) goes in first: an unpinned torch would pull a multi-GB CUDA build.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mlsysopt-installed
PYTEST_WORKERS ?= 2

.PHONY: install test lint demo bench-quick clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,ray]"
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

test: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

demo: $(STAMP)
	$(VENV)/bin/mlsysopt demo --out runs/demo

bench-quick: $(STAMP)
	$(PY) benchmarks/simulator.py --quick --out runs/bench/simulator.json

clean:
	rm -rf runs .pytest_cache
