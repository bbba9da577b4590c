"""Property: whatever overrides a user types, `lnbench train` either trains (here 1-3 steps) and exits 0,
or exits 2 with one paragraph and no traceback, leaving no run directory; and neither touches another
run's directory. Override lists are drawn from the schema (lnbench/config/schema.py): valid values, numbers out
of range, wrong types, unknown keys, and the +, ++ and ~ forms. Runs in this process (a subprocess per
case would cost seconds of imports each); the default suite tries FAST cases, `-m slow` tries SLOW."""

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnbench.cli import main
from tests.cli.test_hardening import snapshot

FAST, SLOW = 15, 400
TRIED = {"cases": 0, "trained": 0, "refused": 0}
# Small, quick runs; each drawn override comes after these and wins.
BASE = [
    "threads=1",
    "device=cpu",
    "progress=false",
    "logger.wandb.mode=disabled",
    "steps=2",
    "eval_every=2",
    "log_every=1",
    "checkpoint_every=2",
    "dataset.seq_len=6",
    "dataset.val_size=8",
    "dataset.test_size=8",
    "dataset.batch_size=4",
    "model.hidden_size=4",
    "model=ln_lstm",
]

WRONG = st.sampled_from(["abc", "-1", "0", "1.5", "[1,2]", "null", "inf", "nan", "''", "{a: 1}", "1e999", "true"])
# key -> values a user could sensibly type (kept small, so a valid case trains in well under a second)
VALID = {
    "steps": st.integers(1, 3),
    "seed": st.integers(0, 2**31),
    "eval_every": st.integers(1, 3),
    "log_every": st.integers(1, 3),
    "checkpoint_every": st.integers(1, 3),
    "threads": st.sampled_from([1, 2, "null"]),
    "dataset.batch_size": st.integers(1, 6),
    "dataset.eval_batch_size": st.integers(1, 8),
    "dataset.seq_len": st.integers(2, 8),
    "model.hidden_size": st.integers(1, 6),
    "model.num_layers": st.integers(1, 2),
    "model.norm.kind": st.sampled_from(["none", "batch", "layer", "weight", "rms"]),
    "model.norm.gain_init": st.floats(0.1, 2.0),
    "model.norm.eps": st.floats(1e-8, 1e-2),
    "model.norm.momentum": st.floats(0.0, 1.0),
    "model.norm.data_init": st.booleans(),
    "model.norm.unbiased_var": st.booleans(),
    "model.impl": st.sampled_from(["auto", "fast", "reference"]),
    "model.cell": st.sampled_from(["lstm", "gru"]),
    "optim.lr": st.floats(1e-4, 1e-2),
    "optim.weight_decay": st.floats(0.0, 0.1),
    "schedule.warmup_steps": st.integers(0, 3),
    "clip_grad_norm": st.sampled_from(["null", 0.5, 1.0]),
    "test_seq_lens": st.sampled_from(["[]", "[4]", "[3,8]"]),
}
GROUPS = {
    "model": ["lstm", "ln_lstm", "gru", "wn_gru", "bn_lstm", "rms_gru", "mlp", "ln_lstmm"],
    "optim": ["adam", "sgd", "rmsprop", "adamw"],
    "dataset": ["adding", "copy", "nope"],
    "schedule": ["constant", "cosine", "linear", "step"],
    "logger": ["none", "csv", "wandb"],
}
UNKNOWN = [
    "foo",
    "model.foo",
    "optim.momentum",
    "optim.betaz",
    "dataset.carve",
    "stepz",
    "model.norm.bar",
    "logger.nope",
]


def fmt(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@st.composite
def override(draw) -> str:
    kind = draw(st.sampled_from(["valid", "valid", "valid", "wrong", "group", "unknown", "delete", "betas"]))
    prefix = draw(st.sampled_from(["", "", "", "+", "++"]))
    if kind == "group":
        g = draw(st.sampled_from(sorted(GROUPS)))
        return f"{g}={draw(st.sampled_from(GROUPS[g]))}"
    if kind == "unknown":
        return (
            f"{draw(st.sampled_from(['', '+', '++']))}{draw(st.sampled_from(UNKNOWN))}={fmt(draw(st.integers(-1, 3)))}"
        )
    if kind == "delete":
        return f"~{draw(st.sampled_from([*VALID, *UNKNOWN[:2]]))}"
    if kind == "betas":
        return f"{prefix}optim.betas=[{draw(st.floats(-1, 2.5)):.3g},{draw(st.floats(0, 1.2)):.3g}]"
    key = draw(st.sampled_from(sorted(VALID)))
    value = draw(VALID[key]) if kind == "valid" else draw(WRONG)
    return f"{prefix}{key}={fmt(value)}"


@pytest.fixture(scope="module")
def other_run(tmp_path_factory):
    """A finished run beside the fuzzed ones: nothing a case does may change it."""
    d = tmp_path_factory.mktemp("other") / "run"
    assert cli([*BASE, f"hydra.run.dir={d}"])[0] == 0
    return d


def cli(args: list[str]) -> tuple[int, str]:
    """`lnbench train <args>` in this process: (exit code, stdout + stderr)."""
    out, argv = io.StringIO(), list(sys.argv)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(["train", *args])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = argv
    return code, out.getvalue()


def check(overrides: list[str], root: Path, other_run: Path, other_before: dict) -> None:
    TRIED["cases"] += 1
    run_dir = root / f"case{TRIED['cases']}"
    code, text = cli([*BASE, *overrides, f"hydra.run.dir={run_dir}"])
    assert "Traceback" not in text, (overrides, text)
    if code == 0:
        TRIED["trained"] += 1
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] >= 1, (overrides, summary)
    else:
        TRIED["refused"] += 1
        assert code == 2, (overrides, code, text)
        lines = [ln for ln in text.splitlines() if ln.startswith("lnbench")]
        assert len(lines) == 1 and lines[0].startswith("lnbench: error: "), (overrides, text)
        assert not run_dir.exists(), (overrides, sorted(run_dir.rglob("*")))
    assert snapshot(other_run) == other_before, overrides


def fuzz(max_examples: int):
    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=max_examples == FAST,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(overrides=st.lists(override(), min_size=1, max_size=4))
    def prop(overrides, tmp_path, other_run):
        check(overrides, tmp_path, other_run, OTHER[str(other_run)])

    return prop


OTHER: dict[str, dict] = {}


@pytest.fixture
def other_before(other_run):
    OTHER.setdefault(str(other_run), snapshot(other_run))


def report_count():
    print(f"\nfuzz: {TRIED['cases']} cases tried, {TRIED['trained']} trained, {TRIED['refused']} refused")


def test_any_overrides_train_or_are_refused_cleanly(tmp_path, other_run, other_before):
    TRIED.update(cases=0, trained=0, refused=0)
    fuzz(FAST)(tmp_path=tmp_path, other_run=other_run)
    report_count()
    assert TRIED["cases"] >= FAST // 2 and TRIED["trained"] and TRIED["refused"]


@pytest.mark.slow
def test_any_overrides_train_or_are_refused_cleanly_many(tmp_path, other_run, other_before):
    TRIED.update(cases=0, trained=0, refused=0)
    fuzz(SLOW)(tmp_path=tmp_path, other_run=other_run)
    report_count()
    assert TRIED["cases"] >= SLOW
