"""threads_follow (by default, null): which runs may follow the free cores (those whose numbers are the same on 1
and 2 threads, shown here preset by preset at the presets' own shapes), that following changes no number even
when the count changes between steps, and how the count follows what other processes take from the run's start."""

import logging
import os

import pytest
import torch
from conftest import DATA_DIR, compose_train, metrics_without_time, summary_of

from lnbench.config.runtime import Runtime
from lnbench.training import free_cores
from lnbench.training.recipe import setup_data, setup_model, train

two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to compare 1 and 2 threads")

# Each recurrent claim preset's own data and shape (and the GRUs that seq_len_sweep names), a few steps:
# (preset, models, extra overrides, in the slow suite).
PRESET_MODELS = [
    ("ln_gain_init", ["ln_lstm"], [], False),
    ("seq_len_sweep", ["lstm", "bn_lstm", "ln_lstm", "gru", "bn_gru", "ln_gru"], [], True),
    ("batch_size_sweep", ["bn_lstm", "ln_lstm"], ["dataset.batch_size=64"], True),
    ("batch_size_sweep", ["lstm"], ["dataset.batch_size=4"], False),  # its validation differs on 1 and 2 threads
    ("longer_test_seqs", ["bn_lstm"], ["test_seq_lens=[40]"], True),
    ("pmnist", ["lstm", "bn_lstm", "ln_lstm"], [], True),  # the head's weight gradient: the probe refuses
    ("shakespeare_bpc", ["lstm", "bn_lstm", "ln_lstm"], [], True),
]
CASES = [  # the default suite: one LN-LSTM, one LSTM (torch's kernel) and BN-GRU; the rest slow
    pytest.param(
        p, m, extra, marks=[pytest.mark.slow] if slow and (p, m) != ("seq_len_sweep", "bn_gru") else [], id=f"{p}-{m}"
    )
    for p, models, extra, slow in PRESET_MODELS
    for m in models
]
FEW_STEPS = ["steps=6", "eval_every=3", "log_every=1", "checkpoint_every=1000", "logger=none"]


def preset_cfg(preset, model, *extra):
    cfg = compose_train([f"+experiment={preset}", f"model={model}", *FEW_STEPS, *extra])
    if cfg.dataset.get("data_dir") is not None and not (DATA_DIR and os.path.isdir(DATA_DIR)):
        pytest.skip("needs the shared data (LNBENCH_DATA_DIR)")
    return cfg


def run_numbers(cfg, run_dir, threads):
    """The run's metrics (times left out) and its test and final validation numbers, trained on `threads`."""
    torch.set_num_threads(threads)
    try:
        summary = train(cfg, run_dir)
    finally:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    return metrics_without_time(run_dir), {k: summary[k] for k in ("test", "final_val")}


def flipping(monkeypatch):
    """Every sample sees the other core busy, then free, two samples each: the count goes 2 -> 1 -> 2 -> ..."""
    flips = iter([1.0, 1.0, 0.0, 0.0] * 100)
    monkeypatch.setattr(free_cores, "SAMPLE_S", 0.0)
    monkeypatch.setattr(free_cores, "START_WINDOW_S", 0.0)
    monkeypatch.setattr(free_cores.FreeCores, "busy_elsewhere", lambda self, a, b: next(flips))


def with_follow(cfg, value):
    on = cfg.copy()
    on.threads_follow = value
    return on


@two_cores
@pytest.mark.parametrize("preset, model, extra", CASES)
def test_following_the_free_cores_changes_no_number(preset, model, extra, tmp_path, monkeypatch):
    """Each recurrent preset at its shapes, by default (threads_follow unset), its thread count switched between
    1 and 2 every other step from its start: the numbers of a run held on 2 threads (threads_follow=false),
    where it follows; pmnist's probe refuses (its head's weight gradient differs on 1 and 2 threads), and the
    run keeps its 2 threads. The provenance says which. (threads=2: a count chosen for the run, as a launcher
    chooses one; torch's own count in a caller's process is the caller's, never followed unasked.)"""
    cfg = preset_cfg(preset, model, *extra, "threads=2")
    assert cfg.threads_follow is None  # the default
    fixed = run_numbers(with_follow(cfg, False), tmp_path / "fixed", 2)
    assert summary_of(tmp_path / "fixed")["provenance"]["threads_follow"] == "fixed at 2 (threads_follow=false)"
    flipping(monkeypatch)
    assert run_numbers(cfg, tmp_path / "followed", 2) == fixed
    summary = summary_of(tmp_path / "followed")
    record, said = summary.get("threads_followed"), summary["provenance"]["threads_follow"]
    if preset == "pmnist":
        assert record is None and said.startswith("fixed at 2 (its first step's gradients differ on 1 threads")
    else:
        assert record["changes"][0] == [0, 1] and record["steps_at"].keys() == {"1", "2"}
        assert said.startswith("free cores on 1 or 2 threads")


def test_runs_whose_numbers_depend_on_the_count_may_not_follow():
    def verdict(*overrides):
        cfg = compose_train(list(overrides))
        model = setup_model(cfg.model, setup_data(cfg.dataset).spec, torch.device("cpu"))
        return free_cores.same_bits_on_any_count(cfg, model)

    assert not verdict("model=preln_transformer", "dataset=copy")[0]
    may, why = verdict("model=ln_lstm", "dataset=adding", "clip_grad_norm=1.0")
    assert not may and "clip_grad_norm" in why
    may, why = verdict("model=ln_lstm", "dataset=adding", "model.impl=reference")
    assert not may and "reference loop" in why


def test_the_verdict_asks_each_layers_kernel_path_not_its_name(monkeypatch):
    """same_bits_on_any_count reads each path's declared property (lnbench.nn.fast.kernel_path), whatever it is
    called: a path named like lnbench's own kernels that says its numbers follow the thread count is refused."""
    from lnbench.models.sequence import SequenceModel
    from lnbench.nn.fast.kernel_path import KernelPath

    cfg = compose_train(["model=ln_lstm", "dataset=adding"])
    model = setup_model(cfg.model, setup_data(cfg.dataset).spec, torch.device("cpu"))
    posing = KernelPath("native", "AVX512 build", False)
    monkeypatch.setattr(SequenceModel, "kernel_paths", property(lambda self: [posing]))
    may, why = free_cores.same_bits_on_any_count(cfg, model)
    assert not may and "native (AVX512 build)" in why
    honest = KernelPath("some kernel", "", True)
    monkeypatch.setattr(SequenceModel, "kernel_paths", property(lambda self: [honest]))
    assert free_cores.same_bits_on_any_count(cfg, model) == (True, "its recurrence runs on some kernel")


@two_cores
def test_the_summary_and_the_log_say_when_the_count_changed(tmp_path, monkeypatch, caplog):
    cfg = preset_cfg("seq_len_sweep", "bn_lstm", "steps=12", "threads=2")
    flipping(monkeypatch)
    with caplog.at_level(logging.INFO, logger="lnbench"):
        run_numbers(cfg, tmp_path, 2)
    record = summary_of(tmp_path)["threads_followed"]
    assert record["base"] == 2 and record["allowed"] == [1, 2]
    # from the start on 1 (the first sample: busy), then 2 after two free samples, 1 after two busy ones, ...
    assert record["changes"][:3] == [[0, 1], [3, 2], [5, 1]] and record["steps_at"] == {"1": 7, "2": 5}
    assert "threads: 1 from the start" in caplog.text and "threads: 2 from step 3" in caplog.text
    assert torch.get_num_threads() == 2  # given back at the end


def test_a_run_that_may_not_follow_says_so_and_keeps_its_count(tmp_path, caplog):
    tiny = ["dataset.seq_len=5", "dataset.val_size=32", "dataset.test_size=32", "model.hidden_size=16"]
    cfg = compose_train(
        ["model=ln_lstm", "dataset=adding", "model.impl=reference", *tiny, *FEW_STEPS, "threads_follow=true"]
    )
    with caplog.at_level(logging.WARNING, logger="lnbench"):
        train(cfg, tmp_path)
    assert "threads_follow=true: the thread count stays at" in caplog.text and "reference loop" in caplog.text
    assert "threads_followed" not in summary_of(tmp_path)


def test_by_default_a_run_that_may_not_follow_says_so_without_a_warning(caplog):
    """threads_follow unset: the count stays where the numbers could change, said in the log (info: nothing was
    asked) and in the provenance's words."""
    cfg = compose_train(["model=ln_lstm", "dataset=adding", "model.hidden_size=8", "model.impl=reference"])
    spec = setup_data(cfg.dataset).spec
    runtime = Runtime(2, "2 usable cores", follow=cfg.threads_follow)
    with caplog.at_level(logging.INFO, logger="lnbench"):
        decision = free_cores.follower(cfg, runtime, setup_model(cfg.model, spec), spec, lambda: None)
    assert decision.follower is None and decision.said.startswith("fixed at 2 (its recurrence runs on reference loop")
    assert "threads_follow=null: the thread count stays at 2" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_at_one_thread_it_says_there_is_nothing_to_follow(caplog):
    """It said "gradients differ on  threads" (issue 40): at 1 thread there is no count to probe."""
    cfg = compose_train(["model=ln_lstm", "dataset=adding", "model.hidden_size=8", "threads_follow=true"])
    spec = setup_data(cfg.dataset).spec
    model = setup_model(cfg.model, spec)
    runtime = Runtime(1, "threads=1 as configured", follow=True)
    with caplog.at_level(logging.WARNING, logger="lnbench"):
        assert free_cores.follower(cfg, runtime, model, spec, lambda: None).follower is None
    assert "differ on  threads" not in caplog.text and "the thread count stays at 1" in caplog.text
    if free_cores.same_bits_on_any_count(cfg, model)[0]:  # lnbench's kernels built here: 1 thread is the reason
        assert "it runs on 1 thread: there is no smaller count" in caplog.text


class Fake:
    """A FreeCores on 2 cores with a clock and /proc/stat the test sets."""

    def __init__(self, monkeypatch, base=2):
        self.t, self.ticks, self.own = 0.0, 0, 0.0
        monkeypatch.setattr(free_cores, "_cpu_ticks", lambda cores: self.ticks)
        monkeypatch.setattr(free_cores.os, "times", lambda: os.times_result((self.own, 0, 0, 0, 0)))
        monkeypatch.setattr(free_cores.torch, "set_num_threads", lambda n: None)
        self.fc = free_cores.FreeCores(base, cores=[0, 1], clock=lambda: self.t)
        self.fc.hz = 100

    def second(self, ours: float, theirs: float, step: int) -> int:
        """One second in which this process used `ours` cores and others `theirs`; returns the count after."""
        self.t += 1.0
        self.own += ours
        self.ticks += round((ours + theirs) * 100)
        self.fc.tick(step)
        return self.fc.current


def test_the_count_follows_what_others_take_after_two_samples_agree(monkeypatch):
    f = Fake(monkeypatch)
    assert f.second(2.0, 0.0, 1) == 2  # alone
    assert f.second(1.3, 0.7, 2) == 2  # a neighbour: first sample
    assert f.second(1.3, 0.7, 3) == 1  # second sample agrees: down to 1
    assert f.second(1.0, 1.0, 4) == 1
    assert f.second(1.0, 0.0, 5) == 1  # the neighbour left: first sample
    assert f.second(1.0, 0.3, 6) == 2  # a light one (0.3 of a core) does not take a thread
    assert f.fc.record()["changes"] == [[3, 1], [6, 2]]
    assert f.second(2.0, 1.0, 7) == 2 and f.second(2.0, 0.0, 8) == 2  # a one-sample burst changes nothing


def test_never_more_than_chosen_before_the_run_nor_fewer_than_one(monkeypatch):
    f = Fake(monkeypatch, base=1)
    assert [f.second(1.0, 0.0, s) for s in range(3)] == [1, 1, 1]
    g = Fake(monkeypatch, base=2)
    assert [g.second(0.5, 2.0, s) for s in range(3)] == [2, 1, 1]


def test_the_run_starts_on_the_cores_others_leave_free_at_its_start(monkeypatch):
    """The first count is measured before the first step, over the probe's time, or where the probe took less than
    START_WINDOW_S, at the first step after it (never waited for), without the two samples the loop's changes need."""
    f = Fake(monkeypatch)

    def seconds(ours: float, theirs: float, wall: float) -> None:
        f.t, f.own, f.ticks = f.t + wall, f.own + ours * wall, f.ticks + round((ours + theirs) * wall * 100)

    def starting(ours: float, theirs: float, probe_s: float) -> free_cores.FreeCores:
        before = free_cores.sample([0, 1], clock=lambda: f.t)
        seconds(ours, theirs, probe_s)
        return free_cores.FreeCores(2, cores=[0, 1], clock=lambda: f.t, since=before)

    busy = starting(1.0, 1.0, 0.5)  # a neighbour holds a core while the probe runs
    assert busy.current == 1 and busy.record()["changes"] == [[0, 1]]
    idle = starting(1.5, 0.0, 0.5)
    assert idle.current == 2 and idle.record()["changes"] == []
    quick = starting(1.0, 1.0, 0.04)  # a probe of 40 ms: too short a window, the run starts on its 2 threads
    assert quick.current == 2
    seconds(1.0, 1.0, 0.04)
    quick.tick(1)
    assert quick.current == 2  # 80 ms
    seconds(1.0, 1.0, 0.04)
    quick.tick(2)
    assert quick.current == 1 and quick.record()["changes"] == [[2, 1]]  # 120 ms: decided on this one sample
