# transferlab: `make demo` and `make test` are all a new user types.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.install-stamp
PYTEST_ARGS ?=
# The suite runs on every core (at most 4 test processes), each test file in one process so its module
# fixtures are built once; `make test XDIST=` runs it in this process instead (pdb, -x, profiling).
XDIST ?= -n auto --maxprocesses=4 --dist loadfile

.PHONY: install demo test test-fast lint docs bench gpu-check clean lock

# Create .venv when missing and install with the constraints (torch==2.13.0, the CPU wheel on disk).
# requirements.lock pins every package (transitive ones too) to what CI last tested; `make lock` renews it.
LOCK := requirements.lock

$(STAMP): pyproject.toml constraints.txt $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -c $(LOCK) -e '.[dev,all]'
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/transferlab demo
	@echo "transferlab is installed in $(VENV): run 'source $(VENV)/bin/activate' to use the commands above as printed"

test: install
	$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

test-fast: install
	$(VENV)/bin/pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check transferlab tests benchmarks scripts
	$(VENV)/bin/ruff format --check transferlab tests benchmarks scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q tests/test_architecture.py

# The documentation site (MkDocs Material + API pages from the docstrings) into site/; --strict turns
# every broken link or reference into an error.
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): pyproject.toml constraints.txt $(LOCK) $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -c $(LOCK) -e '.[dev,all,docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: install
	$(PY) benchmarks/sandbox_throughput.py
	$(PY) benchmarks/trainer_throughput.py
	$(PY) benchmarks/simulator_speed.py

# The trainer's smoke path on CUDA (a random ~0.5B Qwen2 in bf16: SFT, GRPO, eval). Needs a GPU;
# CI never runs it. GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny make gpu-check checks the flow on a CPU.
gpu-check: install
	scripts/gpu_check.sh

# Renew requirements.lock: a fresh venv with every extra at the newest versions constraints.txt allows.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,all,docs]'
	echo '# Every package at the version CI tested (make lock; used as pip constraints by make install).' > $(LOCK)
	.venv-lock/bin/pip freeze --exclude-editable --disable-pip-version-check | grep -v '^transferlab' >> $(LOCK)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
