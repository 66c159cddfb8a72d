# The README's two commands, `make demo` and `make test`, set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
# SYSTEM=1 runs with the system Python and what it has installed (a GPU machine with no network
# already has torch, CuPy, cuda-bindings and NVRTC): no virtual environment is made.
ifdef SYSTEM
PYENV := PYTHONPATH=$(CURDIR)
PYBIN := $(PYTHON)
STAMP :=
else
PYENV :=
PYBIN := $(VENV)/bin/python
STAMP := $(VENV)/.installed
endif
PY := $(PYENV) $(PYBIN)

.PHONY: demo test fuzz wheel-check docs lint gpu-test bench gpu-bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,cuda]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/braze demo

# The whole suite (the op suite on the reference backend), then the op suite again on the compiled
# CPU backend (checked against the same oracle) while generating CUDA for every fusion and compiling
# it with NVRTC (no GPU needed); each spread over the cores by pytest-xdist (JOBS= for one process).
# The wheel check and the docs build come first (about a minute). The 25 slowest tests close the log.
JOBS ?= auto
test: $(STAMP) wheel-check docs
	$(PY) -m pytest -q $(if $(JOBS),-n $(JOBS)) --durations=25 tests
	BRAZE_OPS_BACKEND=nvrtc $(PY) -m pytest -q $(if $(JOBS),-n $(JOBS)) tests/ops

# The generative tests with SCALE times their CI examples (tests/fuzz_scale.py): a longer hunt for bugs,
# off CI; their CI runs take about 4 CPU-minutes, so the default SCALE=10 about 40.
SCALE ?= 10
FUZZ_TESTS := tests/engine/test_fuzz_fusions.py tests/engine/test_fuzz_fusions_cuda_on_cpu.py \
	tests/frontend/test_fuzz_jit_programs.py tests/frontend/test_fuzz_python_semantics.py \
	tests/frontend/test_fuzz_vector_programs.py tests/passes/test_fuzz_tasks.py tests/frontend/test_kernel_atomics.py \
	tests/frontend/test_kernel_random.py tests/frontend/test_kernel_replay.py tests/frontend/test_kernel_equal_extents.py \
	tests/frontend/test_kernel_python_semantics.py tests/frontend/test_jit_assign.py \
	tests/frontend/test_fuzz_grid_programs.py tests/codegen/test_fuzz_row_peel.py \
	tests/codegen/test_fuzz_column_vectors.py tests/codegen/test_fuzz_channel_rows.py \
	tests/codegen/test_fuzz_split_pairs.py
fuzz: $(STAMP)
	BRAZE_FUZZ_SCALE=$(SCALE) $(PY) -m pytest -q $(if $(JOBS),-n $(JOBS)) $(FUZZ_TESTS)

# The documentation site (docs/, the API reference from the docstrings) into build/site; a warning
# (a broken link, a docstring that does not parse) is an error.
DOCS_STAMP := $(if $(SYSTEM),,$(VENV)/.docs-installed)
$(VENV)/.docs-installed: $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# A regular (non-editable) install, as a user gets it: build the wheel, install it into a fresh
# virtual environment and run the quickstart there, outside the checkout.
WHEEL_DIR := build/wheel-check
wheel-check: $(STAMP)
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(PY) -m pip wheel --quiet --no-deps -w $(WHEEL_DIR)/dist .
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/python -m pip install --quiet $(WHEEL_DIR)/dist/braze-*.whl
	cd $(WHEEL_DIR) && BRAZE_CACHE_DIR=$(CURDIR)/$(WHEEL_DIR)/cache venv/bin/python $(CURDIR)/examples/quickstart.py
	cd $(WHEEL_DIR) && venv/bin/braze info

lint: $(STAMP)
	$(VENV)/bin/ruff check braze tests benchmarks

# The GPU suite: the tests marked `cuda`, then the op suite on the GPU against the same oracle.
# JOBS=8 spreads the GPU tests and the op suite over 8 processes on the one GPU (needs pytest-xdist).
GPU_JOBS := $(if $(filter-out auto,$(JOBS)),$(JOBS))
# Last, compute-sanitizer's memcheck over a representative subset, where it is installed: the GPU
# runtime tests (torch, CuPy, DeviceArray, in-place outputs, RtcKernel, recompiles, grid reductions,
# streams, softmax rows of five lengths) and the fused particle step. Every kernel runs ~100x slower
# under memcheck, so the whole GPU suite would take most of an hour. Then a sample of random
# fusions (tests/engine/test_fuzz_fusions.py) under memcheck and racecheck.
gpu-test: $(STAMP)
	$(PY) -m pytest -q $(if $(GPU_JOBS),-n $(GPU_JOBS)) --durations=10 -m cuda tests $(TWO_GPU_TESTS:%=--ignore=%)
	$(PY) -m pytest -q -rs $(TWO_GPU_TESTS)
	BRAZE_OPS_BACKEND=cuda $(PY) -m pytest -q $(if $(GPU_JOBS),-n $(GPU_JOBS)) tests/ops
	if command -v compute-sanitizer >/dev/null; then \
	  $(PYENV) compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 $(PYBIN) -m pytest -q -p no:cacheprovider \
	    tests/cuda/test_cuda_runtime.py tests/cuda/test_loop_kernels.py \
	    -k "$(MEMCHECK_TESTS)"; fi
	if command -v compute-sanitizer >/dev/null; then for tool in memcheck racecheck; do \
	  BRAZE_FUZZ_EXAMPLES=1,1,$(SANITIZED_FUSIONS) $(PYENV) compute-sanitizer --tool $$tool --report-api-errors no --error-exitcode 1 \
	    $(PYBIN) -m pytest -q -p no:cacheprovider tests/engine/test_fuzz_fusions.py -k on_the_gpu || exit 1; done; fi

# Both GPUs, one test at a time (torchrun's ranks take both); skipped, saying so, with one GPU.
TWO_GPU_TESTS := tests/cuda/test_second_gpu.py tests/cuda/test_data_parallel.py
SANITIZED_FUSIONS := 40  # random fusions run under memcheck and racecheck (each ~100x slower there)
MEMCHECK_TESTS := (test_cuda_runtime and not compile_error and not disk_cache and not failed_launch) or particle

bench: $(STAMP)
	$(PY) benchmarks/run.py

# The four showcase fusions and first-call latency, then the fusion suite (31 fusions from real models
# against torch eager, torch.compile and JAX; table, JSON and plot under benchmarks/results/), at
# LLM-sized shapes and then at the shapes well-known models give each fusion (--models).
gpu-bench: $(STAMP)
	$(PY) benchmarks/gpu.py
	$(PY) benchmarks/suite.py
	$(PY) benchmarks/suite.py --models --no-jax

clean:
	rm -rf $(VENV) build *.egg-info
