# lnbench: `make run` trains the default on a fresh machine, `make test` runs the tests.
# Both install first (once) into .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed before the package so pip never pulls a second build. On this project's
# CPU-only machines torch==2.13.0 resolves to a local CPU wheel. Elsewhere, on a CPU-only Linux box,
# add the CPU wheel index (see README, "Setup") so pip does not fetch GBs of CUDA libraries.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# Every other package at the version the tests passed with (a constraints file: docs/install.md). LOCK= installs
# the newest versions pyproject.toml allows instead, e.g. with another TORCH.
LOCK ?= requirements.lock
CONSTRAIN := $(if $(LOCK),-c $(LOCK),)
PYTEST_ARGS ?=
# The tests on every core (pytest-xdist; TEST_WORKERS=0 runs them in this process, as plain pytest does).
TEST_WORKERS ?= auto
BENCH_ARGS ?=
# Triton for the test of lnbench's GPU kernels under its interpreter (tests/nn/test_triton_lstm.py), beside a CPU build
# of torch only (a CUDA build brings the Triton it was built with), and in a folder of its own that only that test's
# subprocess puts on its path: on the venv's path, torch._dynamo would import it in every process, whose exit then
# prints the bindings' leak warnings on stderr (two CLI tests read stderr's last line).
TRITON ?= triton==3.9.0
TRITON_SITE := $(VENV)/triton-site

.PHONY: setup run lint test test-slow test-install smoke bench check clean slurm-up test-slurm lock

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),) $(CONSTRAIN) "$(TORCH)"
	$(BIN)/pip install -q $(CONSTRAIN) -e ".[test,joblib,slurm]"
	if $(BIN)/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)"; then \
		$(BIN)/pip install -q --no-deps --upgrade --target $(TRITON_SITE) "$(TRITON)"; fi
	@# lnbench's C++ kernels, built once for this machine's ISA (~20 s; without a compiler: a warning, torch's ops).
	$(BIN)/python -m lnbench.nn.fast.native
	@touch $@

run: setup
	$(BIN)/lnbench train

# ruff's rules and its per-file exceptions: [tool.ruff] in pyproject.toml.
LINT_PATHS := lnbench calibration tests hydra_plugins scripts setup.py
lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# The wheel, installed with the lock into a fresh venv outside the checkout and run from another folder (a few
# minutes: most of it installing torch and the rest; tests/install/).
test-install: setup
	TORCH="$(TORCH)" TORCH_INDEX="$(TORCH_INDEX)" $(BIN)/python -m pytest -q -m install -rs $(PYTEST_ARGS)

# requirements.lock anew: the newest versions pyproject.toml allows, with TORCH, in a fresh venv (docs/install.md).
lock:
	rm -rf build/lock-venv && $(PYTHON) -m venv build/lock-venv && echo "$(TORCH)" > build/lock-venv/torch.txt
	build/lock-venv/bin/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),) "$(TORCH)"
	build/lock-venv/bin/pip install -q -c build/lock-venv/torch.txt ".[all]"
	sed -n '/^# /p' requirements.lock > build/lock-venv/requirements.lock
	@# a local build label (2.13.0+cpu) would refuse another build of the same release (+cu126)
	build/lock-venv/bin/pip freeze --exclude lnbench | sed -E 's/^(torch[a-z]*==[^+]+)\+.*$$/\1/' \
		>> build/lock-venv/requirements.lock
	mv build/lock-venv/requirements.lock requirements.lock && rm -rf build/lock-venv

# A one-node SLURM cluster on this machine (root; Debian's slurmctld, slurmd, munge), and the tests that run
# sweeps on it (docs/slurm.md). Where it cannot start, slurm-up says why and the SLURM tests skip.
slurm-up:
	scripts/slurm-up.sh

test-slurm: setup
	$(BIN)/python -m pytest -q -m slurm -rs $(PYTEST_ARGS)

# A few steps of every model preset on every dataset it can take (needs MNIST and Tiny Shakespeare
# under $LNBENCH_DATA_DIR, else ../shared/data).
# The model (dataset) presets that take (give) flat or sequence inputs, read from conf/.
presets = $(shell $(BIN)/python -c 'from lnbench.config.schema import presets_of_kind as p; print(",".join(p("$(1)", "$(2)", "$(3)")))')
smoke: setup
	$(BIN)/lnbench train -m +experiment=smoke progress=false model=$(call presets,model,accepts,flat) dataset=$(call presets,dataset,kind,flat)
	$(BIN)/lnbench train -m +experiment=smoke progress=false model=$(call presets,model,accepts,sequence) dataset=$(call presets,dataset,kind,sequence)

# `make bench BENCH_ARGS=--quick`: a few minutes (no sweep row, fewer shapes and reps).
bench: setup
	$(BIN)/lnbench bench $(BENCH_ARGS)

# Every claim preset (3 tuning seeds x 3 learning rates, then judging seeds; joblib), then outputs/check/check.md: ~50 min on 2 idle cores (measured).
# Re-running resumes. CHECK_ARGS="fig6_mnist scale=10 hydra/launcher=slurm ..." passes through.
CHECK_ARGS ?=
check: setup
	$(BIN)/lnbench check $(CHECK_ARGS)

clean:
	rm -rf $(VENV) *.egg-info build
