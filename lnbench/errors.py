"""Errors whose message is meant for the user: the CLI prints them as one paragraph, no traceback."""
from __future__ import annotations

import re
import signal
from contextlib import contextmanager
from typing import Any, Iterator


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

    def __reduce__(self):  # rebuilt from its fields in another process (a sweep job's child, joblib)
        return type(self), (self.step, self.run_dir)


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

    def __reduce__(self):
        return type(self), (self.signum, self.step, self.run_dir)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


@contextmanager
def refused_while_building(key: str, node: Any) -> Iterator[None]:
    """An error raised while `key` (dataset, model, optim) is built from its config node, by our code, by
    Hydra's instantiate or by a torch constructor, becomes one ConfigError naming the key as typed.

    Hydra wraps a constructor's error in "Error in call to target ..."; our own UserError inside it is
    unwrapped as it was raised. A TypeError or ValueError from a constructor (torch checks its arguments
    that way) or an import error of `_target_` is bad input; anything else is a bug and passes unchanged.
    """
    from hydra.errors import InstantiationException

    try:
        yield
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if cause is None or isinstance(cause, (TypeError, ValueError, ImportError, AttributeError)):
            raise _refused(key, node, cause or e) from e
        raise
    except (TypeError, ValueError) as e:
        if isinstance(e, UserError):
            raise
        raise _refused(key, node, e) from e


def _refused(key: str, node: Any, error: BaseException) -> ConfigError:
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(node, resolve=True, enum_to_str=True) if OmegaConf.is_config(node) else dict(node)
    target = values.pop("_target_", key)
    said = re.sub(r"\s+", " ", str(error)).strip()
    said = re.sub(r"^Error in call to target '[^']*':\s*", "", said)
    # Name the key the constructor complained about where its message names it (torch: "Invalid beta
    # parameter", "Invalid learning rate"...); otherwise all the values it was given.
    words = said.lower().replace("_", " ")
    named = [k for k in values if k.lower().replace("_", " ").rstrip("s") in words or k == "lr" and "learning rate" in words]
    if isinstance(error, (ImportError, AttributeError)):  # `_target_` names nothing importable
        values, named, target = {"_target_": target}, ["_target_"], "Hydra"
    shown = ", ".join(f"{key}.{k}={values[k]}" for k in (named or values))
    return ConfigError(
        f"{shown} is not allowed: {target} refused {'it' if len(named) == 1 else 'these values'} "
        f"({type(error).__name__}: {said}). Change {'that key' if len(named) == 1 else f'the {key} keys'}; "
        f"`lnbench train --cfg job` prints the composed config with the allowed keys."
    )
