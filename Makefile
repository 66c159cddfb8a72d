# The README's two commands, `make demo` and `make test`, set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint gpu-test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/braze demo

# The whole suite, then the op suite again on the compiled backend (checked against the same oracle).
test: $(STAMP)
	$(PY) -m pytest -q tests
	BRAZE_OPS_BACKEND=llvm $(PY) -m pytest -q tests/ops

lint: $(STAMP)
	$(VENV)/bin/ruff check braze tests benchmarks

# The GPU suite: tests marked `cuda` (pytest exits 5 when none is collected yet).
gpu-test: $(STAMP)
	$(PY) -m pytest -q -m cuda tests; rc=$$?; test $$rc -eq 0 -o $$rc -eq 5

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
