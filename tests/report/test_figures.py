"""Figures that fit the runs (issue 32): a scale per dataset in a mixed folder, no epoch panel where an epoch means
nothing, the trivial predictor drawn wherever the legend lists it, a single evaluation drawn as a dot with its
seeds' range, and an automatic target that only a line that learned reaches."""

import json
import math

import pytest

from lnbench import report
from lnbench.report import plots
from lnbench.report.analysis import default_target, trivial_value
from tests.report.test_report import make_job


def job(root, num, overrides, baseline, metric, values, epochs=True, evals=None):
    """A completed run of `values` (train loss = val metric), logged every 10 steps; epochs 0 throughout where
    `epochs` is False (fresh data every step); validation at the steps `evals` (default: every log)."""
    path = make_job(root, num, overrides)
    steps = [10 * (i + 1) for i in range(len(values))]
    lines = []
    for step, v in zip(steps, values):
        common = {"step": step, "epoch": step / 20 if epochs else 0.0, "time": step / 10}
        lines.append({**common, "split": "train", "loss": v, metric: v})
        if evals is None or step in evals:
            lines.append({**common, "split": "val", "loss": v, metric: v})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = {
        "status": "completed",
        "primary_metric": metric,
        "baseline": baseline,
        "steps": steps[-1],
        "final_val": {metric: values[-1]},
    }
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def mixed(root):
    """A folder of single runs: DRAW-like nats on binarized MNIST, mse on the adding task (epoch always 0)."""
    job(root, 0, ["model=ln_draw", "dataset=binarized_mnist"], 205.0, "bound", [540.0, 400.0, 190.0])
    job(root, 1, ["model=ln_lstm", "dataset=adding"], 1 / 6, "mse", [0.3, 0.1, 0.001], epochs=False)
    job(root, 2, ["model=lstm", "dataset=adding"], 1 / 6, "mse", [0.3, 0.17, 0.166], epochs=False)
    return report.make_report(root, report.load_runs(root), {}, x_axes=())


def trivial_lines(ax) -> list[float]:
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_a_mixed_folder_gets_a_scale_and_a_trivial_predictor_per_dataset(tmp_path):
    rep = mixed(tmp_path)
    assert rep.lay.panels == ["dataset"]
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    train = [ax for ax in fig.axes if ax.get_ylabel() == "train loss"]
    assert len(train) == 2 and not train[0].get_shared_y_axes().joined(train[0], train[1])  # nats and mse apart
    assert train[0].get_ylim()[1] < 1000 and train[1].get_ylim()[1] < 1  # each fits its own numbers
    by_label = {ax.get_ylabel(): ax for ax in fig.axes}
    assert trivial_lines(by_label["val bound"]) == [205.0]
    assert trivial_lines(by_label["val mse"]) == [pytest.approx(1 / 6)]
    assert "trivial predictor" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_no_legend_entry_for_a_trivial_predictor_no_panel_draws(tmp_path):
    for num, model in enumerate(("mlp", "ln_mlp")):
        path = job(tmp_path, num, [f"model={model}"], 2.3, "error", [0.5, 0.2, 0.1])
        summary = json.loads((path / "summary.json").read_text())
        (path / "summary.json").write_text(json.dumps({**summary, "baseline": None}))
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    assert "trivial predictor" not in [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any(trivial_lines(ax) for ax in fig.axes)


def test_no_epoch_panel_for_a_task_whose_epoch_means_nothing(tmp_path):
    rep = mixed(tmp_path)
    fig = plots.curves_figure(rep.groups, rep.lay, "epoch")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["dataset=binarized_mnist"]  # the adding task's panel (epoch 0 throughout) is left out
    adding_only = [g for g in rep.groups if g.panel == ("adding",)]
    assert plots.curves_figure(adding_only, rep.lay, "epoch") is None


def test_a_single_evaluation_is_a_dot_with_its_seeds_range_under_the_training_steps(tmp_path):
    for num, (model, seed) in enumerate([(m, s) for m in ("lstm", "ln_lstm") for s in (0, 1)]):
        last = 0.1 + 0.01 * seed + 0.02 * (model == "ln_lstm")
        job(tmp_path, num, [f"model={model}", f"seed={seed}"], 1 / 6, "mse", [0.3, 0.2, last], epochs=False, evals={30})
    rep = report.make_report(tmp_path, report.load_runs(tmp_path), {}, x_axes=())
    fig = plots.curves_figure(rep.groups, rep.lay, "step")
    train, val = fig.axes
    assert val.get_shared_x_axes().joined(train, val) and val.get_xlim() == train.get_xlim()
    bars = [c for c in val.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 2  # one per model: its mean over the seeds, and their min-max
    caps = sorted(tuple(sorted(cap.get_ydata()[0] for cap in bar.lines[1])) for bar in bars)
    assert caps == [pytest.approx((0.1, 0.11)), pytest.approx((0.12, 0.13))]


def test_the_automatic_target_is_one_a_line_must_learn_to_reach(tmp_path):
    rep = mixed(tmp_path)
    adding = [r for r in rep.runs if r.value("dataset") == "adding"]
    # lstm's best (0.166) is the trivial predictor's 1/6 within 5%: it never learned, and would set the target there
    assert default_target(adding, "mse") == pytest.approx(0.001)
    stuck = [r for r in adding if r.value("model") == "lstm"]
    assert default_target(stuck, "mse") is None
    assert trivial_value(adding, "bpc") == pytest.approx(1 / 6 / math.log(2)) and trivial_value(adding, "error") is None
    assert trivial_value(rep.runs, "loss") is None  # two datasets: no one trivial predictor
