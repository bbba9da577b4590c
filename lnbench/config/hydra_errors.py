"""Hydra's and OmegaConf's composition errors as lnbench's: one ConfigError, one paragraph, naming the override as
the user typed it and what is allowed (beside lnbench.config.overrides, which reads Hydra's command line)."""

from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager

import yaml
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from lnbench.config import launchers, user_folder
from lnbench.config import overrides as hydra_args
from lnbench.config.presets import yaml_problem
from lnbench.config.validate import did_you_mean
from lnbench.errors import ConfigError


@contextmanager
def composing(overrides: list[str], sweep: bool = False):
    """Hydra's and OmegaConf's composition errors as one ConfigError naming the override as typed."""
    job = f" (in the sweep job {' '.join(overrides)})" if sweep else ""
    try:
        yield
    except MissingConfigException as e:  # model=ln_lstmm: no such preset
        group, _, name = str(e.missing_cfg_file).rpartition("/")
        typed = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == group), None)
        if typed is None and (mine := user_folder.chose(group, name, overrides)):  # your defaults' own list chose it
            typed = f"{mine}: {group}: {name}"
        typed = typed or f"{group}={name}"
        options = [o for o in e.options or [] if not o.startswith("base_")]
        # a launcher an extra of lnbench installs (slurm.yaml names submitit_slurm): the extra to install
        if group == "hydra/launcher" and name in launchers.HYDRA and (extra := launchers.HYDRA[name][1].extra):
            raise ConfigError(
                f"{typed} is not allowed{job}: the {name} launcher is not installed. Install it with "
                f"pip install 'lnbench[{extra}]', or choose one of {', '.join(options)}."
            ) from None
        raise ConfigError(
            f"{typed} is not allowed{job}: there is no {group} preset {name!r}."
            f"{did_you_mean(name, options)}" + (f" The {group} presets are {', '.join(options)}." if options else "")
        ) from None
    except yaml.YAMLError as e:  # a preset file of yours (or ours) that is not YAML: Hydra lets it through
        name = getattr(getattr(e, "problem_mark", None), "name", None) or "a config file"
        raise ConfigError(f"{name} is not YAML: {yaml_problem(e)}. Fix the file, or move it away.") from None
    except (HydraException, OmegaConfBaseException) as e:
        cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else e
        full_key = str(getattr(cause, "full_key", "") or "")
        if not full_key and (named := re.search(r"full_key: (\S+)", str(e))):
            full_key = named.group(1)
        if mine := user_folder.located(str(e), full_key):  # your defaults file: its path and line
            said = re.sub(r"^In '[^']*': \w+ raised while composing config:\s*", "", _one_paragraph(str(e)))
            raise ConfigError(f"{mine}: {full_key or 'the file'} is not allowed{job}: {said} Fix the file.") from None
        typed = _typed_override(overrides, full_key, str(e))
        if isinstance(e, OverrideParseException):
            typed = hydra_args.unreadable(overrides) or typed
        schema, key = getattr(cause, "object_type", None), str(getattr(cause, "key", "") or "")
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and dataclasses.is_dataclass(schema):
            keys = sorted(f.name for f in dataclasses.fields(schema) if not f.name.startswith("_"))
            raise ConfigError(
                f"{typed or key} is not allowed{job}: {schema.__name__} has no key {key!r}."
                f"{did_you_mean(key, keys)} Its keys are {', '.join(keys)}."
            ) from None
        said = _one_paragraph(str(e) + ("\n" + str(cause) if cause is not e else ""))
        said += _list_hint(typed, said)
        error = ConfigError(f"{typed + ' is not allowed' + job + ': ' if typed else ''}{said}")
        error.hint = hydra_args.quoting_hint() if isinstance(e, OverrideParseException) else None
        raise error from None


def _list_hint(typed: str, message: str) -> str:
    """`imports=mynorm` for a key that takes a list: the spelling that works."""
    key, eq, value = typed.partition("=")
    if not eq or "is not a ListConfig" not in message or value.startswith("["):
        return ""
    return f" {key.lstrip('+~')} takes a list: write {key}=[{value}] (several: {key}=[a,b])."


def _typed_override(overrides: list[str], full_key: str, message: str) -> str:
    """The override (as the user typed it) that an error is about."""
    for o in overrides:
        if o in message:
            return o
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if full_key and (key == full_key or full_key.startswith(key + ".") or key.endswith("." + full_key)):
            return o
    return ""


def _one_paragraph(text: str) -> str:
    """Hydra's multi-line message as one paragraph, without its pointers to internals."""
    skip = (
        "full_key:",
        "object_type=",
        "reference_type=",
        "To append to your config use",
        "Set the environment variable",
    )
    lines = [ln.strip() for ln in text.splitlines()]
    kept = [ln for ln in lines if ln and not ln.startswith(skip)]
    out = " ".join(ln if re.search(r"[.:;!?]$", ln) else ln + "." for ln in kept)
    return re.sub(r"\s+", " ", out).replace(":.", ":")
