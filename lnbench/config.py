"""Typed schemas for every config group, registered in Hydra's ConfigStore.

Each preset YAML under conf/ starts from one of these schemas (its defaults list names `/base_*`), so a
misspelt key or a value of the wrong type fails at composition, with Hydra's own message, before any
tensor is made. Checks that need more than a type (ranges, combinations) live in `validate`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from lnbench import CONF_DIR
from lnbench.errors import ConfigError
from lnbench.options import NORMALIZERS, Impl, NormConfig, Placement, normalizer


class CellKind(str, Enum):
    lstm = "lstm"
    gru = "gru"
    lstm_norm_c = "lstm_norm_c"  # the normalizer on the cell state only: the paper's DRAW LSTM (lnbench.nn.rnn)


class WandbMode(str, Enum):
    online = "online"
    offline = "offline"
    disabled = "disabled"


# ---- model ------------------------------------------------------------------------------------
@dataclass
class MLPConfig:
    _target_: str = "lnbench.models.MLP"
    hidden_sizes: list[int] = field(default_factory=lambda: [1000, 1000])
    norm: NormConfig = field(default_factory=NormConfig)


@dataclass
class SequenceModelConfig:
    _target_: str = "lnbench.models.SequenceModel"
    cell: CellKind = CellKind.lstm
    hidden_size: int = 128
    num_layers: int = 1
    embed_size: Optional[int] = None
    norm: NormConfig = field(default_factory=NormConfig)
    impl: Impl = Impl.auto


@dataclass
class TransformerConfig:
    _target_: str = "lnbench.models.transformer.Transformer"
    hidden_size: int = 128  # d_model
    num_layers: int = 2
    num_heads: int = 4
    ff_size: int = 512
    placement: Placement = Placement.pre
    norm: NormConfig = field(default_factory=NormConfig)


@dataclass
class DRAWConfig:
    """The paper's section 6.4 DRAW (lnbench.models.draw); the defaults are the paper's and Gregor et al.'s MNIST model."""
    _target_: str = "lnbench.models.draw.DRAW"
    glimpses: int = 64
    hidden_size: int = 256
    latent_size: int = 100
    read_size: int = 2
    write_size: int = 5
    cell: CellKind = CellKind.lstm_norm_c
    norm: NormConfig = field(default_factory=NormConfig)


@dataclass
class ConvNetConfig:
    _target_: str = "lnbench.models.conv.ConvNet"
    channels: list[int] = field(default_factory=lambda: [16, 32])
    norm: NormConfig = field(default_factory=NormConfig)


@dataclass
class ResNetConfig:
    _target_: str = "lnbench.models.resnet.ResNet"
    depth: int = 16  # residual blocks (Fixup's L)
    width: int = 16
    branch_layers: int = 2  # convs per residual branch (Fixup's m)
    stem_pool: int = 2  # max-pooling after the stride-2 stem: 28 x 28 images -> 7 x 7 maps in the blocks
    fixup: bool = False
    norm: NormConfig = field(default_factory=NormConfig)


# ---- dataset ----------------------------------------------------------------------------------
# Real data: the dataset's data_dir, else $LNBENCH_DATA_DIR, else the shared folder beside the repo.
DATA_DIR = "${oc.env:LNBENCH_DATA_DIR,../shared/data}"


@dataclass
class DatasetBase:
    _target_: str = MISSING
    batch_size: int = 64
    eval_batch_size: int = 500
    seed: int = "${seed}"  # type: ignore[assignment]  (interpolated from the run's seed)


@dataclass
class MNISTConfig(DatasetBase):
    _target_: str = "lnbench.data.MNIST"
    data_dir: str = DATA_DIR
    batch_size: int = 128
    eval_batch_size: int = 1000
    val_size: int = 5000
    download: bool = False
    normalize: bool = True
    carve: list[int] = field(default_factory=lambda: [8000, 1000, 1000])
    limit_train: Optional[int] = None


@dataclass
class SeqMNISTConfig(MNISTConfig):
    _target_: str = "lnbench.data.SeqMNIST"
    batch_size: int = 64
    seq_len: int = 28
    eval_seq_len: Optional[int] = None
    permute: bool = False
    permutation_seed: int = 0


@dataclass
class BinarizedMNISTConfig(DatasetBase):
    _target_: str = "lnbench.data.binarized_mnist.BinarizedMNIST"
    data_dir: str = DATA_DIR
    batch_size: int = 128
    eval_batch_size: int = 1000
    binarize_seed: int = 0  # fixes the binarization (and a carve from the 10k split) for every run
    val_size: int = 10000
    carve: list[int] = field(default_factory=lambda: [8000, 1000, 1000])
    download: bool = False
    limit_train: Optional[int] = None


@dataclass
class SyntheticConfig(DatasetBase):
    seq_len: int = 50
    eval_seq_len: Optional[int] = None
    val_size: int = 1000
    test_size: int = 1000
    train_size: Optional[int] = None


@dataclass
class AddingConfig(SyntheticConfig):
    _target_: str = "lnbench.data.Adding"


@dataclass
class CopyConfig(SyntheticConfig):
    _target_: str = "lnbench.data.Copy"
    seq_len: int = 30
    num_symbols: int = 8
    copy_len: int = 10


@dataclass
class ShakespeareConfig(DatasetBase):
    _target_: str = "lnbench.data.Shakespeare"
    data_dir: str = DATA_DIR
    batch_size: int = 32
    eval_batch_size: int = 64
    seq_len: int = 100
    eval_seq_len: Optional[int] = None
    max_eval_windows: Optional[int] = 200
    split: list[float] = field(default_factory=lambda: [0.9, 0.05, 0.05])  # train / val / test fractions


# ---- optimizer --------------------------------------------------------------------------------
@dataclass
class OptimBase:
    _target_: str = MISSING
    lr: float = 1e-3
    weight_decay: float = 0.0


@dataclass
class AdamConfig(OptimBase):
    _target_: str = "torch.optim.Adam"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    fused: Optional[bool] = None  # null: fused where torch supports it on the device


@dataclass
class SGDConfig(OptimBase):
    _target_: str = "torch.optim.SGD"
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = False


@dataclass
class RMSpropConfig(OptimBase):
    _target_: str = "torch.optim.RMSprop"
    alpha: float = 0.99
    eps: float = 1e-8
    momentum: float = 0.0


# ---- learning-rate schedule --------------------------------------------------------------------
@dataclass
class ScheduleConfig:
    """`main`: a torch scheduler as a `_partial_` component (conf/schedule/), built on the optimizer after
    `warmup_steps` of linear warmup from lr/warmup_steps to lr."""
    warmup_steps: int = 0
    main: Any = MISSING


def steps_after_warmup(steps: int, warmup_steps: int) -> int:
    """The main schedule's length (`T_max`, `total_iters`): at least 1, so a warmup as long as the run is valid."""
    return max(int(steps) - int(warmup_steps), 1)


# ---- logger and run ---------------------------------------------------------------------------
@dataclass
class WandbConfig:
    """logger.wandb (conf/logger/wandb.yaml): the run as a Weights & Biases run (lnbench.sinks.wandb_run)."""
    _target_: str = "lnbench.sinks.wandb_run.WandbSink"
    mode: WandbMode = "${oc.env:WANDB_MODE,offline}"  # type: ignore[assignment]
    project: str = "lnbench"
    entity: Optional[str] = None
    group: Optional[str] = None  # null: the sweep's directory name in a multirun
    tags: list[str] = field(default_factory=list)
    name: Optional[str] = None  # null: made from the command-line overrides
    init_timeout: float = 30.0  # seconds wandb.init may take before the run goes on offline
    finish_timeout: float = 60.0  # seconds the end of the run may wait for uploads (the rest: `wandb sync`)
    report: bool = False  # after a sweep, one more W&B run in its group with the report's tables and plots


@dataclass
class CsvConfig:
    """logger.csv (conf/logger/csv.yaml): metrics.csv, the rows of metrics.jsonl as a table (lnbench.sinks.csv_file)."""
    _target_: str = "lnbench.sinks.csv_file.CsvSink"
    file: str = "metrics.csv"  # in the run directory


# The logger node is {sink name: its config}: each file in conf/logger/ adds its own entry, typed by its
# schema above through its defaults list (`/base_wandb@wandb`). The node itself is an open dict, so that a
# new sink is a class and one YAML file, with no schema to edit (lnbench.sinks).
LoggerConfig = dict


def validate_logger(logger: Any) -> None:
    """Each logger entry is one sink's config, with the `_target_` that builds it: anything else (`+logger.nope=1`)
    is a typo that would silently do nothing. metrics.jsonl is no entry: every run writes it."""
    import importlib

    from lnbench.sinks.jsonl import KEY as RECORD_KEY

    for key, node in (logger or {}).items():
        if key == RECORD_KEY or not OmegaConf.is_dict(node) or "_target_" not in node:
            value = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
            raise ConfigError(
                f"logger.{key}={value} is not allowed: "
                + ("metrics.jsonl is written by every run, it is not chosen. " if key == RECORD_KEY else
                   f"each logger entry is a metric sink's config with a _target_, and {key!r} has none. ")
                + f"Choose sinks with logger=NAME or a list, logger=[wandb,csv] (the files in {CONF_DIR / 'logger'}: "
                f"{', '.join(sorted(p.stem for p in (CONF_DIR / 'logger').glob('*.yaml')))})."
            )
        try:  # before anything is built: a sink's class that cannot be found is a typo too
            # importlib, not hydra.utils.get_object: that one logs its own error before raising
            module, _, name = str(node._target_).rpartition(".")
            getattr(importlib.import_module(module), name)
        except Exception as e:
            raise ConfigError(
                f"logger.{key}._target_={node._target_} is not allowed: it cannot be imported "
                f"({type(e).__name__}: {' '.join(str(e).split())[:200]}). Give the sink's class as module.Class."
            ) from None
    for key in ("init_timeout", "finish_timeout"):
        if OmegaConf.select(logger, f"wandb.{key}", default=1) <= 0:
            raise ConfigError(f"logger.wandb.{key}={OmegaConf.select(logger, f'wandb.{key}')} is not allowed: it must be a number of seconds > 0.")


@dataclass
class TrainConfig:
    model: Any = MISSING
    dataset: Any = MISSING
    optim: Any = MISSING
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: Optional[int] = None  # torch intra-op threads; null: torch's default
    steps: int = 1000
    eval_every: int = 250
    log_every: int = 10
    clip_grad_norm: Optional[float] = None  # the gradients' global norm is clipped to this; null: no clipping
    checkpoint_every: int = 250  # also at step 0, at the end and on SIGTERM/SIGINT (lnbench.checkpoint)
    resume: Optional[str] = None  # a run directory to continue (with its own config) instead of a new run
    progress: Optional[bool] = None  # null: a rich progress bar on a TTY, log lines otherwise
    # Sequence datasets: after training, also test at each of these lengths (the same trained model).
    test_seq_lens: list[int] = field(default_factory=list)
    # What the run's sweep tests (read by `lnbench report`, never by training): see lnbench/claims.py.
    claims: list[Any] = field(default_factory=list)
    tune: list[str] = field(default_factory=list)  # swept keys the report selects on validation
    # The run's part in a tuned comparison (lnbench/verdicts.py): tune (chooses the hyperparameters), widen
    # (the same, at a value lnbench check added beyond the grid's edge), judge (a fresh seed at the chosen value).
    stage: str = "tune"


SCHEMAS = {
    "model": {"base_mlp": MLPConfig, "base_sequence": SequenceModelConfig, "base_transformer": TransformerConfig,
              "base_draw": DRAWConfig, "base_conv": ConvNetConfig, "base_resnet": ResNetConfig},
    "dataset": {
        "base_mnist": MNISTConfig,
        "base_seq_mnist": SeqMNISTConfig,
        "base_binarized_mnist": BinarizedMNISTConfig,
        "base_adding": AddingConfig,
        "base_copy": CopyConfig,
        "base_shakespeare": ShakespeareConfig,
    },
    "optim": {"base_adam": AdamConfig, "base_sgd": SGDConfig, "base_rmsprop": RMSpropConfig},
    "schedule": {"base_schedule": ScheduleConfig},
    "logger": {"base_wandb": WandbConfig, "base_csv": CsvConfig},
}




def presets(group: str, conf_dir: Path | str = CONF_DIR) -> dict[str, Optional[str]]:
    """{preset: the schema it is built on (`base_mlp`, ...)} for the presets in conf/<group>, read from each
    preset's defaults list: the one list of preset names (tests, Makefile, bench, error messages ask here)."""
    import yaml

    found = {}
    for path in sorted((Path(conf_dir) / group).glob("*.yaml")):
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
        found[path.stem] = next((d.lstrip("/") for d in defaults if isinstance(d, str) and d.lstrip("/") in SCHEMAS[group]), None)
    return found


def model_presets(*schemas: str, conf_dir: Path | str = CONF_DIR) -> list[str]:
    """The model presets, or only those built on one of `schemas`."""
    return [name for name, base in presets("model", conf_dir).items() if not schemas or base in schemas]


def presets_of_kind(group: str, attribute: str, kind: str) -> list[str]:
    """The presets of `group` whose class (its schema's `_target_`) has `attribute` == `kind`: e.g. the
    models that take sequences (`accepts`), the datasets that give flat inputs (`kind`)."""
    from hydra.utils import get_class

    return [name for name, base in presets(group).items() if base and getattr(get_class(SCHEMAS[group][base]._target_), attribute, None) == kind]


def steps_for_epochs(epochs: float, batch_size: int, train_size: int) -> int:
    """Optimizer steps for `epochs` passes over the training set (a short last batch is dropped per epoch):
    `steps: ${lnbench.epochs:3,${dataset.batch_size},8000}` gives batch 4 and batch 128 the same epochs."""
    return max(1, round(float(epochs) * (int(train_size) // int(batch_size))))


# At import, so that every process that builds a model (joblib/submitit workers too) can resolve it.
OmegaConf.register_new_resolver("lnbench.epochs", steps_for_epochs, replace=True)
OmegaConf.register_new_resolver("lnbench.after_warmup", steps_after_warmup, replace=True)


def register_configs() -> None:
    """The schemas are stored outside the config groups (a preset names one as `/base_*`), so that they are
    never offered as choices: not in `lnbench train --help`, not in the options of a misspelt choice."""
    cs = ConfigStore.instance()
    cs.store(name="base_train", node=TrainConfig)
    for nodes in SCHEMAS.values():
        for name, node in nodes.items():
            cs.store(name=name, node=node)


# Keys whose values are free-form (not checked against a schema, any nested keys allowed). Every other
# key must be a field of its schema, even one added with `+`/`++` (Hydra lets `+` add any key).
FREE_FORM: tuple[str, ...] = ("claims",)


def check_keys(cfg: Any, prefix: str = "") -> None:
    """Refuses a key its node's schema does not declare (e.g. `+foo=1`, `+model.foo=1`, `+optim.momentum=0.9`
    with Adam): the schema is the whitelist, so a misspelt key cannot silently do nothing."""
    import dataclasses

    from omegaconf import DictConfig

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
                f"{full}={_typed(value)} is not allowed: {where} has no key {key!r}. Its keys are "
                f"{', '.join(sorted(k for k in allowed if not k.startswith('_')))}"
                f"{'; keys free for any value: ' + ', '.join(FREE_FORM) if not prefix else ''}."
            )
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            check_keys(node, f"{full}.")


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
    for key, value in _leaves(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is not allowed: it must be a finite number.")
    if cfg.seed < 0:
        raise ConfigError(f"seed={cfg.seed} is not allowed: it must be an integer >= 0.")
    for key in ("steps", "eval_every", "log_every", "checkpoint_every", "dataset.batch_size", "dataset.eval_batch_size"):
        _at_least(cfg, key, 1)
    for key in ("dataset.seq_len", "dataset.eval_seq_len", "model.hidden_size", "model.num_layers", "threads"):
        _at_least(cfg, key, 1, optional=True)
    _at_least(cfg, "schedule.warmup_steps", 0)
    if cfg.clip_grad_norm is not None and cfg.clip_grad_norm <= 0:
        raise ConfigError(f"clip_grad_norm={cfg.clip_grad_norm} is not allowed: it must be > 0, or null for no clipping.")
    if cfg.optim.lr <= 0:
        raise ConfigError(f"optim.lr={cfg.optim.lr} is not allowed: the learning rate must be > 0.")
    if cfg.stage not in ("tune", "widen", "judge"):
        raise ConfigError(f"stage={cfg.stage} is not allowed: use tune (the default), widen or judge (a fresh seed at chosen hyperparameters).")
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
    if any(n < 1 for n in cfg.test_seq_lens):
        raise ConfigError(f"test_seq_lens={list(cfg.test_seq_lens)} is not allowed: every length must be >= 1.")
    device = str(cfg.device)
    if not (device in ("auto", "cpu", "cuda", "mps") or device.startswith("cuda:")):
        raise ConfigError(f"device={device!r} is not allowed: use auto, cpu, cuda or cuda:N.")


def _at_least(cfg: Any, key: str, low: int, optional: bool = False) -> None:
    value = OmegaConf.select(cfg, key, default=None)
    if value is None and optional:
        return
    if value is None or value < low:
        raise ConfigError(f"{key}={value} is not allowed: it must be an integer >= {low}.")
