"""`lnbench report` on sweep directories built by hand: the files a job leaves, no training."""

import contextlib
import io
import json
import os

import pytest
import yaml

from lnbench import report
from lnbench.report import analysis, make, page
from lnbench.report.cli import parse_targets
from lnbench.runs import load_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_job(
    root,
    num,
    overrides,
    *,
    errors=(0.5, 0.2, 0.1),
    status="completed",
    error=None,
    torn=False,
    model=None,
    config=None,
    provenance=None,
):
    """One Hydra job directory: .hydra/{overrides,config,hydra}.yaml, metrics.jsonl, summary.json."""
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    pairs = dict(o.lstrip("+").split("=", 1) for o in overrides)
    model = model or pairs.get("model", "ln_mlp")
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    (job / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump(config or {"seed": 0, "dataset": {"batch_size": 128}, "steps": 30})
    )
    (job / ".hydra" / "hydra.yaml").write_text(
        yaml.safe_dump({"hydra": {"runtime": {"choices": {"model": model, "dataset": "mnist"}}}})
    )
    lines = []
    for i, err in enumerate(errors):
        step = 10 * (i + 1)
        lines.append(
            {
                "step": step,
                "split": "train",
                "epoch": step / 20,
                "samples": step * 4,
                "lr": 1e-3,
                "loss": 2 * err,
                "error": err,
                "time": step / 10,
            }
        )
        lines.append(
            {
                "step": step,
                "split": "val",
                "epoch": step / 20,
                "samples": step * 4,
                "loss": 2 * err,
                "error": err,
                "time": step / 10 + 0.05,
            }
        )
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if torn:
        text += '{"step": 40, "split": "tra'
    if errors:
        (job / "metrics.jsonl").write_text(text)
    summary = {
        "status": status,
        "primary_metric": "error",
        "baseline": 2.3026,
        "steps": 10 * len(errors),
        "time_per_step": 0.01,
    }
    if status == "completed":
        summary.update(final_val={"error": errors[-1]}, best_val={"error": min(errors)})
    if error:
        summary["error"] = error
    if provenance is not None:
        summary["provenance"] = provenance
    (job / "summary.json").write_text(json.dumps(summary))
    return job


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """model {mlp, ln_mlp} x batch {4, 128} x seed {0, 1}, plus BN at batch 4 failing, plus one torn file."""
    root = tmp_path_factory.mktemp("sweep")
    num = 0
    for model in ("mlp", "ln_mlp"):
        for batch in (4, 128):
            for seed in (0, 1):
                slow = 1.0 if model == "mlp" else 0.5
                errors = tuple(e * slow + 0.01 * seed for e in (0.6, 0.3, 0.2))
                make_job(
                    root,
                    num,
                    [f"model={model}", f"dataset.batch_size={batch}", f"seed={seed}", "+experiment=fig6_mnist"],
                    errors=errors,
                    torn=(num == 3),
                )
                num += 1
    make_job(
        root,
        num,
        ["model=bn_mlp", "dataset.batch_size=4", "seed=0", "+experiment=fig6_mnist"],
        errors=(),
        status="failed",
        error="ConfigError: dataset.batch_size=1 is not allowed with batch normalization",
    )
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


@pytest.fixture(scope="module")
def swept(sweep):
    """The sweep's report, made once (plotting is the slow part): its Markdown and what the command printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report.main([str(sweep)]) == 0
    return (sweep / "report" / "report.md").read_text(), out.getvalue()


def run_report(root, *args):
    assert report.main([str(root), *args]) == 0
    return (root / "report" / "report.md").read_text()


def table_only(root, targets=None):
    """The Markdown of a report without its plots, for checks of the numbers."""
    rep = report.make_report(root, report.load_runs(root), targets or {}, x_axes=())
    return page.render_markdown(rep)


def test_writes_plots_markdown_and_html(sweep, swept):
    md, out = swept
    files = {p.name for p in (sweep / "report").iterdir()}
    assert {"report.md", "report.html", "curves_step.png", "curves_epoch.png", "curves_time.png"} <= files
    assert not [n for n in files if n.endswith(".tmp")]  # written atomically, no temp files left
    umask = os.umask(0)
    os.umask(umask)
    assert (sweep / "report" / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask  # readable by others
    for name in ("curves_step.png", "curves_epoch.png", "curves_time.png"):
        assert (sweep / "report" / name).read_bytes().startswith(PNG_MAGIC)
        assert str(sweep / "report" / name) in out  # the command prints every path
    html = (sweep / "report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "<table>" in html
    assert "| dataset.batch_size | model | runs | status |" in out  # and the table
    assert "![curves_step.png](curves_step.png)" in md


def test_table_columns_and_rows(sweep, swept):
    md = swept[0]
    header = next(line for line in md.splitlines() if line.startswith("| dataset.batch_size"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[:7] == [
        "dataset.batch_size",
        "model",
        "runs",
        "status",
        "final val error",
        "best val error",
        "test error",
    ]
    assert columns[7:10] == ["error target", "steps to error target", "seconds to error target"]
    assert columns[-1] == "ms/step"
    rows = [line for line in md.splitlines() if line.startswith("| 4 ") or line.startswith("| 128 ")]
    # panels by batch (numeric order), lines in the order the sweep ran them; ★ the best of each panel
    assert [r.split("|")[1:3] for r in rows] == [
        [" 4 ", " mlp "],
        [" 4 ", " ln_mlp ★ "],
        [" 4 ", " bn_mlp "],
        [" 128 ", " mlp "],
        [" 128 ", " ln_mlp ★ "],
    ]


def test_seeds_are_aggregated_mean_and_spread(sweep, swept):
    md = swept[0]
    row = next(line for line in md.splitlines() if line.startswith("| 128 | ln_mlp"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2 (seed 0,1)"
    assert cells[4] == "0.105 ± 0.0071"  # final val error: mean ± standard deviation over seeds 0 and 1


def test_failed_job_is_listed_with_its_error(swept):
    md, out = swept
    # refused before training, in a panel where other models trained: its row says why
    row = next(line for line in md.splitlines() if "bn_mlp" in line and line.startswith("| 4"))
    assert "failed: ConfigError: dataset.batch_size=1 is not allowed" in row
    assert "## Failures" in md and "`8`: **failed**: ConfigError" in md
    assert "1 failed" in md and "## Not trained" not in md
    assert "Failures:" in out


def test_job_failed_during_training_keeps_its_row(tmp_path):
    make_job(tmp_path, 0, ["model=mlp"])
    make_job(tmp_path, 1, ["model=ln_mlp"], errors=(0.5,), status="failed", error="RuntimeError: out of memory")
    md = table_only(tmp_path)
    row = next(line for line in md.splitlines() if line.startswith("| ln_mlp"))
    assert "failed: RuntimeError: out of memory" in row
    assert "## Failures" in md and "`1`: **failed**: RuntimeError" in md


def test_torn_last_line_is_flagged_and_the_rest_is_used(sweep, swept):
    md = swept[0]
    torn = md.split("## Torn metrics", 1)[1]
    assert "`3`" in torn and "cut off" in torn
    run = load_run(sweep / "3", sweep)
    assert run.unreadable == 1 and len(run.records) == 6


def test_axes_come_from_overrides(sweep):
    runs = report.load_runs(sweep)
    lay = analysis.layout(runs)
    assert (lay.line, lay.panels, lay.seeds) == ("model", ["dataset.batch_size"], ["seed"])
    assert lay.fixed == {"experiment": "fig6_mnist"}


def test_an_axis_a_job_did_not_override_comes_from_its_config(tmp_path):
    make_job(tmp_path, 0, ["model=mlp"])
    make_job(tmp_path, 1, ["model=ln_mlp", "dataset.batch_size=4"])
    runs = report.load_runs(tmp_path)
    assert [r.value("dataset.batch_size") for r in runs] == [128, 4]  # 128 from job 0's config.yaml
    assert analysis.layout(runs).panels == ["dataset.batch_size"] and analysis.layout(runs).line == "model"


def test_default_target_is_what_the_slowest_completed_run_of_the_panel_reaches(sweep):
    runs = report.load_runs(sweep)
    assert analysis.default_target(runs, "error") == pytest.approx(0.21)  # mlp, seed 1: best 0.2 + 0.01
    md = table_only(sweep)
    assert "per panel, the best validation error of its slowest-converging completed run" in md
    row = next(line for line in md.splitlines() if line.startswith("| 4 | ln_mlp"))
    assert "| 0.21 | 20 | 2.05 |" in row  # ln_mlp reaches 0.21 at its second validation (step 20, 2.05 s)


def test_explicit_target_and_one_that_is_never_reached(sweep):
    assert parse_targets(["0.3", "loss=1"]) == {make.PRIMARY: 0.3, "loss": 1.0}
    md = table_only(sweep, parse_targets(["error=0.105"]))
    row = next(line for line in md.splitlines() if line.startswith("| 4 | mlp"))
    assert "error target 0.105 (--target)" in md and "| 0.105 | — | — |" in row  # mlp never gets to 0.105
    row = next(line for line in md.splitlines() if line.startswith("| 4 | ln_mlp"))
    assert "| 30 [1/2] |" in row  # only seed 0 reaches 0.105: counted, not hidden


def test_a_single_run_directory(tmp_path):
    job = make_job(tmp_path, "run", ["model=ln_mlp"])
    md = run_report(job)
    assert "| ln_mlp | 1 | completed |" in md
    assert (job / "report" / "curves_step.png").is_file()


def test_a_killed_run_without_summary_is_incomplete(tmp_path):
    job = make_job(tmp_path, 0, ["model=ln_mlp"])
    (job / "summary.json").unlink()
    md = table_only(tmp_path)
    assert "incomplete" in md and "## Failures" in md


def test_report_of_a_report_ignores_its_own_output(sweep, swept):
    assert len(report.load_runs(sweep)) == 9  # report/ is not a run


def test_nothing_to_report_is_a_clear_error(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "no runs under" in capsys.readouterr().err
    assert report.main([str(tmp_path / "missing")]) == 2
