"""A run's threads follow its neighbours while it trains (lnbench.live_threads), on simulated clocks."""
from __future__ import annotations

import pytest
import torch

from lnbench import live_threads
from lnbench.live_threads import CHECK_S, Watch


class Machine:
    """Two cores whose /proc/stat counters and this process's CPU clock advance as told."""

    def __init__(self):
        self.t = self.busy = self.total = self.own = 0.0

    def run(self, seconds: float, own_cores: float, other_cores: float) -> None:
        """`seconds` pass with this process using `own_cores` and others `other_cores` of the 2 cores."""
        self.t += seconds
        self.total += 2 * seconds * 100  # jiffies
        self.busy += min(2.0, own_cores + other_cores) * seconds * 100
        self.own += own_cores * seconds

    def watch(self, ceiling: int = 2) -> Watch:
        return Watch(ceiling, [0, 1], clock=lambda: self.t, cpu_times=lambda cores: (self.busy, self.total),
                     own_cpu=lambda: self.own)


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_drop_when_a_neighbour_arrives_and_return_when_it_leaves(threads_restored):
    m = Machine()
    torch.set_num_threads(2)
    w = m.watch()
    m.run(CHECK_S, own_cores=2.0, other_cores=0.0)
    w.tick()
    assert torch.get_num_threads() == 2  # alone: keeps both
    m.run(CHECK_S, own_cores=1.3, other_cores=0.7)  # a busy loop arrives and gets most of a core
    w.tick()
    assert torch.get_num_threads() == 1
    m.run(CHECK_S, own_cores=1.0, other_cores=1.0)
    w.tick()
    assert torch.get_num_threads() == 1  # still there: stays on the core left free
    m.run(CHECK_S, own_cores=1.0, other_cores=0.0)  # it left
    w.tick()
    assert torch.get_num_threads() == 2
    m.run(CHECK_S, own_cores=1.0, other_cores=1.0)
    w.tick()
    assert torch.get_num_threads() == 1
    w.restore()  # the run is over: the process gets the threads it had
    assert torch.get_num_threads() == 2


def test_looks_only_every_check_s_and_never_above_the_ceiling(threads_restored):
    m = Machine()
    torch.set_num_threads(2)
    w = m.watch()
    m.run(CHECK_S / 2, own_cores=0.5, other_cores=1.5)
    w.tick()
    assert torch.get_num_threads() == 2  # too soon to look
    m.run(CHECK_S / 2, own_cores=0.5, other_cores=1.5)
    w.tick()
    assert torch.get_num_threads() == 1  # the look covers the whole interval since the last one
    torch.set_num_threads(1)
    w = m.watch(ceiling=1)  # a launcher's share of one core: never more, however free the machine
    m.run(CHECK_S, own_cores=1.0, other_cores=0.0)
    w.tick()
    assert torch.get_num_threads() == 1


def test_unreadable_proc_stat_changes_nothing(threads_restored):
    torch.set_num_threads(2)
    t = [0.0]
    w = Watch(2, [0, 1], clock=lambda: t[0], cpu_times=lambda cores: None, own_cpu=lambda: 0.0)
    t[0] += CHECK_S
    w.tick()
    assert torch.get_num_threads() == 2


def test_armed_only_for_chosen_threads_on_the_cpu():
    try:
        live_threads.disarm()
        assert live_threads.watch(torch.device("cpu")) is None  # threads=N: nothing moves them
        live_threads.arm(2, [0, 1])
        assert isinstance(live_threads.watch(torch.device("cpu")), Watch)
        assert live_threads.watch(torch.device("meta")) is None  # not a CPU run
        live_threads.arm(1, [0, 1])
        assert live_threads.watch(torch.device("cpu")) is None  # one thread: nothing to move
    finally:
        live_threads.disarm()


def test_a_run_ticks_the_watch_every_step_and_restores_the_threads(tmp_path, monkeypatch, threads_restored):
    from conftest import tiny

    from lnbench.train import train

    ticks = []

    class Counting(Watch):
        def tick(self):
            ticks.append(torch.get_num_threads())
            torch.set_num_threads(1)  # as if a neighbour arrived

    monkeypatch.setattr(live_threads, "watch", lambda device: Counting(2, [0, 1]))
    torch.set_num_threads(2)
    train(tiny("ln_lstm", "adding", "steps=5"), tmp_path)
    assert ticks == [2, 1, 1, 1, 1]  # once per training step; the run went on at the new count
    assert torch.get_num_threads() == 2  # and left the process as it found it
