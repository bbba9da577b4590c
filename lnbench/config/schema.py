"""Typed schemas for every config group, registered in Hydra's ConfigStore.

Each preset YAML under conf/ starts from one of these schemas (its defaults list names `/base_*`), so a
misspelt key or a value of the wrong type fails at composition, with Hydra's own message, before any
tensor is made. Checks that need more than a type (ranges, combinations) live in lnbench.config.validate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class
from omegaconf import MISSING, OmegaConf

from lnbench import CONF_DIR
from lnbench.config.choices import Impl, Placement, Stage
from lnbench.config.domains import NormSchema, ranged, text
from lnbench.config.presets import preset_names, read_preset
from lnbench.config.site import SiteConfig


class CellKind(str, Enum):
    lstm = "lstm"
    gru = "gru"
    lstm_norm_c = "lstm_norm_c"  # the normalizer on the cell state only: the paper's DRAW LSTM (lnbench.nn.rnn)


class WandbMode(str, Enum):
    online = "online"
    offline = "offline"
    disabled = "disabled"


class WandbConsole(str, Enum):
    """What W&B's Logs tab gets (lnbench.training.sinks.wandb_run.start_wandb says why not redirect)."""

    wrap = "wrap"
    off = "off"


# ---- model ------------------------------------------------------------------------------------
SIZES = "a model's sizes and counts are integers >= 1"


@dataclass
class MLPConfig:
    _target_: str = "lnbench.models.MLP"
    hidden_sizes: list[int] = ranged(factory=lambda: [1000, 1000], low=1, each=True, why=SIZES)
    norm: NormSchema = field(default_factory=NormSchema)


@dataclass
class SequenceModelConfig:
    _target_: str = "lnbench.models.SequenceModel"
    cell: CellKind = CellKind.lstm
    hidden_size: int = ranged(128, low=1, why=SIZES)
    num_layers: int = ranged(1, low=1, why=SIZES)
    embed_size: Optional[int] = ranged(None, low=1, why=SIZES)
    norm: NormSchema = field(default_factory=NormSchema)
    impl: Impl = Impl.auto


@dataclass
class TransformerConfig:
    _target_: str = "lnbench.models.transformer.Transformer"
    hidden_size: int = ranged(128, low=1, why=SIZES)  # d_model
    num_layers: int = ranged(2, low=1, why=SIZES)
    num_heads: int = ranged(4, low=1, why=SIZES)
    ff_size: int = ranged(512, low=1, why=SIZES)
    placement: Placement = Placement.pre
    norm: NormSchema = field(default_factory=NormSchema)


@dataclass
class DRAWConfig:
    """The paper's section 6.4 DRAW (lnbench.models.draw); the defaults are the paper's and Gregor et al.'s MNIST
    model."""

    _target_: str = "lnbench.models.draw.DRAW"
    glimpses: int = ranged(64, low=1, why=SIZES)
    hidden_size: int = ranged(256, low=1, why=SIZES)
    latent_size: int = ranged(100, low=1, why=SIZES)
    read_size: int = ranged(2, low=1, why=SIZES)
    write_size: int = ranged(5, low=1, why=SIZES)
    cell: CellKind = CellKind.lstm_norm_c
    norm: NormSchema = field(default_factory=NormSchema)


@dataclass
class ConvNetConfig:
    _target_: str = "lnbench.models.conv.ConvNet"
    channels: list[int] = ranged(factory=lambda: [16, 32], low=1, each=True, why=SIZES)
    norm: NormSchema = field(default_factory=NormSchema)


@dataclass
class ResNetConfig:
    _target_: str = "lnbench.models.resnet.ResNet"
    depth: int = ranged(16, low=1, why=SIZES)  # residual blocks (Fixup's L)
    width: int = ranged(16, low=1, why=SIZES)
    branch_layers: int = ranged(2, low=1, why=SIZES)  # convs per residual branch (Fixup's m)
    stem_pool: int = ranged(
        2, low=1, why=SIZES
    )  # max-pooling after the stride-2 stem: 28 x 28 images -> 7 x 7 maps in the blocks
    fixup: bool = False
    norm: NormSchema = field(default_factory=NormSchema)


# ---- dataset ----------------------------------------------------------------------------------
# Real data: the dataset's data_dir, which is site.data_dir unless a preset or the command line says otherwise.
DATA_DIR = "${site.data_dir}"


@dataclass
class DatasetBase:
    _target_: str = MISSING
    batch_size: int = ranged(64, low=1)
    eval_batch_size: int = ranged(500, low=1)
    seed: int = ranged("${seed}", low=0)  # type: ignore[assignment]  (interpolated from the run's seed)


@dataclass
class MNISTConfig(DatasetBase):
    _target_: str = "lnbench.data.MNIST"
    data_dir: str = text(DATA_DIR)
    batch_size: int = ranged(128, low=1)
    eval_batch_size: int = ranged(1000, low=1)
    val_size: int = ranged(5000, low=1)
    download: bool = False
    normalize: bool = True
    carve: list[int] = ranged(factory=lambda: [8000, 1000, 1000], low=1, each=True)
    limit_train: Optional[int] = ranged(None, low=1)


@dataclass
class SeqMNISTConfig(MNISTConfig):
    _target_: str = "lnbench.data.SeqMNIST"
    batch_size: int = ranged(64, low=1)
    seq_len: int = ranged(28, low=1)
    eval_seq_len: Optional[int] = ranged(None, low=1)
    permute: bool = False
    permutation_seed: int = ranged(0, low=0)


@dataclass
class BinarizedMNISTConfig(DatasetBase):
    _target_: str = "lnbench.data.binarized_mnist.BinarizedMNIST"
    data_dir: str = text(DATA_DIR)
    batch_size: int = ranged(128, low=1)
    eval_batch_size: int = ranged(1000, low=1)
    binarize_seed: int = ranged(0, low=0)  # fixes the binarization (and a carve from the 10k split) for every run
    val_size: int = ranged(10000, low=1)
    carve: list[int] = ranged(factory=lambda: [8000, 1000, 1000], low=1, each=True)
    download: bool = False
    limit_train: Optional[int] = ranged(None, low=1)


@dataclass
class SyntheticConfig(DatasetBase):
    seq_len: int = ranged(50, low=1)
    eval_seq_len: Optional[int] = ranged(None, low=1)
    val_size: int = ranged(1000, low=1)
    test_size: int = ranged(1000, low=1)
    train_size: Optional[int] = ranged(None, low=1)


@dataclass
class AddingConfig(SyntheticConfig):
    _target_: str = "lnbench.data.Adding"


@dataclass
class CopyConfig(SyntheticConfig):
    _target_: str = "lnbench.data.Copy"
    seq_len: int = ranged(30, low=1)
    num_symbols: int = ranged(8, low=1)
    copy_len: int = ranged(10, low=1)


@dataclass
class ShakespeareConfig(DatasetBase):
    _target_: str = "lnbench.data.Shakespeare"
    data_dir: str = text(DATA_DIR)
    batch_size: int = ranged(32, low=1)
    eval_batch_size: int = ranged(64, low=1)
    seq_len: int = ranged(100, low=1)
    eval_seq_len: Optional[int] = ranged(None, low=1)
    max_eval_windows: Optional[int] = ranged(200, low=1)
    split: list[float] = ranged(
        factory=lambda: [0.9, 0.05, 0.05], low=0, high=1, low_open=True, each=True
    )  # train / val / test fractions


# ---- optimizer --------------------------------------------------------------------------------
MOMENTUM = (
    "it must be >= 0 and < 1 (at 1 or more each update adds to the last without decay and the weights grow "
    "without bound)"
)


@dataclass
class OptimBase:
    _target_: str = MISSING
    lr: float = ranged(1e-3, low=0, low_open=True, why="the learning rate must be > 0")
    weight_decay: float = ranged(0.0, low=0)


@dataclass
class AdamConfig(OptimBase):
    _target_: str = "torch.optim.Adam"
    betas: list[float] = ranged(factory=lambda: [0.9, 0.999], low=0, high=1, high_open=True, each=True)
    eps: float = ranged(1e-8, low=0, low_open=True)
    fused: Optional[bool] = None  # null: fused where torch supports it on the device


@dataclass
class SGDConfig(OptimBase):
    _target_: str = "torch.optim.SGD"
    lr: float = ranged(0.1, low=0, low_open=True, why="the learning rate must be > 0")
    momentum: float = ranged(0.9, low=0, high=1, high_open=True, why=MOMENTUM)
    nesterov: bool = False


@dataclass
class RMSpropConfig(OptimBase):
    _target_: str = "torch.optim.RMSprop"
    alpha: float = ranged(0.99, low=0, high=1, high_open=True)  # the squared gradients' running average's decay
    eps: float = ranged(1e-8, low=0, low_open=True)
    momentum: float = ranged(0.0, low=0, high=1, high_open=True, why=MOMENTUM)


# ---- learning-rate schedule --------------------------------------------------------------------
@dataclass
class ScheduleConfig:
    """`main`: a torch scheduler as a `_partial_` component (conf/schedule/), built on the optimizer after
    `warmup_steps` of linear warmup from lr/warmup_steps to lr."""

    warmup_steps: int = ranged(0, low=0)
    main: Any = MISSING


def steps_after_warmup(steps: int, warmup_steps: int) -> int:
    """The main schedule's length (`T_max`, `total_iters`): at least 1, so a warmup as long as the run is valid."""
    return max(int(steps) - int(warmup_steps), 1)


# ---- logger and run ---------------------------------------------------------------------------
SECONDS = "it must be a number of seconds > 0"


@dataclass
class WandbConfig:
    """logger.wandb (conf/logger/wandb.yaml): the run as a Weights & Biases run (lnbench.training.sinks.wandb_run)."""

    _target_: str = "lnbench.training.sinks.wandb_run.WandbSink"
    mode: WandbMode = "${oc.env:WANDB_MODE,offline}"  # type: ignore[assignment]
    project: str = text("${site.wandb_project}")
    entity: Optional[str] = "${site.wandb_entity}"  # type: ignore[assignment]
    group: Optional[str] = None  # null: the sweep's directory name in a multirun
    tags: list[str] = field(default_factory=list)
    name: Optional[str] = None  # null: made from the command-line overrides
    init_timeout: float = ranged(30.0, low=0, low_open=True, why=SECONDS)  # wandb.init's, then the run goes offline
    finish_timeout: float = ranged(
        60.0, low=0, low_open=True, why=SECONDS
    )  # seconds the end of the run may wait for uploads (the rest: `wandb sync`)
    report: bool = False  # after a sweep, one more W&B run in its group with the report's tables and plots
    job_type: str = text("train")  # lnbench check's rounds: tune, widen, judge
    console: WandbConsole = WandbConsole.wrap  # the Logs tab: the run's console lines (wrap), or nothing (off)


@dataclass
class CsvConfig:
    """logger.csv (conf/logger/csv.yaml): metrics.csv, the rows of metrics.jsonl as a table
    (lnbench.training.sinks.csv_file)."""

    _target_: str = "lnbench.training.sinks.csv_file.CsvSink"
    file: str = text("metrics.csv")  # in the run directory


# The logger node is {sink name: its config}: each file in conf/logger/ adds its own entry, typed by its
# schema above through its defaults list (`/base_wandb@wandb`). The node itself is an open dict, so that a
# new sink is a class and one YAML file, with no schema to edit (lnbench.training.sinks).
LoggerConfig = dict


@dataclass
class TrainConfig:
    model: Any = MISSING
    dataset: Any = MISSING
    optim: Any = MISSING
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    site: SiteConfig = field(default_factory=SiteConfig)
    seed: int = ranged(0, low=0)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # torch threads; null: the cores the job may use (lnbench.launch.process.threads). torch crashes at some
    # 100000; no machine lnbench runs on has more than 1024 cores.
    threads: Optional[int] = ranged(None, low=1, high=1024)
    # follow the cores other processes leave free: null (where no number depends on it), true (the same, and a
    # warning where it cannot), false (never)
    threads_follow: Optional[bool] = None
    steps: int = ranged(1000, low=1)
    eval_every: int = ranged(250, low=1)
    log_every: int = ranged(10, low=1)
    # the gradients' global norm is clipped to this; null: no clipping
    clip_grad_norm: Optional[float] = ranged(None, low=0, low_open=True, why="it must be > 0, or null for no clipping")
    checkpoint_every: int = ranged(
        250, low=1
    )  # also at step 0, at the end and on SIGTERM/SIGINT (lnbench.training.checkpoint)
    resume: Optional[str] = None  # a run directory to continue (with its own config) instead of a new run
    progress: Optional[bool] = None  # null: a rich progress bar on a TTY, log lines otherwise
    # Sequence datasets: after training, also test at each of these lengths (the same trained model).
    test_seq_lens: list[int] = ranged(factory=list, low=1, each=True)
    # What the run's sweep tests (read by `lnbench report`, never by training): see lnbench/claims/spec.py.
    claims: list[Any] = field(default_factory=list)
    tune: list[str] = field(default_factory=list)  # swept keys the report selects on validation
    # The run's part in a tuned comparison (lnbench/claims/verdicts.py): tune (chooses the hyperparameters), widen
    # (the same, at a value lnbench check added beyond the grid's edge), judge (a fresh seed at the chosen value).
    stage: str = Stage.tune.value  # lnbench.config.choices.Stage
    # Modules to import in every process of the run before its config is checked (the CLI, each joblib
    # worker, each submitit job): where a user's own normalizer, model or dataset registers itself.
    imports: list[str] = field(default_factory=list)


SCHEMAS = {
    "model": {
        "base_mlp": MLPConfig,
        "base_sequence": SequenceModelConfig,
        "base_transformer": TransformerConfig,
        "base_draw": DRAWConfig,
        "base_conv": ConvNetConfig,
        "base_resnet": ResNetConfig,
    },
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
    found = {}
    for name in preset_names(group, conf_dir):
        defaults = read_preset(group, name, conf_dir).get("defaults") or []
        found[name] = next(
            (d.lstrip("/") for d in defaults if isinstance(d, str) and d.lstrip("/") in SCHEMAS[group]), None
        )
    return found


def model_presets(*schemas: str, conf_dir: Path | str = CONF_DIR) -> list[str]:
    """The model presets, or only those built on one of `schemas`."""
    return [name for name, base in presets("model", conf_dir).items() if not schemas or base in schemas]


def presets_of_kind(group: str, attribute: str, kind: str) -> list[str]:
    """The presets of `group` whose class (its schema's `_target_`) has `attribute` == `kind`: e.g. the
    models that take sequences (`accepts`), the datasets that give flat inputs (`kind`)."""

    return [
        name
        for name, base in presets(group).items()
        if base and getattr(get_class(SCHEMAS[group][base]._target_), attribute, None) == kind
    ]


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
