"""`hydra/launcher=packed` (lnbench.launch.sweep.pack): a sweep's jobs that differ only in seed and optimizer
scalars train as packs, each job in its own ordinary run directory; the others, and a model vmap cannot run, train
alone."""

import pytest
from conftest import TINY_CLI, needs_data, run_cli, summary_of
from omegaconf import OmegaConf

from lnbench.config.validate import validate_sweep
from lnbench.errors import ConfigError
from lnbench.runs import load_runs

PACKED = ["hydra/launcher=packed", "logger=none", "steps=4", "eval_every=2", "log_every=2"]


def test_a_packed_sweep_writes_ordinary_runs_that_the_report_reads(tmp_path):
    # two hidden sizes x two seeds: two packs of two (the hidden size is not a key a pack's runs may differ in)
    tiny = [a for a in TINY_CLI if not a.startswith(("logger.", "model.hidden_size"))]
    r = run_cli("train", "-m", *tiny, *PACKED, "model.hidden_size=4,8", "seed=0,1", f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "packing on a CPU" in r.stderr + r.stdout
    assert "4 completed" in r.stdout
    runs = {(run.value("model.hidden_size"), run.value("seed")): run for run in load_runs(tmp_path)}
    assert sorted(runs) == [(4, 0), (4, 1), (8, 0), (8, 1)]
    for run in runs.values():
        assert run.status == "completed" and run.summary["packed"] == 2 and run.summary["steps"] == 4
        assert (run.path / ".hydra" / "overrides.yaml").is_file() and (run.path / "checkpoint.pt").is_file()
        assert [r["step"] for r in run.records if r["split"] == "val"] == [2, 4]
        assert "val loss" in (run.path / "train.log").read_text()
    assert runs[(4, 0)].summary["params"] < runs[(8, 0)].summary["params"]
    from lnbench.report.cli import main as report

    assert report([str(tmp_path)]) == 0


@pytest.mark.parametrize("size", [0, -1, "two"])
def test_a_pack_size_below_one_is_refused(size):
    master = OmegaConf.create(
        {"hydra": {"launcher": {"_target_": "hydra_plugins.lnbench_packed.launcher.PackedLauncher", "size": size}}}
    )
    with pytest.raises(ConfigError, match=f"hydra.launcher.size={size!r} is not allowed.*integer >= 1"):
        validate_sweep(master)


@pytest.mark.slow
@needs_data
def test_a_model_that_draws_random_numbers_trains_alone(tmp_path):
    from conftest import DATA_DIR

    draw = [
        "model=ln_draw",
        "dataset=binarized_mnist",
        "model.glimpses=2",
        "model.hidden_size=8",
        "model.latent_size=4",
    ]
    data = [f"dataset.data_dir={DATA_DIR}", "dataset.carve=[64,32,32]", "dataset.batch_size=16"]
    r = run_cli(
        "train", "-m", *draw, *data, *PACKED, "threads=1", "device=cpu", "seed=0,1", f"hydra.sweep.dir={tmp_path}"
    )
    assert r.returncode == 0, r.stderr
    assert "trains alone: DRAW cannot run under vmap" in r.stderr + r.stdout
    for job in ("0", "1"):
        s = summary_of(tmp_path / job)
        assert s["status"] == "completed" and "packed" not in s
