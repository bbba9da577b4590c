import fcntl
import logging
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from lnbench.config.schema import model_presets, register_configs
from lnbench.launch.entry import CONF_DIR

REPO = Path(__file__).resolve().parent.parent
# A developer's own defaults (~/.config/lnbench/local/default.yaml, docs/install.md) never reach the tests, nor the
# runs they start; tests/install/test_user_config.py sets a folder of its own.
os.environ["LNBENCH_CONFIG_DIR"] = ""
DATA_DIR = Path(os.environ.get("LNBENCH_DATA_DIR", REPO.parent / "shared" / "data")).resolve()
HAVE_DATA = (DATA_DIR / "MNIST" / "raw").is_dir() and (DATA_DIR / "tinyshakespeare" / "input.txt").is_file()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason=f"real data not found under {DATA_DIR}")


@pytest.fixture(autouse=True)
def logging_handlers_of_the_test_go_with_it():
    """A run in this process (Hydra configures logging) leaves handlers on the streams pytest captured, closed once
    the test ends: a later test that logs, or flushes every handler before a fork, would write to a closed file."""
    loggers = [logging.getLogger(), logging.getLogger("lnbench")]
    before = [list(logger.handlers) for logger in loggers]
    yield
    for logger, had in zip(loggers, before):
        logger.handlers[:] = had


MODELS_FLAT = model_presets("base_mlp")  # read from conf/model, never typed here
MODELS_SEQ = model_presets("base_sequence", "base_transformer")
# Overrides that shrink each dataset so a run of a few steps (with its evaluations) takes a moment.
TINY = {
    "mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=32", "dataset.eval_batch_size=64"],
    "seq_mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=16", "dataset.eval_batch_size=64"],
    "adding": ["dataset.seq_len=12", "dataset.val_size=32", "dataset.test_size=32", "dataset.batch_size=8"],
    "copy": [
        "dataset.seq_len=12",
        "dataset.copy_len=3",
        "dataset.val_size=32",
        "dataset.test_size=32",
        "dataset.batch_size=8",
    ],
    "shakespeare": ["dataset.seq_len=16", "dataset.max_eval_windows=4", "dataset.batch_size=8"],
}
REAL_DATA = {"mnist", "seq_mnist", "shakespeare"}


@pytest.fixture
def float64():
    """The test runs in float64 (reference comparisons to 1e-10)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture
def holding():
    """Locks a job directory as a live run does (flock on <run>/.lock), released at the end."""
    held = []

    def hold(job):
        f = open(job / ".lock", "a+")
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(f)
        return f

    yield hold
    for f in held:
        f.close()


def compose_train(overrides=()):
    register_configs()
    # W&B off unless a test turns it on; a logger choice without W&B (logger=csv) has no key to turn off
    chosen = next((o.split("=", 1)[1] for o in overrides if o.startswith("logger=")), "wandb")
    quiet = ["logger.wandb.mode=disabled"] if "wandb" in chosen else []
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(
            "train",
            overrides=[f"dataset.data_dir={DATA_DIR}", *quiet, "progress=false", *overrides]
            if any(o.startswith("dataset=") and o.split("=")[1] in REAL_DATA for o in overrides)
            else [*quiet, "progress=false", *overrides],
        )


def tiny(model, dataset, *extra):
    return compose_train(
        [
            f"model={model}",
            f"dataset={dataset}",
            *TINY[dataset],
            "steps=2",
            "eval_every=2",
            "log_every=1",
            "model.hidden_size=16" if model not in MODELS_FLAT else "model.hidden_sizes=[32,32]",
            *extra,
        ]
    )


# ---- helpers for end-to-end tests of `lnbench train` (resume, errors, W&B) ----------------------
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

# A run of the CLI that takes a moment: a tiny LSTM on a short adding problem, one thread (bit-exact).
TINY_CLI = [
    "model.hidden_size=8",
    "dataset=adding",
    "dataset.seq_len=8",
    "dataset.val_size=16",
    "dataset.test_size=16",
    "dataset.batch_size=8",
    "threads=1",
    "device=cpu",
    "progress=false",
    "logger.wandb.mode=disabled",
]


def lnbench_cmd() -> list[str]:
    script = Path(sys.executable).parent / "lnbench"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lnbench.cli"]


def run_cli(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`lnbench <args>` in a subprocess (stdout and stderr captured as text)."""
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update({"WANDB_MODE": "disabled", "WANDB_BASE_URL": "http://127.0.0.1:9", **(env or {})})
    return subprocess.run(
        [*lnbench_cmd(), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def start_cli(*args: str, cwd: Path = REPO, stderr=subprocess.PIPE, own_group: bool = True) -> subprocess.Popen:
    """`lnbench <args>` started, not waited for: W&B off, this checkout on PYTHONPATH, stdout piped as text. With
    own_group, as a shell runs it: a process group of its own, which Ctrl-C (os.killpg) signals as a whole."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update({"WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)})
    return subprocess.Popen(
        [*lnbench_cmd(), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=own_group,
    )


@contextmanager
def locked_by_another_process(run_dir: Path, with_crash_log: bool = False):
    """Another process holds the run directory's lock (RunLock, as a live run does), with the crash.log a live
    run keeps if asked, for as long as the block runs."""
    code = "import sys; from pathlib import Path; from lnbench.runs import RunLock; "
    code += "d = Path(sys.argv[1]); lock = RunLock(d); "
    code += "(d / 'crash.log').touch(); " if with_crash_log else ""
    code += "print('locked', flush=True); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.communicate("")


def results_on_threads(layer, cell, x, counts=(1, 2)) -> list[list[torch.Tensor]]:
    """A recurrent layer's output, final state, and the gradients of x and of every parameter of its cell, computed
    on each thread count in turn (torch's count put back after)."""
    before, got = torch.get_num_threads(), []
    try:
        for n in counts:
            torch.set_num_threads(n)
            out, final = layer(x)
            got.append([out, *final, *torch.autograd.grad(out.square().sum(), [x, *cell.parameters()])])
    finally:
        torch.set_num_threads(before)
    return got


def metrics_without_time(run_dir: Path) -> list[dict]:
    """metrics.jsonl of a run, minus the wall times: what must be equal between equivalent runs."""
    from lnbench.atomic import read_jsonl

    records, torn = read_jsonl(Path(run_dir) / "metrics.jsonl")
    assert not torn
    return [{k: v for k, v in r.items() if k != "time"} for r in records]


def summary_of(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def results_of(summary: dict) -> dict:
    """The values of a summary that a run computes (not its timings or where it ran)."""
    return {k: summary.get(k) for k in ("status", "steps", "params", "test", "final_val", "best_val")}


def after_log(monkeypatch, when, action):
    """Runs `action()` right after the Tracker logged a record for which `when(split, step, extra)` holds
    (to stop a run there: a signal, or an exception standing in for SIGKILL)."""
    from lnbench.training.tracker import Tracker

    original = Tracker.log

    def log(self, split, step, values, **extra):
        original(self, split, step, values, **extra)
        if when(split, step, extra):
            action()

    monkeypatch.setattr(Tracker, "log", log)
