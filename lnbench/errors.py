"""Errors whose message is meant for the user: the CLI prints them as one paragraph, no traceback."""
from __future__ import annotations

import signal


class UserError(Exception):
    """Bad input (a config value, a missing or corrupt data file, an unusable device or directory)."""


class ConfigError(UserError, ValueError):
    """A config value that is not allowed; the message names the value and what is allowed."""


class DataError(UserError):
    """Data files that are missing, truncated or corrupt; the message names the path and the fix."""


class Diverged(Exception):
    """The loss became NaN or Inf. Raised after summary.json (status diverged) is written, so a sweep
    records the job as failed and goes on with the others, and a single run exits non-zero."""

    def __init__(self, step: int, run_dir: object):
        self.step, self.run_dir = step, run_dir
        super().__init__(
            f"the loss is not finite (NaN or Inf) at step {step}: the run stopped with status diverged "
            f"({run_dir}/summary.json). Try a smaller optim.lr or optim.clip_grad_norm."
        )


class Interrupted(BaseException):
    """SIGTERM or SIGINT stopped the run after it wrote a checkpoint.

    A BaseException, like KeyboardInterrupt: Hydra's launcher catches Exception to go on with a sweep,
    but a signal means "stop now", so it must end the whole sweep too.
    """

    def __init__(self, signum: int, step: int, run_dir: object):
        self.signum, self.step, self.run_dir = signum, step, run_dir
        name = signal.Signals(signum).name
        where = f"stopped at step {step} after writing a checkpoint" if step >= 0 else "stopped at once"
        super().__init__(f"{name} received: {where}; continue with `lnbench train resume={run_dir}`.")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
