"""What a W&B user sees of an offline run, read back from its .wandb file (tests/wandb_file.py): name,
group, job type, tags, metric definitions, history and summary; a resumed run as one run. And W&B
trouble never costs results: no network, no key, or W&B raising mid-run, the run goes on, local metrics
stay complete and the log says how to sync later. W&B only ever sees loopback addresses here."""

import glob
import json
import logging
import signal

import pytest
from conftest import TINY_CLI, metrics_without_time, run_cli, summary_of, tiny

from lnbench.check import rounds
from lnbench.check.cli import Args, sweep_command
from lnbench.errors import Interrupted
from lnbench.training.recipe import train
from lnbench.training.tracker import run_group
from tests.wandb_file import payloads, read_offline_runs, read_run

RUN = ["steps=6", "log_every=2", "eval_every=3", "checkpoint_every=4"]


@pytest.fixture(autouse=True)
def isolated_wandb(tmp_path, monkeypatch):
    """W&B pointed at a closed loopback port, with its settings, cache and credentials in tmp_path."""
    for var in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NETRC", str(home / "netrc"))
    for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    import wandb

    if wandb.run is not None:
        wandb.run.finish()


@pytest.fixture(scope="module")
def local_only(tmp_path_factory):
    """The metrics of the same run with W&B disabled: what every run below must still write."""
    run_dir = tmp_path_factory.mktemp("local")
    train(tiny("ln_lstm", "adding", *RUN), run_dir)
    return metrics_without_time(run_dir)


def offline_folders(run_dir):
    return sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("key", [None, "a" * 40], ids=["no-key", "unreachable-server"])
def test_online_without_network_or_key_goes_on_offline(key, tmp_path, monkeypatch, caplog, local_only):
    if key:
        monkeypatch.setenv("WANDB_API_KEY", key)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(
        tiny("ln_lstm", "adding", *RUN, "logger.wandb.mode=online", "logger.wandb.init_timeout=5"), tmp_path / "run"
    )
    assert summary["status"] == "completed"
    assert metrics_without_time(tmp_path / "run") == local_only
    assert "W&B could not go online" in caplog.text and "wandb sync" in caplog.text
    assert "wandb sync" in summary["wandb"] and len(offline_folders(tmp_path / "run")) == 1


def test_wandb_raising_mid_run_costs_nothing(tmp_path, monkeypatch, caplog, local_only):
    from wandb.sdk.wandb_run import Run

    calls = []
    real = Run.log

    def log(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the W&B service went away")
        return real(self, *a, **k)

    monkeypatch.setattr(Run, "log", log)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", *RUN, "logger.wandb.mode=offline"), tmp_path / "run")
    assert summary["status"] == "completed"
    assert metrics_without_time(tmp_path / "run") == local_only
    assert "W&B failed at step" in caplog.text and "metrics.jsonl keeps every step" in caplog.text
    assert len(calls) == 3  # no more W&B calls after the failure


def test_wandb_finish_raising_costs_nothing(tmp_path, monkeypatch, caplog, local_only):
    from wandb.sdk.wandb_run import Run

    def finish(self, *a, **k):
        raise TimeoutError("upload did not finish")

    monkeypatch.setattr(Run, "finish", finish)
    caplog.set_level(logging.WARNING, "lnbench")
    summary = train(tiny("ln_lstm", "adding", *RUN, "logger.wandb.mode=offline"), tmp_path / "run")
    assert summary["status"] == "completed" and summary_of(tmp_path / "run")["status"] == "completed"
    assert "W&B did not finish cleanly" in caplog.text
    monkeypatch.undo()


def test_an_offline_run_reads_back_as_w_and_b_users_expect(tmp_path):
    cfg = tiny("bn_lstm", "adding", *RUN, "logger.wandb.mode=offline", "test_seq_lens=[12,48]")
    summary = train(
        cfg,
        tmp_path,
        name="bn_lstm · seq_len=12 · seed=0",
        group="seq_len_sweep 2026-11-22 13:05:01",
        tags=["model=bn_lstm", "dataset=adding", "norm=batch"],
    )
    run = read_offline_runs(tmp_path)

    assert run.name == "bn_lstm · seq_len=12 · seed=0" and run.group == "seq_len_sweep 2026-11-22 13:05:01"
    assert run.job_type == "train" and run.tags == ["model=bn_lstm", "dataset=adding", "norm=batch"]
    assert run.exit_code == 0 and not run.preempting
    assert run.config["model"]["norm"]["kind"] == "batch" and run.config["run_dir"] == str(tmp_path.resolve())

    # x axes: lnbench's step, and epoch / samples / seconds plotted against it; val metrics keep their min
    assert run.metrics["step"]["name"] == "step"
    for axis in ("epoch", "samples", "time"):
        assert run.metrics[axis]["step_metric"] == "step"
    assert run.metrics["val/*"]["step_metric"] == "step" and run.metrics["val/*"]["summary"] == {
        "min": True,
        "last": True,
    }
    val_mse = [row["val/mse"] for row in run.history if "val/mse" in row]
    assert len(val_mse) == 2 and run.summary["val/mse"] == {"min": min(val_mse), "last": val_mse[-1]}

    # history: numbers only, each under its split's section, at lnbench's own step
    assert all("split" not in row and not any(isinstance(v, str) for v in row.values()) for row in run.history)
    assert [row["step"] for row in run.history] == [row["_step"] for row in run.history] == [2, 3, 4, 6]
    assert {"train/loss", "train/grad_norm", "train/lr", "epoch", "samples", "time"} <= set(run.history[0])

    # summary: status, results, test at each length kept apart, params, ms/step, provenance
    assert run.summary["status"] == "completed" and run.summary["params"] == summary["params"]
    assert run.summary["ms_per_step"] == pytest.approx(summary["time_per_step"] * 1000, abs=1e-3)
    for key in ("final_val", "best_val", "test"):
        assert {k: run.summary[f"{key}/{k}"] for k in summary[key]} == summary[key]
    at_len = {n: {m: run.summary[f"test_at_len/{n}/{m}"] for m in ("loss", "mse")} for n in ("12", "48")}
    assert at_len == summary["test_at_len"] and at_len["12"] != at_len["48"]
    assert run.summary["provenance/torch_version"] == summary["provenance"]["torch_version"]
    assert {"provenance/python", "provenance/cpu", "provenance/torch_threads", "provenance/device"} <= set(run.summary)


def test_a_resumed_run_continues_as_the_same_wandb_run(tmp_path, monkeypatch):
    """Stopped by SIGTERM at step 6 of 8, then resumed: one run id, one name, two offline segments that
    `wandb sync` joins; the first marked preempting (not failed), the last one's status is the run's."""
    from lnbench.training.tracker import Tracker

    original = Tracker.log

    def log(self, split, step, values, **extra):
        original(self, split, step, values, **extra)
        if split == "train" and step == 6 and not getattr(Tracker, "stopped", False):
            Tracker.stopped = True
            raise Interrupted(signal.SIGTERM, step, self.run_dir)

    monkeypatch.setattr(Tracker, "log", log)
    cfg = tiny("ln_lstm", "adding", *RUN, "steps=8", "logger.wandb.mode=offline")
    with pytest.raises(Interrupted):
        train(cfg, tmp_path / "run", name="ln_lstm · seed=0")
    summary = train(cfg, tmp_path / "run", name="ln_lstm · seed=0")
    monkeypatch.delattr(Tracker, "stopped")

    folders = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    first, last = (read_run(next(f.glob("run-*.wandb"))) for f in folders)
    assert len(folders) == 2 and first.id == last.id and first.name == last.name == "ln_lstm · seed=0"
    assert first.preempting and first.summary["status"] == "interrupted"
    assert not last.preempting and last.exit_code == 0 and last.summary["status"] == "completed"
    # the sync hint names every segment of the run
    hint = summary["wandb"].split("`wandb sync ", 1)[1].rstrip("`)")
    assert sorted(glob.glob(hint)) == [str(f) for f in folders]
    assert read_offline_runs(tmp_path / "run").summary["status"] == "completed"


def test_report_run_holds_the_reports_tables_and_plots(tmp_path):
    """logger.wandb.report=true: after a sweep, one W&B run of job_type report in the sweep's group."""
    from omegaconf import OmegaConf

    from lnbench.report.wandb_page import log_report

    sweep = tmp_path / "2026-11-22" / "13-05-01-000001"
    for i, model in enumerate(["lstm", "ln_lstm"]):
        (sweep / str(i) / ".hydra").mkdir(parents=True)
        (sweep / str(i) / ".hydra" / "overrides.yaml").write_text(f"- model={model}\n")
        train(tiny(model, "adding", *RUN), sweep / str(i))
    (sweep / "report").mkdir()
    (sweep / "report" / "claims.json").write_text(
        json.dumps([{"claim": "LN faster", "verdict": "holds", "ci": [0.1, 0.2]}])
    )
    wandb = {**OmegaConf.to_container(tiny("ln_lstm", "adding").logger.wandb, resolve=True), "mode": "offline"}
    config = OmegaConf.create(
        {
            "logger": {"wandb": wandb},
            "hydra": {
                "runtime": {"choices": {}},
                "overrides": {"task": ["+experiment=[seq_len_sweep,smoke]"]},
                "sweep": {"dir": str(sweep)},
            },
        }
    )
    assert log_report(config, sweep) is not None
    run = read_offline_runs(sweep)
    assert run.job_type == "report" and run.group == "seq_len_sweep+smoke 2026-11-22 13:05:01"
    (row,) = run.history
    assert row["report/table/_type"] == "table-file" and row["report/table/nrows"] == 2
    assert row["report/claims/_type"] == "table-file" and row["report/claims/nrows"] == 1
    assert any(k.endswith("/_type") and row[k] == "image-file" for k in row)
    table = json.loads(next((sweep / "wandb").glob("offline-run-*/files/" + row["report/claims/path"])).read_text())
    assert table["columns"] == ["claim", "verdict", "ci"] and table["data"] == [["LN faster", "holds", "[0.1, 0.2]"]]
    # the pages as `lnbench report` writes them, an artifact of type report; the sweep's own report/ untouched
    (artifact,) = [a for a in artifacts(sweep) if a.type == "report"]  # (wandb.Table makes run_table ones)
    assert artifact.name == "report-seq_len_sweep-smoke-2026-11-22-13-05-01"
    assert {"report.md", "report.html", "claims.json"} <= {e.path for e in artifact.manifest.contents}
    assert sorted(p.name for p in (sweep / "report").iterdir()) == ["claims.json"]


def artifacts(run_dir):
    """The artifact records of a run's offline W&B files (tests/wandb_file.py reads the rest)."""
    from wandb.proto import wandb_internal_pb2 as pb

    found = []
    for path in (run_dir / "wandb").glob("offline-run-*/run-*.wandb"):
        for payload in payloads(path):
            record = pb.Record()
            record.ParseFromString(payload)
            if record.WhichOneof("record_type") == "artifact":
                found.append(record.artifact)
    return found


def test_a_cli_run_has_its_job_type_and_its_console_in_w_and_b(tmp_path):
    """logger.wandb.job_type as given (lnbench check's rounds give tune, widen, judge); the Logs tab: the run's
    console lines in files/output.log, offline too, and the run ends (no hang) with console capture on."""
    done = run_cli(
        "train",
        *TINY_CLI,
        "steps=4",
        "eval_every=2",
        "logger.wandb.mode=offline",
        "logger.wandb.job_type=tune",
        f"hydra.run.dir={tmp_path}",
        env={"WANDB_MODE": "offline"},
    )
    assert done.returncode == 0, done.stderr
    run = read_offline_runs(tmp_path)
    assert run.job_type == "tune" and run.exit_code == 0
    (logs,) = (tmp_path / "wandb").glob("offline-run-*/files/output.log")
    assert "step 4" in logs.read_text()  # the last val line, written after W&B started


def test_the_checks_runs_are_grouped_by_preset_with_the_round_as_job_type(tmp_path):
    """A group named once: lnbench check's outputs/check/fig6_mnist is `fig6_mnist` (was `fig6_mnist fig6_mnist`),
    the same group for every round of the preset; each round its job type."""
    assert run_group("fig6_mnist", "outputs/check/fig6_mnist") == "fig6_mnist"
    assert run_group("fig6_mnist", "/data/sweeps/lr_scan") == "fig6_mnist lr_scan"
    base = sweep_command(Args(["fig6_mnist"], out=tmp_path, overrides=["logger=wandb"]), "fig6_mnist")
    assert {"logger.wandb.group=fig6_mnist", "logger.wandb.job_type=tune"} <= set(base)
    cell = rounds.Cell({"model": "ln_mlp"}, {"model"}, "widen", [0])
    for name, job_type in (("widen-1", "widen"), ("judge-2", "judge")):
        (cmd,) = rounds.commands(base, tmp_path / "fig6_mnist", name, [cell], set())
        assert f"logger.wandb.job_type={job_type}" in cmd and "logger.wandb.job_type=tune" not in cmd
        assert "logger.wandb.group=fig6_mnist" in cmd
    quiet = sweep_command(Args(["fig6_mnist"], out=tmp_path), "fig6_mnist")  # logger=none: no W&B keys to set
    assert not any(a.startswith("logger.wandb.") for a in quiet)


def test_the_check_page_is_an_artifact_when_the_report_is_asked_for(tmp_path):
    from lnbench.report.wandb_page import log_check_pages

    out = tmp_path / "check"
    out.mkdir()
    for name in ("check.md", "check.html", "claims.json"):
        (out / name).write_text("{}" if name.endswith(".json") else f"the {name} page")
    assert log_check_pages(out, ["logger=wandb", "logger.wandb.mode=offline"]) is None  # not asked: no W&B run
    assert not (out / "wandb").exists()
    assert log_check_pages(out, ["logger.wandb.mode=offline", "logger.wandb.report=true"]) is not None
    run = read_offline_runs(out)
    assert (run.job_type, run.group, run.exit_code) == ("check", "check", 0)
    (artifact,) = artifacts(out)
    assert artifact.type == "check"
    assert {e.path for e in artifact.manifest.contents} == {"check.md", "check.html", "claims.json"}
