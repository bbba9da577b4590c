"""`lnbench report` as a comparison tool: several directories, folders of single runs, running jobs,
interpolated config values, provenance, the legend, and options that name nothing."""

import fcntl
import json

import pytest
import yaml

from lnbench import report
from lnbench.report import analysis, page, plots
from lnbench.report.analysis import group_runs, layout
from lnbench.runs import load_run, load_runs
from tests.report.test_report import make_job

PROV = {
    "git_commit": "0123456789abcdef",
    "git_dirty": False,
    "lnbench_version": "0.1.0",
    "torch_version": "2.13.0",
    "hydra_core_version": "1.3.8",
    "omegaconf_version": "2.3.0",
    "wandb_version": "0.22.0",
    "python": "3.11.2",
    "os": "Linux 6.1",
    "host": "vm",
    "cpu": "Xeon",
    "cpu_count": 2,
    "torch_threads": 1,
    "device": "cpu",
}


def sweep_of(root, models, seeds=(0, 1), batch=None, provenance=None):
    num = 0
    for model in models:
        for seed in seeds:
            extra = [f"dataset.batch_size={batch}"] if batch else []
            make_job(
                root,
                num,
                [f"model={model}", f"seed={seed}", *extra],
                errors=(0.6 - 0.01 * num, 0.3, 0.2 - 0.01 * num),
                provenance=provenance,
            )
            num += 1
    return root


def err(capsys):
    return capsys.readouterr().err


# ---- options that name nothing ----------------------------------------------------------------
@pytest.mark.parametrize(
    "args, named",
    [
        (["--panels", "dataset.batchsize"], "--panels 'dataset.batchsize' is no config key"),
        (["--lines", "modle"], "--lines 'modle' is no config key"),
        (["--tune", "optim.learning_rate"], "--tune 'optim.learning_rate' is no config key"),
        (["--target", "accuracy=0.9"], "--target 'accuracy': no run logged a validation accuracy"),
        (["--target", "error=low"], "--target 'error=low' is not METRIC=NUMBER"),
        (["--lines", "model", "--panels", "model"], "--lines 'model' is also in --panels"),
    ],
)
def test_options_naming_nothing_are_refused_and_nothing_is_written(tmp_path, capsys, args, named):
    sweep_of(tmp_path, ["mlp", "ln_mlp"])
    assert report.main([str(tmp_path), *args]) == 2
    message = err(capsys)
    assert named in message and "Traceback" not in message and message.count("\n") == 1  # one paragraph
    assert not (tmp_path / "report").exists()


def test_refusal_names_what_exists(tmp_path, capsys):
    sweep_of(tmp_path, ["mlp", "ln_mlp"])
    assert report.main([str(tmp_path), "--panels", "dataset.batchsize"]) == 2
    message = err(capsys)
    assert "Keys that vary between them: model, seed" in message and "did you mean dataset.batch_size" in message
    assert report.main([str(tmp_path), "--target", "accuracy=0.9"]) == 2
    assert "Metrics they logged: error, loss" in err(capsys)


def test_an_existing_key_that_does_not_vary_is_accepted(tmp_path):
    sweep_of(tmp_path, ["mlp", "ln_mlp"])
    assert report.main([str(tmp_path), "--panels", "dataset.batch_size", "--target", "loss=0.5"]) == 0


# ---- several directories ----------------------------------------------------------------------
def test_two_sweeps_in_one_report(tmp_path, capsys):
    a = sweep_of(tmp_path / "day" / "10-00-00", ["mlp", "ln_mlp"], batch=4)
    b = sweep_of(tmp_path / "day" / "11-00-00", ["mlp", "ln_mlp"], batch=128)
    assert report.main([str(a), str(b)]) == 2 and "--out" in err(capsys)  # DIR/report is each one's own
    out = tmp_path / "cmp"
    assert report.main([str(a), str(b), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert not (a / "report").exists() and (out / "curves_step.png").is_file()
    header = next(line for line in md.splitlines() if line.startswith("| dataset.batch_size"))
    assert header.startswith("| dataset.batch_size | model | runs |")  # the sweeps differ in batch: that is the panel
    rows = [line for line in md.splitlines() if line.startswith("| 4 ") or line.startswith("| 128 ")]
    assert len(rows) == 4 and all("| 2 (seed 0,1) |" in r for r in rows)
    assert "progress of " + str(a) + ": 4 of 4 job(s) done (4 completed)" in md
    assert "progress of " + str(b) + ": 4 of 4 job(s) done" in md


def test_the_same_configuration_twice_is_told_apart_by_its_directory(tmp_path):
    a = sweep_of(tmp_path / "before", ["mlp", "ln_mlp"])
    b = sweep_of(tmp_path / "after", ["mlp", "ln_mlp"])
    runs = [r for root in (a, b) for r in report.load_runs(root, root.name)]
    assert runs[0].name == "before/0" and runs[-1].name == "after/3"
    lay = analysis.layout(runs)
    assert (lay.line, lay.panels, lay.seeds) == ("model", ["dir"], ["seed"])
    md = page.render_markdown(report.make_report(a, runs, {}, x_axes=(), roots=[a, b]))
    assert "| before | mlp |" in md and "| after | ln_mlp" in md


# ---- a folder of many single runs -------------------------------------------------------------
def test_a_folder_of_single_runs_is_grouped_and_refused_runs_are_listed(tmp_path):
    day = tmp_path / "runs" / "2026-11-22"
    make_job(day, "10-00-00", [])  # the defaults: model from Hydra's choices
    make_job(day, "10-05-00", ["model=mlp"])
    make_job(day, "10-10-00", ["model=mlp", "optim.lr=0.01"])
    make_job(day, "10-15-00", ["optim.lr=0.01"])
    make_job(
        day,
        "10-20-00",
        ["model=bn_mlp", "dataset.batch_size=1"],
        errors=(),
        status="failed",
        error="ConfigError: dataset.batch_size=1 is not allowed with batch normalization",
    )
    make_job(day, "10-25-00", ["model=mlp", "resume=/somewhere/else", "progress=false"])
    runs = report.load_runs(day)
    rep = report.make_report(day, runs, {}, x_axes=("step",))
    # grouped by what differs: the model (lines) and optim.lr (panels); batch_size only differed in the refused run,
    # resume and progress say how a run went, not what it computed
    assert (rep.lay.line, rep.lay.panels) == ("model", ["optim.lr"])
    cells = {(g.panel, g.line): sorted(r.name for r in g.runs) for g in rep.groups}
    assert cells == {
        ((None,), "ln_mlp"): ["10-00-00"],
        ((None,), "mlp"): ["10-05-00", "10-25-00"],
        ((0.01,), "mlp"): ["10-10-00"],
        ((0.01,), "ln_mlp"): ["10-15-00"],
    }
    md = page.render_markdown(rep)
    assert "bn_mlp" not in md.split("## Not trained")[0]  # no row, no panel
    assert "`10-20-00` (model=bn_mlp dataset.batch_size=1): **failed**: ConfigError" in md


def test_panels_of_different_datasets_rank_by_their_own_metric(tmp_path):
    make_job(tmp_path, 0, ["model=mlp", "dataset=mnist"])
    make_job(tmp_path, 1, ["model=ln_mlp", "dataset=mnist"])
    for i, model in enumerate(["lstm", "ln_lstm"]):
        job = make_job(
            tmp_path, 2 + i, [f"model={model}", "dataset=adding"], errors=(), status="failed"
        )  # rewritten below
        lines = [
            {"step": s, "split": split, "loss": 0.2 / s, "mse": (0.2 + 0.1 * i) / s, "time": s / 10}
            for s in (10, 20)
            for split in ("train", "val")
        ]
        (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        (job / "summary.json").write_text(
            json.dumps({"status": "completed", "primary_metric": "mse", "baseline": 0.1667})
        )
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    assert rep.lay.panels == ["dataset"] and {g.panel: g.metric for g in rep.groups} == {
        ("mnist",): "error",
        ("adding",): "mse",
    }
    md = page.render_markdown(rep)
    assert "| dataset | model | runs | status | val metric | final val | best val | test | target |" in md
    assert (
        "| adding | lstm ★ | 1 | completed | mse | 0.01 |" in md
        and "| mnist | mlp ★ | 1 | completed | error | 0.1 |" in md
    )
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    # each dataset on a scale of its own, also for the training loss (issue 32: DRAW's nats beside adding's mse)
    assert [ax.get_ylabel() for ax in fig.axes] == ["train loss", "train loss", "val error", "val mse"]


def test_many_panels_wrap_into_rows(tmp_path):
    for i, seq_len in enumerate((10, 20, 30, 40, 50, 60)):
        make_job(tmp_path, 2 * i, [f"dataset.seq_len={seq_len}", "model=lstm"])
        make_job(tmp_path, 2 * i + 1, [f"dataset.seq_len={seq_len}", "model=ln_lstm"])
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 12 and fig.get_figwidth() == pytest.approx(4.6 * plots.PANELS_PER_ROW)


# ---- the legend ------------------------------------------------------------------------------
def six_lines(root):
    names = [
        "mlp",
        "ln_mlp",
        "bn_mlp",
        "wn_mlp",
        "rms_mlp",
        "a_model_preset_with_a_rather_long_name_that_goes_on_and_on_and_on",
    ]
    for i, name in enumerate(names):
        make_job(root, i, [f"model={name}"], errors=(0.6 - 0.05 * i, 0.3, 0.1 + 0.01 * i))
    return root


@pytest.mark.parametrize("panels", [1, 2])
def test_six_lines_legend_lies_inside_the_figure(tmp_path, panels):
    six_lines(tmp_path)
    if panels == 2:
        for i in range(6):
            make_job(
                tmp_path,
                10 + i,
                [f"model={load_run(tmp_path / str(i), tmp_path).value('model')}", "dataset.batch_size=4"],
            )
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    assert len({g.line for g in rep.groups}) == 6
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    fig.canvas.draw()  # lays the figure out as savefig does
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == 7 and any("\n" in t for t in texts)  # 6 lines and the trivial predictor; the long name wraps
    for ax in fig.axes:  # and it overlaps no plot
        assert not box.overlaps(ax.get_tightbbox(renderer)) or box.y0 >= ax.get_window_extent(renderer).y1


# ---- interpolations ---------------------------------------------------------------------------
def test_interpolations_show_the_value_the_run_used(tmp_path):
    torch = pytest.importorskip("torch")
    config = {
        "seed": 0,
        "steps": "${lnbench.epochs:2,${dataset.batch_size},8000}",
        "dataset": {"batch_size": 4, "data_dir": "${oc.env:LNBENCH_DATA_DIR,../shared/data}"},
    }
    a = make_job(tmp_path, 0, ["model=mlp", "dataset.batch_size=4"], config=config)
    make_job(
        tmp_path,
        1,
        ["model=mlp", "dataset.batch_size=128"],
        config={**config, "dataset": {**config["dataset"], "batch_size": 128}},
    )
    torch.save(
        {"config": {"steps": 4000, "dataset": {"batch_size": 4, "data_dir": "/data/a"}}, "step": 30},
        a / "checkpoint.pt",
    )
    runs = report.load_runs(tmp_path)
    assert runs[0].value("steps") == 4000 and runs[0].value("dataset.data_dir") == "/data/a"
    # no checkpoint: resolved from the job's config when nothing outside it is read, else never the raw ${...}
    assert runs[1].value("steps") == 2 * (8000 // 128) and runs[1].value("dataset.data_dir") == "(not recorded)"
    rep = report.make_report(tmp_path, runs, {}, panels=["steps"], x_axes=("step",))
    md, html = page.render_markdown(rep), page.render_html(rep)
    assert "${" not in md and "${" not in html
    assert "| 4000 | 4 |" in md and f"| {2 * (8000 // 128)} | 128 |" in md  # panels: steps; lines: the batch size
    rep = report.make_report(tmp_path, runs, {}, panels=["dataset.data_dir"], x_axes=())
    assert "| /data/a | 4 |" in page.render_markdown(rep) and "| (not recorded) | 128 |" in page.render_markdown(rep)


def test_an_interpolated_override_is_resolved_too(tmp_path):
    torch = pytest.importorskip("torch")
    a = make_job(tmp_path, 0, ["model=mlp", "dataset.data_dir=${oc.env:HOME}/data"])
    torch.save({"config": {"dataset": {"data_dir": "/home/me/data"}}}, a / "checkpoint.pt")
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    assert "${" not in page.render_markdown(rep)
    assert report.load_runs(tmp_path)[0].value("dataset.data_dir") == "/home/me/data"


# ---- running jobs -----------------------------------------------------------------------------
def test_a_running_job_is_running_not_failed_and_counted(tmp_path):
    for i, model in enumerate(["mlp", "ln_mlp"]):
        make_job(tmp_path, i, [f"model={model}"])
    running = make_job(tmp_path, 2, ["model=bn_mlp"], errors=(0.5, 0.3))
    (running / "summary.json").unlink()  # lnbench writes it when the run ends
    killed = make_job(tmp_path, 3, ["model=wn_mlp"], errors=(0.5,))
    (killed / "summary.json").unlink()
    (killed / ".lock").write_text("pid 1 on elsewhere\n")  # a lock file nobody holds
    (tmp_path / "multirun.yaml").write_text(
        yaml.safe_dump(
            {
                "hydra": {
                    "sweeper": {"params": {"model": "mlp,ln_mlp,bn_mlp,wn_mlp,rms_mlp"}},
                    "overrides": {"task": ["seed=0,1", "+experiment=fig6_mnist"]},
                }
            }
        )
    )
    with open(running / ".lock", "a+") as lock:  # what lnbench.runs.RunLock does for the run's life
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("pid 1 on vm\n")
        lock.flush()
        runs = report.load_runs(tmp_path)
        assert [r.status for r in runs] == ["completed", "completed", "running", "incomplete"]
        md = page.render_markdown(report.make_report(tmp_path, runs, {}, x_axes=()))
    assert (
        f"progress of {tmp_path}: 2 of 10 job(s) done (2 completed), 1 running, "
        "1 stopped without a summary (killed?), 6 not started yet" in md
    )
    assert "`2`: at step 20 of 30" in md.split("## Running")[1]
    failures = md.split("## Failures")[1]
    assert "`3`" in failures and "`2`" not in failures
    row = next(line for line in md.splitlines() if line.startswith("| bn_mlp"))
    assert "| running |" in row
    assert report.load_runs(tmp_path)[2].status == "incomplete"  # the lock released: it stopped


def test_a_running_job_without_metrics_yet_is_listed_as_running(tmp_path):
    make_job(tmp_path, 0, ["model=mlp"])
    job = make_job(tmp_path, 1, ["model=ln_mlp"], errors=(), status="running")
    (job / "summary.json").write_text(json.dumps({"status": "running"}))
    md = page.render_markdown(report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=()))
    assert "`1`: at step 0" in md.split("## Running")[1] and "## Not trained" not in md


# ---- provenance -------------------------------------------------------------------------------
def test_provenance_shared_once_differences_per_run(tmp_path):
    make_job(tmp_path, 0, ["model=mlp"], provenance=PROV)
    make_job(tmp_path, 1, ["model=ln_mlp"], provenance=PROV)
    make_job(tmp_path, 2, ["model=bn_mlp"], provenance={**PROV, "git_dirty": True, "torch_threads": 2, "gpu": "A100"})
    make_job(tmp_path, 3, ["model=wn_mlp"])  # made before provenance was recorded
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    md, html = page.render_markdown(rep), page.render_html(rep)
    shared = next(line for line in md.splitlines() if "provenance shared by the runs that recorded it" in line)
    assert "git_commit=0123456789" in shared and "torch_version=2.13.0" in shared and "host=vm" in shared
    assert "git_dirty" not in shared and "gpu" not in shared
    table = md.split("## Provenance that differs between runs")[1]
    assert "| runs | git_dirty | torch_threads | gpu |" in table
    assert "| 0, 1 | clean | 1 | — |" in table and "| 2 | dirty | 2 | A100 |" in table
    assert "no provenance recorded (made before lnbench recorded it): `3`" in md
    assert "Provenance that differs between runs" in html and "A100" in html


def test_provenance_all_alike_or_absent(tmp_path):
    make_job(tmp_path / "a", 0, ["model=mlp"], provenance=PROV)
    make_job(tmp_path / "a", 1, ["model=ln_mlp"], provenance=PROV)
    md = page.render_markdown(report.make_report(tmp_path / "a", report.load_runs(tmp_path / "a"), {}, x_axes=()))
    assert "provenance of every run: git_commit=0123456789, git_dirty=clean" in md and "differs" not in md
    make_job(tmp_path / "b", 0, ["model=mlp"])
    md = page.render_markdown(report.make_report(tmp_path / "b", report.load_runs(tmp_path / "b"), {}, x_axes=()))
    assert "provenance: not recorded by these runs" in md


def test_runs_that_differ_in_a_list_or_mapping_value_group_by_it(tmp_path):
    """A key whose value in the config is a list or a mapping (optim.betas, a logger's subtree) can tell runs
    apart: the report groups and sorts by it instead of failing on an unhashable value."""
    base = {"seed": 0, "dataset": {"batch_size": 128}, "steps": 30}
    make_job(tmp_path, 0, ["model=ln_mlp"], config={**base, "optim": {"betas": [0.9, 0.99]}, "logger": {"csv": {}}})
    make_job(tmp_path, 1, ["model=ln_mlp"], config={**base, "optim": {"betas": [0.8, 0.999]}, "logger": {}})
    runs = load_runs(tmp_path)
    assert {r.value("optim.betas") for r in runs} == {"[0.9,0.99]", "[0.8,0.999]"}
    lay = layout(runs, line="optim.betas", panels=["logger"])
    groups = group_runs(runs, lay)
    assert sorted(g.line for g in groups) == ["[0.8,0.999]", "[0.9,0.99]"]
    assert sorted(g.panel for g in groups) == [('{"csv":{}}',), ("{}",)]
