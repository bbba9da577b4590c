"""The checks of a composed config that a type cannot express (ranges, combinations, keys added with `+`),
each a ConfigError naming the key, the value and what is allowed. lnbench.launch.preflight runs them once for a
single run, each sweep job's process once for its job.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import math
import re
from typing import Any, Iterable

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.nodes import BooleanNode

from lnbench import CONF_DIR
from lnbench.config import overrides as hydra_args
from lnbench.config.choices import RECORD_SINK, Stage
from lnbench.config.domains import DOMAIN, Range, outside_domain
from lnbench.config.presets import preset_names
from lnbench.errors import ConfigError
from lnbench.nn.normalizers import NORMALIZERS, normalizer


def validate_logger(logger: Any) -> None:
    """Each logger entry is one sink's config, with the `_target_` that builds it: anything else (`+logger.nope=1`)
    is a typo that would silently do nothing. metrics.jsonl is no entry: every run writes it."""

    for key, node in (logger or {}).items():
        if key == RECORD_SINK or not OmegaConf.is_dict(node) or "_target_" not in node:
            value = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
            raise ConfigError(
                f"logger.{key}={value} is not allowed: "
                + (
                    "metrics.jsonl is written by every run, it is not chosen. "
                    if key == RECORD_SINK
                    else f"each logger entry is a metric sink's config with a _target_, and {key!r} has none. "
                )
                + f"Choose sinks with logger=NAME or a list, logger=[wandb,csv] (the files in {CONF_DIR / 'logger'}: "
                f"{', '.join(preset_names('logger'))})."
            )
        try:  # before anything is built: a sink's class that cannot be found is a typo too
            # importlib, not hydra.utils.get_object: that one logs its own error before raising
            module, _, name = str(node._target_).rpartition(".")
            sink = getattr(importlib.import_module(module), name)
        except Exception as e:  # noqa: BLE001 (whatever importing it raised: the user's typo, said as one)
            raise ConfigError(
                f"logger.{key}._target_={node._target_} is not allowed: it cannot be imported "
                f"({type(e).__name__}: {' '.join(str(e).split())[:200]}). Give the sink's class as module.Class."
            ) from None
        _check_sink_keys(key, node, sink)
    check_domains(logger, "logger.")  # its values too (timeouts): a sweep checks its keys before its jobs


def _check_sink_keys(key: str, node: Any, sink: Any) -> None:
    """A sink without a schema takes its keys as its constructor's arguments: one it has no argument for is a
    typo, refused here (its constructor would raise a TypeError, which would read as a bug in the sink)."""
    given = [str(k) for k in node if k != "_target_"]
    try:
        params = inspect.signature(sink).parameters
    except (TypeError, ValueError):  # no signature to read: the constructor itself says
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for k in given:
        if k not in params or k in ("run", "resume"):
            takes = ", ".join(
                n for n, p in params.items() if n not in ("self", "run", "resume") and p.kind is not p.VAR_POSITIONAL
            )
            raise ConfigError(
                f"logger.{key}.{k}={OmegaConf.select(node, k)} is not allowed: {sink.__name__} has no argument "
                f"{k!r}. Its arguments are {takes or 'none'}."
            )


# Keys whose values are free-form (not checked against a schema, any nested keys allowed). Every other
# key must be a field of its schema, even one added with `+`/`++` (Hydra lets `+` add any key).
FREE_FORM: tuple[str, ...] = ("claims",)


def check_keys(cfg: Any, prefix: str = "") -> None:
    """Refuses a key its node's schema does not declare (e.g. `+foo=1`, `+model.foo=1`, `+optim.momentum=0.9`
    with Adam): the schema is the whitelist, so a misspelt key cannot silently do nothing."""

    if not prefix and "logger" in cfg:
        validate_logger(cfg.logger)  # an open node: its entries are checked as sinks' configs
    schema = OmegaConf.get_type(cfg)
    allowed = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key in sorted(allowed - set(cfg.keys())) if allowed is not None else []:
        raise ConfigError(
            f"~{prefix}{key} is not allowed: {prefix}{key} is a key of {schema.__name__} and every run needs it. "
            f"Give it another value instead ({prefix}{key}=<value>, null where it is optional)."
        )
    for key in cfg.keys():
        full = f"{prefix}{key}"
        if full in FREE_FORM:
            continue
        if allowed is not None and key not in allowed:
            value = OmegaConf.select(cfg, str(key), throw_on_missing=False)
            where = f"the {prefix[:-1]} config ({schema.__name__})" if prefix else "lnbench train"
            raise ConfigError(
                f"{full}={_typed(value)} is not allowed: {where} has no key {key!r}.{did_you_mean(str(key), allowed)} "
                f"Its keys are {', '.join(sorted(k for k in allowed if not k.startswith('_')))}"
                f"{'; keys free for any value: ' + ', '.join(FREE_FORM) if not prefix else ''}."
            )
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            check_keys(node, f"{full}.")


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """ " Did you mean X?" for a misspelt key or preset name close to one of `options`, else ""."""
    near = difflib.get_close_matches(word, sorted(o for o in options if not o.startswith("_")), n=2, cutoff=0.75)
    return f" Did you mean {' or '.join(near)}?" if near else ""


def _leaves(node: Any, prefix: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix[:-1]}[{i}].")
    else:
        yield prefix[:-1], node


def _typed(value: Any) -> str:
    return str(OmegaConf.to_container(value)) if OmegaConf.is_config(value) else str(value)


def validate(cfg: Any) -> None:
    """Checks a type cannot express; each raises ConfigError naming the key, the value, what is allowed."""
    check_keys(cfg)
    leaves = _leaves(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    for key, value in sorted(leaves, key=lambda kv: kv[0].count(".")):  # `seed`, not the dataset.seed it sets
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is not allowed: it must be a finite number.")
        if isinstance(value, int) and not -BIGGEST <= value <= BIGGEST:
            # torch's seeds, steps and sizes are 64-bit: a bigger number is an overflow deep in a run
            raise ConfigError(
                f"{key}={value} is not allowed: it must be a 64-bit integer, at most {BIGGEST} (2**63-1)."
            )
    check_domains(cfg)
    _check_combinations(cfg)


def check_domains(cfg: Any, prefix: str = "") -> None:
    """Every key against its domain, as its schema declares it (lnbench.config.domains): the key highest in the
    config first (`seed`, not the dataset.seed it sets). `prefix`: where `cfg` sits in the run's config."""
    found: list[tuple[str, Any, Any]] = []

    def walk(node: Any, data: Any, prefix: str) -> None:
        schema = OmegaConf.get_type(node)
        for f in dataclasses.fields(schema) if dataclasses.is_dataclass(schema) else ():
            if f.metadata.get(DOMAIN) is not None and isinstance(data, dict) and f.name in data:
                found.append((f"{prefix}{f.name}", data[f.name], f.metadata[DOMAIN]))
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
                walk(child, data.get(key) if isinstance(data, dict) else None, f"{prefix}{key}.")

    walk(cfg, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), prefix)
    refused = outside_domain(sorted(found, key=lambda kv: kv[0].count(".")))
    if refused:
        raise ConfigError(refused[0])


BIGGEST = 2**63 - 1


def _check_betas(cfg: Any) -> None:
    """Their count only: torch's Adam checks their range itself (and says so), but indexes a short list blindly."""
    betas = OmegaConf.select(cfg, "optim.betas", default=None)
    if betas is not None and len(betas) != 2:
        raise ConfigError(
            f"optim.betas={list(betas)} is not allowed: Adam takes two decay rates, each >= 0 and < 1, "
            "e.g. optim.betas=[0.9,0.999] (the gradient's running mean, then its square's)."
        )


def _check_combinations(cfg: Any) -> None:
    """Values each allowed alone that make no sense here or together. (A warmup longer than the run is
    allowed, and flagged in the run's summary: lnbench.training.flags.suspect; a smoke run of a preset has one.)"""
    for key, value in _leaves(OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True), "model."):
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            # Every integer of a model is a size or a count; a constructor that gets 0 fails in its own code
            raise ConfigError(f"{key}={value} is not allowed: a model's sizes and counts are integers >= 1.")
    _check_betas(cfg)
    if cfg.stage not in {s.value for s in Stage}:
        raise ConfigError(
            f"stage={cfg.stage} is not allowed: use tune (the default), widen or judge "
            "(a fresh seed at chosen hyperparameters)."
        )
    norm = cfg.model.get("norm")
    if norm is not None and normalizer(norm.kind).batch_stats and cfg.dataset.batch_size < 2:
        per_case = ", ".join(n for n, z in NORMALIZERS.items() if not z.batch_stats)
        raise ConfigError(
            f"dataset.batch_size={cfg.dataset.batch_size} is not allowed with batch normalization "
            f"(model.norm.kind={norm.kind}, statistics over the batch): it needs at least 2 cases per batch to "
            f"estimate a variance in training. Use dataset.batch_size >= 2, or a per-case normalizer ({per_case})."
        )
    if cfg.test_seq_lens and OmegaConf.select(cfg, "dataset.eval_seq_len", default="absent") == "absent":
        raise ConfigError(
            f"test_seq_lens={list(cfg.test_seq_lens)} is not allowed with this dataset: it has no "
            f"eval_seq_len. Use a sequence dataset whose test length can change (adding, copy, shakespeare)."
        )
    check_device_name(str(cfg.device))
    _check_schedule(cfg)
    _check_sweep_record(cfg)


DEVICE_NAME = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_device_name(device: str) -> None:
    """A device's name as torch reads it (`cuda:abc` would be torch's RuntimeError deep in a run); whether this
    machine has it is lnbench.training.device's question, asked before any job starts (lnbench.launch.preflight)."""
    if not DEVICE_NAME.fullmatch(device):
        raise ConfigError(f"device={device!r} is not allowed: use auto, cpu, cuda or cuda:N (N = 0, 1, ...) or mps.")


# The learning-rate schedule's arguments (torch's schedulers, passed through, so no schema declares their domains):
# the rate never goes below zero. (A number that is not finite is refused with every other leaf, in validate.)
SCHEDULE_DOMAINS = {
    "eta_min": Range(low=0, why="it is the learning rate the cosine ends at: a number >= 0"),
    **dict.fromkeys(
        ("factor", "start_factor", "end_factor"), Range(0, 1, why="it is a multiple of optim.lr: a number from 0 to 1")
    ),
}


def _check_schedule(cfg: Any) -> None:
    main = OmegaConf.select(cfg, "schedule.main", default=None)
    if not OmegaConf.is_dict(main):
        return
    refused = outside_domain([(f"schedule.main.{k}", main.get(k), d) for k, d in SCHEDULE_DOMAINS.items()])
    if refused:
        raise ConfigError(refused[0])


def _check_sweep_record(cfg: Any) -> None:
    """What `lnbench report` reads of a sweep (never training): each tuned key is a key of the config. (Its claims:
    lnbench.launch.preflight.check_claims, with lnbench.claims' parser.) Refused here, or the report of the runs
    would fail after all the work."""
    for key in cfg.tune:
        groups = ("model", "dataset", "optim", "schedule")
        if key not in groups and OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
            raise ConfigError(
                f"tune=[{','.join(cfg.tune)}] is not allowed: {key} is not a key of this config. tune lists the swept "
                f"keys a report chooses on validation, e.g. tune=[optim.lr].{did_you_mean(key, _keys(cfg))}"
            )


_ABSENT = object()


def _keys(cfg: Any) -> list[str]:
    return [k for k, _ in _leaves(OmegaConf.to_container(cfg, resolve=False))]


def check_typed(overrides: list[str], cfg: Any) -> None:
    """What the command line gives a key, before OmegaConf converts it: a flag (a bool key) takes true or false
    (OmegaConf would store `threads_follow=2` as true), and `stage` is lnbench check's to set (its rounds' files)."""
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.key_or_group
        if key == "stage":
            raise ConfigError(
                f"{o.input_line} is not allowed: a run's stage (tune, widen, judge) is set by lnbench check's rounds; "
                "a run made by hand tunes. Leave stage out."
            )
        if o.is_delete() or not isinstance(_node(cfg, key), BooleanNode):
            continue
        values = o.value().list if o.is_sweep_override() and hasattr(o.value(), "list") else [o.value()]
        for v in values:
            if not (isinstance(v, bool) or v is None or str(v).lower() in ("true", "false")):
                null = ", or null (lnbench's choice)" if _node(cfg, key)._is_optional() else ""
                raise ConfigError(f"{key}={v} is not allowed: {key} is true or false{null}.")


def _node(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        if not OmegaConf.is_dict(node) or part not in node:
            return None
        node = node._get_node(part)
    return node


def validate_sweep(master: Any) -> None:
    """A sweep's own settings, before its first job: a joblib launcher with no job slots (joblib would refuse
    only after Hydra began), and the same job twice (`seed=0,0`: twice the time for one result, and a report
    that counts one seed as two)."""
    launcher = OmegaConf.select(master, "hydra.launcher", default=None) or {}
    check_launcher_keys(launcher, str(OmegaConf.select(master, "hydra.runtime.choices.hydra/launcher", default="")))
    if str(launcher.get("_target_", "")).endswith("JoblibLauncher") and launcher.get("n_jobs") == 0:
        raise ConfigError(
            "hydra.launcher.n_jobs=0 is not allowed: it is how many jobs joblib runs at once. Give an "
            "integer >= 1, or -1 for one job per core (-2 for all cores but one)."
        )
    if str(launcher.get("_target_", "")).endswith(".PackedLauncher"):
        check_pack_size(launcher.get("size"))
    if not str(OmegaConf.select(master, "hydra.sweeper._target_", default="")).endswith(".BasicSweeper"):
        return
    params = OmegaConf.select(master, "hydra.sweeper.params", default=None) or {}
    axes = hydra_args.axes([*(f"{k}={v}" for k, v in params.items()), *master.hydra.overrides.task])
    for key, values in axes.items():
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ConfigError(
                f"{key}={','.join(v.split('=', 1)[1] for v in values)} is not allowed: it sweeps "
                f"{' and '.join(twice)} more than once, so the sweep would run the same job twice. Give each value "
                "once."
            )


def check_launcher_keys(launcher: Any, choice: str) -> None:
    """Each key of the launcher's config is an option the launcher takes (Hydra lets `+hydra.launcher.x=1` add any
    key, which a launcher would swallow or choke on once the sweep began): its schema's fields, or, for a launcher
    without one (lnbench's packed), its constructor's arguments."""
    schema = OmegaConf.get_type(launcher) if OmegaConf.is_config(launcher) else None
    if dataclasses.is_dataclass(schema):
        takes = {f.name for f in dataclasses.fields(schema)}
    else:
        module, _, name = str(launcher.get("_target_", "")).rpartition(".")
        try:
            params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
        except (ImportError, AttributeError, TypeError, ValueError):  # Hydra itself says what it cannot load
            return
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        takes = set(params) - {"self"}
    options = sorted(k for k in takes if not k.startswith("_"))
    for key in launcher:
        if str(key) not in takes and str(key) != "_target_":
            raise ConfigError(
                f"hydra.launcher.{key}={OmegaConf.select(launcher, str(key))} is not allowed: the {choice} launcher "
                f"(hydra/launcher={choice}) has no option {key!r}.{did_you_mean(str(key), takes)} "
                + (f"Its options are {', '.join(options)}." if options else "It takes no options.")
            )


def check_pack_size(size: Any) -> int:
    """hydra.launcher.size of the packed launcher (lnbench.launch.sweep.pack): the most replicas one pack trains."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(
            f"hydra.launcher.size={size!r} is not allowed: it is the most replicas one pack trains, an integer >= 1 "
            f"(1 trains every job alone, as the basic launcher does)."
        )
    return size
