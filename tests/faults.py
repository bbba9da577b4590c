"""A dataset that kills its own process at a chosen step, for tests of sweeps that survive a crashing job.

`dataset._target_=tests.faults.CrashingAdding` with LNBENCH_TEST_FAULT=<segv|kill>:<seed>: the job whose
seed is <seed> dies at its second training batch, by a segfault or by SIGKILL (what the OOM killer sends).
"""
import ctypes
import os
import signal

from lnbench.data import Adding


class CrashingAdding(Adding):
    def train_batch(self, step):
        fault, _, seed = os.environ.get("LNBENCH_TEST_FAULT", "").partition(":")
        if step == 1 and seed and int(seed) == self.seed:
            if fault == "segv":
                ctypes.string_at(0)  # a read of address 0: SIGSEGV
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return super().train_batch(step)
