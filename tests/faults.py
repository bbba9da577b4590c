"""Faults to plant: a dataset that kills its own process at a chosen step, for tests of sweeps that survive a
crashing job; a model with a bug in its constructor, for tests that a bug is reported as ours.

`dataset._target_=tests.faults.CrashingAdding` with LNBENCH_TEST_FAULT=<segv|kill>:<seed>: the job whose
seed is <seed> dies at its second training batch, by a segfault or by SIGKILL (what the OOM killer sends).
"""

import ctypes
import os
import signal

from lnbench.data import Adding
from lnbench.models import SequenceModel


class CrashingAdding(Adding):
    def train_batch(self, step):
        fault, _, seed = os.environ.get("LNBENCH_TEST_FAULT", "").partition(":")
        if step == 1 and seed and int(seed) == self.seed:
            if fault == "segv":
                ctypes.string_at(0)  # a read of address 0: SIGSEGV
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return super().train_batch(step)


class BuggySequenceModel(SequenceModel):
    """A model whose constructor has a bug (a TypeError in its own code):
    `model._target_=tests.faults.BuggySequenceModel`."""

    def __init__(self, spec, **kwargs):
        super().__init__(spec, **kwargs)
        self.widths = len(kwargs["hidden_size"])  # the bug: hidden_size is an int
