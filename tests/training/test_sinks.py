"""Metric sinks (lnbench.training.sinks): each chosen by a file in conf/logger/ and built from its own config
subtree; metrics.csv holds the rows of metrics.jsonl, also across a kill and a resume; a sink is added
without touching the Tracker or the loop; old `logger.*` keys still work on the command line."""

import csv
import dataclasses
import inspect
import logging
import os
import signal

import pytest
import torch
import yaml
from conftest import TINY_CLI, after_log, compose_train, metrics_without_time, run_cli, summary_of, tiny
from hydra.utils import get_class
from omegaconf import OmegaConf

from lnbench.atomic import read_jsonl
from lnbench.config.schema import SCHEMAS
from lnbench.config.validate import check_keys
from lnbench.errors import ConfigError, Interrupted
from lnbench.training import checkpoint
from lnbench.training.recipe import train

# Checkpoints at 0, 3, 6, 9, 10; a test at two more lengths at the end (each adds the eval_seq_len column).
RUN = ["steps=10", "log_every=2", "eval_every=4", "checkpoint_every=3", "dataset.batch_size=4", "test_seq_lens=[8,16]"]


def cfg_for(*extra):
    return tiny("ln_lstm", "adding", *RUN, "logger=[wandb,csv]", *extra)  # W&B disabled (conftest)


def csv_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def as_cells(records):
    """metrics.jsonl records as metrics.csv has them: text, no time, no empty cells."""
    return [{k: str(v) for k, v in r.items() if k != "time"} for r in records]


def csv_without_time(run_dir):
    return [{k: v for k, v in row.items() if v != "" and k != "time"} for row in csv_rows(run_dir)]


class Stop(Exception):
    """Stands in for SIGKILL: the run dies between two checkpoints."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference")
    train(cfg_for(), run_dir)
    return run_dir


# ---- metrics.csv ------------------------------------------------------------------------------
def test_csv_rows_are_the_rows_of_metrics_jsonl(reference):
    records, _ = read_jsonl(reference / "metrics.jsonl")
    rows = csv_rows(reference)
    assert [{k: v for k, v in row.items() if v != ""} for row in rows] == [
        {k: str(v) for k, v in r.items()} for r in records
    ]
    assert {r["split"] for r in rows} == {"train", "val", "test"} and len(rows) == 5 + 3 + 3
    # the header grew with the records: first the train keys, the test length last
    header = list(rows[0])
    assert header[:2] == ["step", "split"] and header[-1] == "eval_seq_len" and "lr" in header


@pytest.mark.parametrize("kill", ["mid-run", "after-the-header-grew"])
def test_resume_after_a_kill_writes_no_row_twice(kill, reference, tmp_path, monkeypatch):
    """Killed after step 4's row (checkpoint at 3), or after the first test row at another length (the
    header widened after the last checkpoint): the resumed run's metrics.csv equals the uninterrupted one."""
    when = (
        (lambda split, step, extra: split == "train" and step == 4)
        if kill == "mid-run"
        else (lambda split, step, extra: extra.get("eval_seq_len") == 8)
    )
    with monkeypatch.context() as m:
        after_log(m, when, lambda: (_ for _ in ()).throw(Stop()))
        with pytest.raises(Stop):
            train(cfg_for(), tmp_path)
    (tmp_path / "summary.json").unlink()  # a SIGKILL leaves none (the Stop exception made one)
    killed = csv_rows(tmp_path)
    assert killed[-1]["step"] == ("4" if kill == "mid-run" else "10") and len(killed) > checkpoint_rows(tmp_path)
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write("12,tra")  # a kill may tear the last row too
    train(cfg_for(), tmp_path)
    assert csv_without_time(tmp_path) == csv_without_time(reference)
    assert list(csv_rows(tmp_path)[0]) == list(csv_rows(reference)[0])  # the same header
    assert metrics_without_time(tmp_path) == metrics_without_time(reference)


def checkpoint_rows(run_dir):
    return torch.load(run_dir / checkpoint.FILE, weights_only=True)["sinks"]["csv"]["rows"]


# ---- a sink added from this file: no edit to the Tracker, the loop or conf/ ----------------------
class Recorder:
    """A sink as a user would write one: it keeps what it is given."""

    made: list["Recorder"] = []

    def __init__(self, *, run, resume, label="rec"):
        self.run, self.resume, self.label, self.rows, self.summary = run, resume, label, [], None
        self.where = f"memory:{label}"
        Recorder.made.append(self)

    def log(self, record):
        self.rows.append(dict(record))

    def state(self):
        return {"rows": len(self.rows) + (self.resume or {}).get("rows", 0)}

    def finish(self, summary):
        self.summary = summary


class Broken(Recorder):
    def log(self, record):
        raise OSError("the sink's disk is gone")


@pytest.fixture
def recorder():
    Recorder.made = []
    yield Recorder
    Recorder.made = []


def test_a_sink_defined_here_and_chosen_by_an_override_receives_every_row(recorder, tmp_path):
    cfg = tiny(
        "ln_lstm",
        "adding",
        "steps=4",
        "log_every=1",
        f"+logger.mine._target_={__name__}.Recorder",
        "+logger.mine.label=x",
    )
    summary = train(cfg, tmp_path, name="run name", group="g", tags=["t"])
    (sink,) = recorder.made
    assert sink.label == "x" and sink.resume is None  # its own subtree (no _target_), a new run
    assert (sink.run.run_dir, sink.run.name, sink.run.group, sink.run.tags) == (tmp_path, "run name", "g", ["t"])
    assert sink.run.config["model"]["hidden_size"] == 16 and isinstance(sink.run.config, dict)  # data, not a DictConfig
    assert sink.rows == read_jsonl(tmp_path / "metrics.jsonl")[0] and len(sink.rows) == 4 + 2 + 1
    assert sink.summary == summary == summary_of(tmp_path)
    assert torch.load(tmp_path / checkpoint.FILE, weights_only=True)["sinks"]["mine"] == {"rows": 6}


def test_a_sink_gets_back_its_state_on_resume(recorder, tmp_path, monkeypatch):
    cfg = tiny("ln_lstm", "adding", *RUN[:5], f"+logger.mine._target_={__name__}.Recorder")
    with monkeypatch.context() as m:
        after_log(
            m, lambda split, step, extra: split == "train" and step == 6, lambda: os.kill(os.getpid(), signal.SIGTERM)
        )
        with pytest.raises(Interrupted):
            train(cfg, tmp_path)
    train(cfg, tmp_path)
    first, second = recorder.made
    assert first.summary["status"] == "interrupted" and second.summary["status"] == "completed"
    assert second.resume == {"rows": len(first.rows)}  # what it said at the checkpoint of step 6
    assert first.rows + second.rows == read_jsonl(tmp_path / "metrics.jsonl")[0]


def test_a_sink_from_one_yaml_file_on_hydras_search_path(recorder, tmp_path):
    """The recipe of the README: a class and one file in a logger/ folder; chosen with the others."""
    (tmp_path / "conf" / "logger").mkdir(parents=True)
    (tmp_path / "conf" / "logger" / "recorder.yaml").write_text(
        f"recorder:\n  _target_: {__name__}.Recorder\n  label: from-yaml\n"
    )
    cfg = tiny("ln_lstm", "adding", "logger=[wandb,csv,recorder]", f"hydra.searchpath=[file://{tmp_path / 'conf'}]")
    assert set(cfg.logger) == {"wandb", "csv", "recorder"}
    train(cfg, tmp_path / "run")
    assert [s.label for s in recorder.made] == ["from-yaml"] and recorder.made[0].rows
    assert (tmp_path / "run" / "metrics.csv").is_file()


def test_a_sink_that_raises_is_turned_off_and_the_run_goes_on(recorder, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", f"+logger.bad._target_={__name__}.Broken"), tmp_path)
    assert summary["status"] == "completed" and len(read_jsonl(tmp_path / "metrics.jsonl")[0]) == 4
    assert (
        "the metric sink logger.bad failed at step 1 (OSError: the sink's disk is gone) and is turned off"
        in caplog.text
    )
    assert recorder.made[0].summary is None  # not called again
    # a resume continues it from the last checkpoint it was in (step 0's, before its failure)
    assert torch.load(tmp_path / checkpoint.FILE, weights_only=True)["sinks"]["bad"] == {"rows": 0}


# ---- choosing sinks ----------------------------------------------------------------------------
def test_each_choice_builds_its_sinks_and_metrics_jsonl_is_always_written(tmp_path):
    assert set(compose_train(["logger=[wandb,csv]"]).logger) == {"wandb", "csv"}
    assert set(compose_train(["logger=csv"]).logger) == {"csv"}
    cfg = compose_train(["logger=none", *tiny_args()])
    assert dict(cfg.logger) == {}
    train(cfg, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".jsonl", ".csv")) == ["metrics.jsonl"]
    assert summary_of(tmp_path)["wandb"] is None


def tiny_args():
    return [o for o in TINY_CLI if not o.startswith("logger")] + ["steps=2", "eval_every=2"]


@pytest.mark.parametrize(
    "override,message",
    [
        ("+logger.nope=1", "logger.nope=1 is not allowed: each logger entry is a metric sink's config with a _target_"),
        ("+logger.jsonl._target_=x.Y", "metrics.jsonl is written by every run"),
        ("logger.wandb.init_timeout=0", "logger.wandb.init_timeout=0.0 is not allowed"),
        ("+logger.x._target_=nope.Nope", "logger.x._target_=nope.Nope is not allowed: it cannot be imported"),
    ],
)
def test_a_logger_entry_that_is_no_sink_is_refused(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        check_keys(
            compose_train(["model.hidden_size=8", override])
        )  # what a sweep checks before its jobs; validate calls it


def test_a_sink_that_cannot_be_built_is_bad_input_naming_its_key(tmp_path):
    with pytest.raises(ConfigError, match="logger.x"):
        train(
            tiny(
                "ln_lstm",
                "adding",
                "+logger.x._target_=lnbench.training.sinks.csv_file.CsvSink",
                "+logger.x.colour=red",
            ),
            tmp_path,
        )


@pytest.mark.parametrize("name,schema", list(SCHEMAS["logger"].items()))
def test_a_sinks_defaults_are_its_schemas_only(name, schema):
    """One copy of each default: a sink's constructor takes every schema field, and defaults none of them."""
    params = inspect.signature(get_class(schema._target_).__init__).parameters
    fields = {f.name for f in dataclasses.fields(schema)} - {"_target_"}
    assert set(params) - {"self", "run", "resume"} == fields
    assert all(params[f].default is inspect.Parameter.empty for f in fields)
    preset = yaml.safe_load((get_conf_dir() / "logger" / f"{name.removeprefix('base_')}.yaml").read_text())
    assert set(preset) == {"defaults"}  # the preset only selects its schema


def get_conf_dir():
    from lnbench import CONF_DIR

    return CONF_DIR


# ---- what users typed before ---------------------------------------------------------------------
def test_old_logger_keys_still_work_on_the_command_line(tmp_path):
    r = run_cli(
        "train",
        *tiny_args(),
        "logger.mode=disabled",
        "logger.project=old-project",
        "logger.tags=[a]",
        f"hydra.run.dir={tmp_path}",
    )
    assert r.returncode == 0, r.stderr
    assert "logger.mode is now logger.wandb.mode; the old name still works" in r.stderr
    saved = OmegaConf.load(tmp_path / ".hydra" / "config.yaml").logger.wandb
    assert (saved.mode, saved.project, list(saved.tags)) == ("disabled", "old-project", ["a"])
    assert summary_of(tmp_path)["status"] == "completed" and not (tmp_path / "wandb").exists()


def test_check_runs_without_w_and_b_unless_a_logger_key_is_given():
    from lnbench.check import cli as check

    assert "logger=none" in check.sweep_command(check.parse_args([]), "pmnist")
    for given in (["logger.mode=online"], ["logger.wandb.mode=online"], ["logger=[wandb,csv]"]):
        cmd = check.sweep_command(check.parse_args(given), "pmnist")
        assert "logger=none" not in cmd and cmd[-1] == given[0]
