"""A claim preset of your own (experiment/<name>.yaml with `claims:` in your defaults folder) is one `lnbench check`
runs, as it runs lnbench's: found where Hydra finds presets (lnbench.config.presets), composed by Hydra through the
folder's search path plugin, judged and put on the check's page."""

import json

import pytest

from lnbench.check.args import CheckError, check_overrides, claim_presets, parse_args
from lnbench.cli import main

MINE = """\
# @package _global_
# My own claim, tiny: LN's gain initialised at 1.0 vs 0.1 on a short adding problem.
defaults:
  - override /model: ln_lstm
  - override /dataset: adding

model:
  hidden_size: 8
dataset:
  seq_len: 8
  val_size: 16
  test_size: 16
  batch_size: 8
steps: 3
eval_every: 3
log_every: 1
checkpoint_every: 100000
threads: 1

tune: [optim.lr]
claims:
  - id: mine.gain_1.0_beats_0.1
    text: "LN with gain 1.0 beats 0.1 (validation mse), tiny"
    better: 1.0
    than: 0.1
    metric: val/mse
    measure: final

hydra:
  sweeper:
    params:
      model.norm.gain_init: 1.0,0.1
      optim.lr: 0.01
      seed: 0,1,2
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(MINE)
    (tmp_path / "experiment" / "no_claims.yaml").write_text("# @package _global_\nsteps: 3\n")
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", str(tmp_path))
    return tmp_path


def test_your_claim_preset_is_one_the_check_takes_and_composes(folder, tmp_path):
    assert "mine" in claim_presets() and "no_claims" not in claim_presets() and "ln_gain_init" in claim_presets()
    args = parse_args(["mine", "--out", str(tmp_path / "out"), "hydra/launcher=basic"])
    assert args.presets == ["mine"]
    check_overrides(args)  # its sweep composed by Hydra from your folder, each job validated
    with pytest.raises(CheckError, match="'no_claims' is not a claim preset"):
        parse_args(["no_claims"])


def test_without_your_folder_it_is_no_preset(folder, monkeypatch):
    monkeypatch.setenv("LNBENCH_CONFIG_DIR", "")
    with pytest.raises(CheckError, match="'mine' is not a claim preset"):
        parse_args(["mine"])


def test_a_preset_of_yours_that_is_not_yaml_is_refused_naming_it(folder, capsys, tmp_path):
    (folder / "experiment" / "bad.yaml").write_text("a: [1,\n")
    assert main(["check", "ln_gain_init", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lnbench: error: {folder / 'experiment' / 'bad.yaml'} is not YAML: line 2")
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_check_runs_your_claim_preset_end_to_end(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    argv = ["check", "mine", "--judging-seeds", "0", "--widen", "0", "hydra/launcher=basic", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    (verdict,) = json.loads((out / "claims.json").read_text())
    assert verdict["id"] == "mine.gain_1.0_beats_0.1" and verdict["preset"] == "mine"
    assert "| mine |" in (out / "check.md").read_text() and (out / "mine" / "report" / "report.html").is_file()
    assert len(list((out / "mine").glob("*/metrics.jsonl"))) == 6
