"""`lnbench bench` runs end to end on tiny shapes and writes the JSON rows and columns it promises.
It is not a benchmark: no timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
import torch

from lnbench.bench import cli as bench
from lnbench.bench import kernels as bench_kernels
from lnbench.bench import runs as bench_runs
from lnbench.bench.timing import Candidate, time_interleaved
from lnbench.nn.fast import native


def test_bench_quick_writes_json(tmp_path, capsys):
    path = tmp_path / "b.json"
    rc = bench.main(
        [
            "--quick",
            "--reps",
            "2",
            "--warmup",
            "1",
            "--shapes",
            "2x3x8",
            "--input-size",
            "4",
            "--models",
            "lstm,ln_lstm,bn_lstm,gru,ln_gru,bn_gru",
            "--ref",
            "--no-runner",
            "--json",
            str(path),
        ]
    )
    assert rc == 0
    data = json.loads(path.read_text())
    assert data["meta"]["threads"] == 2 and data["meta"]["columns"] == bench.COLUMNS
    assert data["meta"]["isa"] == torch.backends.cpu.get_cpu_capability() and data["meta"]["cpu"]
    assert data["meta"]["kernels"] == native.status()
    rows = data["rows"]
    for row in rows:
        assert set(bench.COLUMNS) <= set(row), row
        assert row["ms_median"] > 0 and row["ratio"] > 0 and row["mem_mb"] >= 0
    got = {(r["model"], r["impl"]) for r in rows}
    assert {("nn.LSTM", "torch"), ("nn.GRU", "torch"), ("lstm", "torch"), ("gru", "torch")} <= got
    for m in ("ln_lstm", "bn_lstm", "ln_gru", "bn_gru"):
        assert (m, "ops") in got and (m, "ref") in got  # torch's ops: the layer without lnbench's C++
    for m in ("ln_lstm", "bn_lstm", "ln_gru", "bn_gru", "gru"):  # lnbench's C++ kernels, where they are built
        assert ((m, "native") in got) == (native.ops() is not None)
    assert {(r["batch"], r["seq_len"], r["hidden"]) for r in rows} == {(2, 3, 8)}
    assert "ln_lstm" in capsys.readouterr().out


def test_bench_mlp_rows(tmp_path):
    path = tmp_path / "m.json"
    assert (
        bench.main(["--quick", "--reps", "1", "--warmup", "0", "--models", "mlp", "--no-runner", "--json", str(path)])
        == 0
    )
    rows = json.loads(path.read_text())["rows"]
    assert {r["model"] for r in rows} == {"mlp", "bn_mlp", "ln_mlp"}
    assert {r["impl"] for r in rows} <= {"adam_foreach", "adam_fused"}
    assert all(r["section"] == "mlp" and r["batch"] == 4 for r in rows)


def test_runner_overhead_rows_compare_lnbench_train_with_a_bare_loop(tmp_path, monkeypatch):
    tiny = ["dataset.seq_len=10", "dataset.val_size=50", "dataset.test_size=50", "model.hidden_size=16"]
    monkeypatch.setattr(bench_runs, "OVERHEAD_RUNS", {"ln_lstm/adding": ["model=ln_lstm", "dataset=adding", *tiny]})
    path = tmp_path / "r.json"
    assert (
        bench.main(
            [
                "--reps",
                "1",
                "--warmup",
                "0",
                "--models",
                "lstm",
                "--shapes",
                "2x3x8",
                "--input-size",
                "4",
                "--runner-steps",
                "3",
                "--no-sweep",
                "--no-bandwidth",
                "--no-throughput",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    rows = [r for r in json.loads(path.read_text())["rows"] if r["section"] == "runner"]
    assert "ln_lstm/adding" in {r["model"] for r in rows}
    for r in rows:
        assert r["baseline"] == "bare loop" and r["ms_median"] > 0 and r["baseline_ms_median"] > 0 and r["ratio"] > 0


def test_runner_rows_skip_a_run_whose_data_is_missing(tmp_path, monkeypatch, capsys):
    """Without MNIST here the MLP's runner row is skipped with the dataset's reason, not a traceback."""
    monkeypatch.setenv("LNBENCH_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setattr(bench_runs, "OVERHEAD_RUNS", {"ln_mlp/mnist": ["model=ln_mlp", "dataset=mnist"]})
    assert bench_runs.runner_overhead_rows(1, 2, torch.device("cpu"), print) == []
    assert "ln_mlp/mnist: skipped (no MNIST IDX files under" in capsys.readouterr().out


BAD = {  # the options as typed -> what the one paragraph must name
    "threads-0": (["--threads", "0"], "--threads=0 is not allowed: it must be an integer >= 1"),
    "reps-negative": (["--reps", "-1"], "--reps=-1 is not allowed"),
    "reps-0": (["--reps", "0"], "--reps=0 is not allowed"),
    "warmup-negative": (["--warmup", "-1"], "--warmup=-1 is not allowed"),
    "batch-0": (["--shapes", "0x10x8"], "shape '0x10x8' is not allowed: batch, length and width must be >= 1"),
    "no-shape": (["--shapes", ","], "no shape given"),
    "no-model": (["--models", ","], "no model given"),
    "not-a-shape": (["--shapes", "32x100"], "shape '32x100' is not BATCHxSEQ_LENxHIDDEN"),
    "not-a-number": (["--reps", "x"], "invalid int value: 'x'"),
    "unknown-option": (["--repz", "3"], "unrecognized arguments: --repz 3"),
    "sweep-epochs-0": (["--sweep-epochs", "0"], "--sweep-epochs=0.0 is not allowed"),
    "device-tpu": (["--device", "tpu"], "--device=tpu is not allowed: use auto, cpu, cuda or cuda:N"),
    "device-mps": (["--device", "mps"], "--device=mps is not allowed: use auto, cpu, cuda or cuda:N"),
    # a run's own rule for the machine's devices (training.device.resolve_device), not a second one
    "device-index": (["--device", "cuda:99"], "--device=cuda:99 is not allowed here: torch sees "),
    "throughput-preset": (["--throughput-presets", "fig7"], "fig7 is not a claim preset: use ln_gain_init"),
    "throughput-steps-1": (["--throughput-steps", "1"], "--throughput-steps=1 is not allowed: it must be"),
    "throughput-jobs-0": (["--throughput-jobs", "0"], "--throughput-jobs=0 is not allowed"),
}


@pytest.mark.parametrize("argv,says", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_paragraph_exit_2_and_nothing_timed_or_written(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default bench-results/ would go
    assert bench.main([*argv, "--no-runner", "--no-sweep", "--json", str(tmp_path / "out" / "b.json")]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("lnbench: error: ") and says in err, err
    assert out == "" and list(tmp_path.iterdir()) == []  # nothing timed, no folder made


@pytest.mark.slow  # two real sample sweeps (~10 s)
def test_check_throughput_row_per_preset(tmp_path, capsys, monkeypatch):
    """A row per claim preset asked for: jobs per minute and the fixed cost per job, and a line on how they were
    computed; from two sample sweeps of the preset (real `lnbench train -m` runs, ~20 s)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    path = tmp_path / "t.json"
    argv = ["--quick", "--reps", "1", "--warmup", "0", "--models", "mlp", "--no-runner", "--throughput"]
    argv += ["--throughput-presets", "ln_gain_init", "--throughput-jobs", "3", "--throughput-steps", "3"]
    assert bench.main([*argv, "--json", str(path)]) == 0
    rows = [r for r in json.loads(path.read_text())["rows"] if r["section"] == "throughput"]
    assert [r["model"] for r in rows] == ["ln_gain_init"]
    row = rows[0]
    assert row["jobs"] == 18 and row["steps"] == 18 * 300 and row["sampled_jobs"] >= 3
    for key in ("jobs_per_min", "fixed_ms", "fixed_share", "step_ms", "val_ms", "sweep_min", "sweep_own_s"):
        assert isinstance(row[key], float) and row[key] == row[key], key  # a number, not NaN; its size is not tested
    out = " ".join(capsys.readouterr().out.split())  # the terminal's width wraps the lines
    assert "lnbench check throughput per claim preset" in out and "ln_gain_init" in out
    assert "timed at 1 and at 3 steps" in out and "predicted from its jobs' steps and evaluations" in out


def test_results_that_cannot_be_written_are_refused_before_anything_is_timed(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert bench.main(["--json", str(tmp_path / "file" / "b.json")]) == 2
    assert "the results cannot be written there" in capsys.readouterr().err


@pytest.mark.slow  # runs an 8-job sweep whose jobs fail one by one (~10 s)
def test_sweep_row_is_skipped_with_a_message_when_the_sweep_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LNBENCH_DATA_DIR", str(tmp_path / "no-mnist-here"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    lines = []
    assert bench_runs.sweep_rows(1, 0.01, lines.append) == []
    assert any("failed, skipped" in line for line in lines)


def test_recurrent_rows_build_the_cell_each_preset_trains():
    """The bench's layers come from conf/model (no list of its own): for every recurrent preset, the cell it
    times has the class, norm and parameter shapes of the one `lnbench train model=<preset>` builds."""
    from hydra import compose, initialize_config_dir

    from lnbench.config.schema import CONF_DIR, model_presets, register_configs
    from lnbench.training.recipe import setup_data, setup_model

    register_configs()
    assert (
        set(bench_kernels.rnn_presets()) == set(model_presets("base_sequence"))
        and "ln_lstm" in bench_kernels.fast_rnn_models()
    )
    for name in bench_kernels.rnn_presets():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(
                "train", overrides=[f"model={name}", "dataset=adding", "dataset.seq_len=5", "model.hidden_size=8"]
            )
        trained = setup_model(cfg.model, setup_data(cfg.dataset).spec).cells[0]
        timed = bench_kernels._preset_cell(name, 2, 8, 5)
        assert type(timed) is type(trained) and timed.norm_kind == trained.norm_kind, name
        assert {k: v.shape for k, v in timed.state_dict().items()} == {
            k: v.shape for k, v in trained.state_dict().items()
        }, name
        gains = [(k, v) for k, v in trained.state_dict().items() if k.endswith("weight") and v.dim() == 1]
        for k, v in gains:  # gain_init as the preset sets it (bn's 0.1), not a default
            assert torch.equal(timed.state_dict()[k], v), (name, k)
    assert bench_kernels._impls_for("rms_lstm", False) == ["ref"]  # no fast layer: timed as a model runs it


def test_unknown_model_names_the_presets():
    with pytest.raises(bench.Refused, match="unknown model"):
        bench.build_parser().parse_args(["--models", "ln_lstmm"])


def test_sweep_row_compares_the_launchers_interleaved(monkeypatch):
    """Each sweep's wall time (faked here: basic 10 s, joblib 8 s), interleaved, with the load average."""
    state = {"t": 0.0, "cmds": []}

    def run(cmd, **kw):
        state["t"] += 8.0 if "hydra/launcher=joblib" in cmd else 10.0
        state["cmds"].append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(bench_runs, "time", types.SimpleNamespace(perf_counter=lambda: state["t"]))
    lines = []
    [row] = bench_runs.sweep_rows(2, 0.5, lines.append)
    assert row["ratio"] == pytest.approx(0.8) and row["baseline_ms_median"] == pytest.approx(10_000)
    assert [len(v) for v in row["load_avg"].values()] == [2, 2]
    assert [("hydra/launcher=joblib" in c) for c in state["cmds"]] == [False, True, False, True]  # interleaved
    # every job at half an epoch of its own batch size (the preset's formula), not one step count for all
    assert all("steps='${lnbench.epochs:0.5,${dataset.batch_size}," in " ".join(c) for c in state["cmds"])


def test_interleaved_rounds_rotate_the_order():
    """What runs just before a step changes its time, so over len(cands) rounds every candidate takes every
    place once, and each round still times every candidate once (the ratios are per round)."""
    order = []
    cands = [Candidate(n, "x", lambda n=n: order.append(n), lambda: None) for n in "abc"]
    times = time_interleaved(cands, 6, 0, torch.device("cpu"))
    rounds = [order[i : i + 3] for i in range(0, 18, 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    for name in "abc":
        assert sorted(r.index(name) for r in rounds[:3]) == [0, 1, 2]
    assert {k: len(v) for k, v in times.items()} == {"a/x": 6, "b/x": 6, "c/x": 6}


def test_bandwidth_rows_count_each_phases_least_bytes(tmp_path, monkeypatch):
    """The MLP's least bytes, by hand: 1,794,000 weights, 1,796,010 parameters (float32)."""
    from lnbench.bench import bandwidth

    weights, params = 784 * 1000 + 1000 * 1000 + 1000 * 10, 784 * 1000 + 1000 * 1000 + 1000 * 10 + 1000 + 1000 + 10
    need = bandwidth.least_bytes(bandwidth.mlp_model("none", torch.device("cpu"), torch.float32))
    assert need == {
        "forward": 4 * weights,
        "backward": 4 * (1000 * 1000 + 1000 * 10 + params),  # the first layer's input needs no gradient
        "optimizer": 4 * 7 * params,
    }
    monkeypatch.setattr(bandwidth, "TRIAD_FLOATS", 1 << 16)
    path = tmp_path / "b.json"
    argv = ["--models", "lstm", "--shapes", "2x3x8", "--reps", "1", "--warmup", "0", "--no-runner", "--no-train"]
    assert bench.main([*argv, "--no-sweep", "--no-throughput", "--bandwidth", "--json", str(path)]) == 0
    rows = [r for r in json.loads(path.read_text())["rows"] if r["section"] == "bandwidth"]
    assert [(r["model"], r["batch"]) for r in rows] == [
        (f"mlp {p}", b) for b in (4, 128) for p in ("forward", "backward", "optimizer", "step")
    ]
    for r in rows:
        assert r["gbps"] > 0 and r["ratio"] == pytest.approx(r["gbps"] / r["stream_gbps"])
        assert r["least_mb"] * 1e6 / (r["ms_median"] / 1e3) / 1e9 == pytest.approx(r["gbps"])


def test_throughput_samples_leave_out_the_jobs_a_preset_makes_fail(tmp_path):
    """batch_size_sweep's BN-LSTM at batch 1 fails by design: its sample's other jobs still give the row."""
    from lnbench.bench import throughput

    for name, status in (("ok", "completed"), ("bad", "failed")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": status}))
    assert throughput.completed(str(tmp_path / "ok"))
    assert not throughput.completed(str(tmp_path / "bad"))
    assert not throughput.completed(str(tmp_path / "never-started")) and not throughput.completed(None)


@pytest.mark.slow  # torch.profiler's first use in a process: ~2 s
@pytest.mark.parametrize("model", ["lstm", "bn_lstm", "ln_gru"])  # torch's fused LSTM, lnbench's LSTM and GRU
def test_the_split_of_a_step_finds_each_presets_layer(model):
    """The train rows' split of a step (issue 46): the profiler's events of each path a recurrent preset's layer
    runs on are found (LAYER_EVENTS names them as torch names them: a rename would leave the layer at 0 ms), and
    the shares add up to the step."""
    from conftest import TINY, compose_train

    cfg = compose_train([f"model={model}", "dataset=adding", *TINY["adding"], "model.hidden_size=8"])
    split = bench_runs.step_split(cfg, 2, torch.device("cpu"))
    assert 0 < split["layer_ms"] < split["step_ms"] and split["optimizer_ms"] > 0
    assert split["layer_ms"] + split["optimizer_ms"] + split["rest_ms"] == pytest.approx(split["step_ms"])
