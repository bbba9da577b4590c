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
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup run test test-slow smoke bench check clean slurm-up test-slurm

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),) "$(TORCH)"
	$(BIN)/pip install -q -e ".[test,launchers]"
	@# lnbench's C++ kernels, built once for this machine's ISA (~20 s; without a compiler: a warning, torch's ops).
	$(BIN)/python -m lnbench.nn.fast.native
	@touch $@

run: setup
	$(BIN)/lnbench train

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

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
	rm -rf $(VENV) *.egg-info
