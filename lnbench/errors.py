"""Errors whose message is meant for the user: the CLI prints them as one paragraph, no traceback."""

from __future__ import annotations

import argparse
import re
import shlex
import signal
from contextlib import contextmanager
from typing import Any, Iterator


class UserError(Exception):
    """Bad input (a config value, a missing or corrupt data file, an unusable device or directory)."""

    hint: str | None = None  # one more line for the user, after the paragraph (how to quote a value)


class OptionsParser(argparse.ArgumentParser):
    """A command's options, read by argparse, whose errors are one paragraph (argparse prints its usage and exits
    2): `refuse`, the command's own error class, raised with argparse's message and where the options are listed."""

    def __init__(self, *args: Any, refuse: type[Exception] = UserError, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.refuse = refuse

    def error(self, message: str):
        raise self.refuse(f"{message} (`{self.prog} --help` lists the options).")


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


def resume_command(run_dir: object) -> str:
    """The command that continues the run in `run_dir`, to paste into a shell (its one home: every message that
    tells it calls this; a sweep's is `shell_arg('hydra.sweep.dir', ...)` in lnbench.config.overrides). `resume=`
    is read by lnbench itself, not by Hydra's grammar: the shell's quoting is the only one it needs."""
    return f"lnbench train {shlex.quote(f'resume={run_dir}')}"


class Interrupted(BaseException):
    """SIGTERM or SIGINT stopped the run after it wrote a checkpoint.

    A BaseException, like KeyboardInterrupt: Hydra's launcher catches Exception to go on with a sweep,
    but a signal means "stop now", so it must end the whole sweep too.
    """

    def __init__(self, signum: int, step: int, run_dir: object):
        self.signum, self.step, self.run_dir = signum, step, run_dir
        name = signal.Signals(signum).name
        where = f"stopped at step {step} after writing a checkpoint" if step >= 0 else "stopped at once"
        super().__init__(f"{name} received: {where}; continue with `{resume_command(run_dir)}`.")

    def __reduce__(self):
        return type(self), (self.signum, self.step, self.run_dir)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


@contextmanager
def refused_while_building(key: str, node: Any) -> Iterator[None]:
    """Builds `key` (dataset, model, optim, schedule) from its config node: what is the user's to fix becomes
    one ConfigError naming the key as typed; anything else passes unchanged, as the bug it is.

    The user's: our own UserError (Hydra wraps a constructor's error in "Error in call to target ..."; it is
    unwrapped as raised); a `_target_` that names no importable class; a TypeError or ValueError from the
    optimizer's or scheduler's constructor, which is torch's and checks the values given to it that way;
    memory a constructor cannot get for the sizes given. A TypeError raised in a model's or a dataset's code
    (lnbench's or a user's) is a bug in that code, not a value to change.
    """
    from hydra.errors import InstantiationException  # noqa: PLC0415 (Hydra-free layers import errors)

    try:
        yield
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        if (
            cause is None
            or _not_importable(cause, node)
            or key in TORCH_CHECKS
            and isinstance(cause, (TypeError, ValueError))
        ):
            raise _refused(key, node, cause or e) from e
        if _out_of_memory(cause):
            raise _refused(key, node, cause) from None
        cause.__suppress_context__ = True  # the constructor's own error (its cause kept), not Hydra's wrapper
        raise cause
    except (TypeError, ValueError) as e:
        if isinstance(e, UserError) or key not in TORCH_CHECKS:
            raise
        raise _refused(key, node, e) from e
    except (MemoryError, RuntimeError) as e:
        if not _out_of_memory(e):
            raise
        raise _refused(key, node, e) from None


TORCH_CHECKS = ("optim", "schedule")  # built by torch's constructors, which check their arguments


def _not_importable(error: BaseException, node: Any) -> bool:
    """Whether `error` says that the `_target_` itself names no module or class: Hydra's import error, caused by
    a ModuleNotFoundError for the target's own path (a failing import inside the module it names is that
    module's bug)."""
    original = error
    while original.__cause__ is not None:
        original = original.__cause__
    target = str(node.get("_target_", "")) if hasattr(node, "get") else ""
    missing = getattr(original, "name", None)
    return isinstance(original, ModuleNotFoundError) and bool(missing) and f"{target}.".startswith(f"{missing}.")


def _out_of_memory(error: BaseException) -> bool:
    """An allocation the machine cannot serve. torch's CPU allocator raises a plain RuntimeError, told apart
    by its message only; CUDA's has a type."""
    import torch  # noqa: PLC0415 (torch-free layers import errors)

    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in str(error)


def _refused(key: str, node: Any, error: BaseException) -> ConfigError:
    from omegaconf import OmegaConf  # noqa: PLC0415 (light layers import errors)

    values = OmegaConf.to_container(node, resolve=True, enum_to_str=True) if OmegaConf.is_config(node) else dict(node)
    target = values.pop("_target_", key)
    said = re.sub(r"\s+", " ", str(error)).strip()
    said = re.sub(r"^Error in call to target '[^']*':\s*", "", said)
    # Name the key the constructor complained about where its message names it (torch: "Invalid beta
    # parameter", "Invalid learning rate"...); otherwise all the values it was given.
    words = said.lower().replace("_", " ")
    named = [
        k for k in values if k.lower().replace("_", " ").rstrip("s") in words or k == "lr" and "learning rate" in words
    ]
    if isinstance(error, (ImportError, AttributeError)):  # `_target_` names nothing importable
        values, named, target = {"_target_": target}, ["_target_"], "Hydra"
    if _out_of_memory(error):  # the allocator's text and every value would bury the one size that is too big
        return _too_big(key, values, target, said)
    shown = ", ".join(f"{key}.{k}={values[k]}" for k in (named or values))
    return ConfigError(
        f"{shown} is not allowed: {target} refused {'it' if len(named) == 1 else 'these values'} "
        f"({type(error).__name__}: {said}). Change {'that key' if len(named) == 1 else f'the {key} keys'}; "
        f"`lnbench train --cfg job` prints the composed config with the allowed keys."
    )


def _too_big(key: str, values: dict[str, Any], target: str, said: str) -> ConfigError:
    """A component whose tensors the machine cannot hold: its biggest sizes named, and how much was asked."""
    sizes = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    big = [k for k, v in sizes.items() if v == max(sizes.values())] if sizes else list(values)
    asked = re.search(r"allocate (\d+) bytes", said)
    need = f" (one tensor of {int(asked.group(1)) / 2**30:,.0f} GiB)" if asked else ""
    return ConfigError(
        f"{', '.join(f'{key}.{k}={values[k]}' for k in big)} is not allowed: {target} cannot be built in this "
        f"machine's memory{need}. Use smaller sizes for {key}."
    )
