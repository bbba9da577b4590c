"""lnbench.launch.process.isolate.warm_up: once per process, torch._dynamo imported (a forked job finds it loaded)
and the objects alive then frozen out of the garbage collector's way; what a job leaves later stays collectable.
A forked job's exception comes back with the child's traceback."""

import gc
import sys

import pytest

from lnbench.launch.process import isolate


@pytest.fixture
def fresh_process(monkeypatch):
    """This test process as one that has not warmed up yet (nothing frozen); its frozen generation emptied again
    after."""
    gc.unfreeze()
    monkeypatch.setattr(isolate, "warmed", False)
    yield
    gc.unfreeze()


def test_warm_up_loads_dynamo_and_freezes_once(fresh_process):
    assert gc.get_freeze_count() == 0
    isolate.warm_up()
    frozen = gc.get_freeze_count()
    assert "torch._dynamo" in sys.modules
    assert frozen > 10_000  # torch's modules, their functions and classes

    class Node:
        pass

    garbage = Node()
    garbage.me = garbage  # a cycle only the collector frees
    isolate.warm_up()  # the next job of the same process
    assert gc.get_freeze_count() == frozen
    del garbage
    assert gc.collect() > 0


def test_a_forked_job_inherits_the_frozen_generation(fresh_process, tmp_path):
    isolate.warm_up()
    frozen = gc.get_freeze_count()
    # a few frozen objects are freed on the way (their count drops to zero); none are frozen anew
    assert 0.99 * frozen < isolate.in_child_process(tmp_path, gc.get_freeze_count) <= frozen


def broken_model():
    sizes = 8
    return len(sizes)  # a bug: TypeError in the child


def test_a_forked_jobs_bug_comes_back_with_the_childs_traceback(tmp_path):
    with pytest.raises(TypeError) as e:
        isolate.in_child_process(tmp_path, broken_model)
    assert "in broken_model" in e.value.child_traceback and "return len(sizes)" in e.value.child_traceback


def test_a_process_that_started_cuda_runs_the_job_itself(tmp_path, monkeypatch, caplog):
    """A child forked from a process with a CUDA context cannot use CUDA: the job then runs in this process."""
    import os

    monkeypatch.setattr(isolate, "cuda_started", lambda: True)
    assert isolate.in_child_process(tmp_path, os.getpid) == os.getpid()
    assert "started CUDA" in caplog.text
    monkeypatch.setattr(isolate, "cuda_started", lambda: False)
    assert isolate.in_child_process(tmp_path, os.getpid) != os.getpid()
