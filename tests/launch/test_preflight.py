"""The checks before Hydra runs (lnbench.launch.preflight) and the one private Hydra API they use; input that is
well typed but nonsense; sizes that would not fit in memory, refused before anything that size is made."""

import itertools
import json

import pytest
from conftest import TINY_CLI, run_cli, summary_of

from lnbench.cli import main
from lnbench.config import overrides as hydra_args


def refused(args, capsys) -> list[str]:
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    return [ln for ln in err.splitlines() if ln.strip()]


# ---- Hydra's private API, in one place ------------------------------------------------------------
def test_hydras_own_command_line_parser_still_reads_what_lnbench_reads():
    """lnbench.config.overrides.parse is lnbench's one use of a private Hydra API
    (hydra._internal.utils.get_args_parser): this fails when Hydra changes it."""
    parsed = hydra_args.parse(["-m", "seed=0,1", "model=ln_lstm", "--cfg", "job"])
    assert parsed.multirun is True and parsed.overrides == ["seed=0,1", "model=ln_lstm"] and parsed.cfg == "job"
    assert not hydra_args.is_a_run(parsed) and hydra_args.is_a_run(hydra_args.parse(["seed=1"]))
    for flag in hydra_args.NOT_A_RUN:
        assert hasattr(parsed, flag), flag


@pytest.mark.parametrize(
    "overrides",
    [
        ["seed=0,1", "model=lstm,ln_lstm", "steps=3"],
        ["seed=range(3)", "seed=5,6", "+x=1,2"],
        ["optim.betas='[0.9,0.99]'", "dataset.seq_len=choice(5,10)"],
    ],
)
def test_a_sweep_expands_into_the_jobs_hydras_basic_sweeper_runs(overrides):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # only here, to compare with
    from hydra.core.override_parser.overrides_parser import OverridesParser

    theirs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)[0]
    assert hydra_args.expand(overrides) == theirs


# ---- what the user typed ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "typed", ["dataset.data_dir=~/data", "dataset.data_dir=/tmp/données", "dataset.data_dir=/tmp/it's", "seed=1=2"]
)
def test_shell_text_hydra_cannot_read_gets_a_line_on_quoting(typed, tmp_path, capsys):
    lines = refused([typed, f"hydra.run.dir={tmp_path}/run"], capsys)
    assert len(lines) == 2 and lines[0].startswith("lnbench: error: ") and typed in lines[0], lines
    assert lines[1].startswith("lnbench: Hydra reads an override's value in its own syntax: quote a value")
    assert not (tmp_path / "run").exists()


def test_the_quoting_the_hint_gives_works(tmp_path, capsys):
    lines = refused(['dataset.data_dir="~/no such dir"', "dataset=mnist", f"hydra.run.dir={tmp_path}/run"], capsys)
    assert lines == [lines[0]] and "no MNIST IDX files under" in lines[0] and "/no such dir/MNIST/raw" in lines[0]


def test_sgd_momentum_at_or_above_1_is_refused(tmp_path, capsys):
    for m in ("1.0", "2.5"):
        (line,) = refused([*TINY_CLI, "optim=sgd", f"optim.momentum={m}", f"hydra.run.dir={tmp_path}/run"], capsys)
        assert f"optim.momentum={float(m)} is not allowed: it must be >= 0 and < 1" in line


def test_a_model_size_of_0_is_refused_not_a_constructors_crash(tmp_path, capsys):
    flat = [o for o in TINY_CLI if not o.startswith("model.")]
    (line,) = refused([*flat, "model=mlp", "model.hidden_sizes=[8,0]", f"hydra.run.dir={tmp_path}/run"], capsys)
    assert "model.hidden_sizes[1]=0 is not allowed: a model's sizes and counts are integers >= 1" in line


def test_a_warmup_longer_than_the_run_is_flagged_not_a_plain_completed(tmp_path):
    r = run_cli("train", *TINY_CLI, "steps=3", "eval_every=3", "schedule.warmup_steps=10", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    summary = summary_of(tmp_path)
    assert (
        summary["status"] == "completed"
        and "schedule.warmup_steps=10 outlasts the run (steps=3)" in summary["flags"][0]
    )
    assert "run completed (flagged: its numbers are suspect)" in r.stdout + r.stderr
    assert "  flagged    schedule.warmup_steps=10 outlasts the run" in r.stdout + r.stderr


def test_a_loss_orders_of_magnitude_above_a_trivial_predictors_is_flagged():
    from conftest import compose_train

    from lnbench.training.flags import suspect

    cfg = compose_train(["steps=10"])
    assert suspect(cfg, {"loss": 0.15}, 1 / 6) == [] and suspect(cfg, {"loss": 16.0}, 1 / 6) == []
    (flag,) = suspect(cfg, {"loss": 2.5e14}, 1 / 6)
    assert flag.startswith("final val loss 2.5e+14 is 1.5e+15 x a trivial predictor's (0.167)")
    assert suspect(cfg, {"loss": float("nan")}, 1 / 6) == [] and suspect(cfg, {"loss": 1e9}, None) == []


# ---- sizes that cannot fit ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides,says",
    [
        (["dataset.batch_size=1000000000"], "dataset.batch_size=1000000000 is not allowed here"),
        # the cases fit (160 MB), the activations kept for their backward do not
        (
            ["dataset.batch_size=100000", "dataset.seq_len=200", "model.hidden_size=512"],
            "a training batch of this model",
        ),
        (["dataset.val_size=1000000000"], "dataset.val_size=1000000000 is not allowed here"),
        (
            ["dataset=copy", "dataset.seq_len=21", "dataset.batch_size=1000000000"],
            "dataset.batch_size=1000000000 is not allowed here",
        ),
    ],
)
def test_a_batch_or_set_too_big_for_memory_is_refused_before_it_is_made(overrides, says, tmp_path, capsys):
    (line,) = refused([*TINY_CLI, *overrides, f"hydra.run.dir={tmp_path}/run"], capsys)
    assert says in line and "GB of memory is available. Use " in line


def test_a_sweeps_job_too_big_for_memory_fails_alone(tmp_path):
    r = run_cli("train", "-m", *TINY_CLI, "steps=2", "dataset.batch_size=8,1000000000", f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert summary_of(tmp_path / "0")["status"] == "completed"
    failed = summary_of(tmp_path / "1")
    assert failed["status"] == "failed" and "dataset.batch_size=1000000000 is not allowed here" in failed["error"]


def test_a_big_sweep_composes_each_value_of_each_axis_before_it_starts():
    from omegaconf import OmegaConf

    from lnbench.launch.preflight import ALL_JOBS_UP_TO, sweep_jobs

    master = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {
                    "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "params": {"seed": "0,1,2,3,4"},
                },
                "overrides": {"task": ["model=lstm,ln_lstm,gru", "optim.lr=1,2"]},
            }
        }
    )
    jobs = sweep_jobs(master)
    assert 5 * 3 * 2 > ALL_JOBS_UP_TO and len(jobs) == 5 + 3 + 2
    values = {o for job in jobs for o in job}
    assert values == {f"seed={i}" for i in range(5)} | {
        "model=lstm",
        "model=ln_lstm",
        "model=gru",
        "optim.lr=1",
        "optim.lr=2",
    }
    master.hydra.sweeper.params = {"seed": "0,1"}
    assert sweep_jobs(master) == [
        list(j)
        for j in itertools.product(
            ["seed=0", "seed=1"], ["model=lstm", "model=ln_lstm", "model=gru"], ["optim.lr=1", "optim.lr=2"]
        )
    ]
    assert json.dumps(jobs)  # plain lists of strings, for Hydra's loader


@pytest.mark.parametrize(
    "launcher,runs,remote",
    [
        ("basic", "in-process", False),
        ("joblib", "forked", False),
        ("warm", "forked", False),
        ("packed", "in-process", False),
        ("submitit_local", "process per job", False),
        ("submitit_slurm", "process per job", True),
        ("slurm", "process per job", True),
    ],
)
def test_each_launcher_is_known_by_its_class(launcher, runs, remote):
    """What a signal means depends on it: a stopped local sweep marks itself, a SLURM job's SIGTERM is SLURM's."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from conftest import compose_train
    from hydra import compose, initialize_config_dir

    from lnbench.config.launchers import named
    from lnbench.launch.entry import CONF_DIR
    from lnbench.launch.preflight import launcher_kind

    compose_train()  # registers the schemas
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    kind = launcher_kind(cfg)
    assert (kind.runs, kind.remote) == (runs, remote)
    assert kind == named(launcher)  # by its class, or by its name in hydra/launcher: the same record
