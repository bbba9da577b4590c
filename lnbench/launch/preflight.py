"""The checks of `lnbench train` before Hydra creates or writes any directory, and what they learnt (`Plan`).

Every override composes and every key is in its schema (a typo refuses a sweep before its first job); the
output directory can be written; a single run is validated and built once (dataset, model, optimizer, on
the CPU, then dropped), its training batch measured on a few cases against the memory there is, and an
existing run directory is locked and its checkpoint checked against the config, before Hydra writes there.
Each refusal is a ConfigError: one paragraph naming the override as typed and what is allowed.
"""

from __future__ import annotations

import copy
import errno
import itertools
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict, read_write

from lnbench.claims.spec import ClaimError, parse_claim
from lnbench.config import launchers, user_folder
from lnbench.config import overrides as hydra_args
from lnbench.config.hydra_errors import composing
from lnbench.config.launchers import LauncherKind
from lnbench.config.presets import Sweep
from lnbench.config.validate import check_device_name, check_keys, check_typed, validate, validate_sweep
from lnbench.errors import ConfigError, UserError
from lnbench.launch import user_modules
from lnbench.runs import OVERRIDES, RunLock

MIN_FREE_BYTES = 2**20  # a disk with less free is full: a run's first checkpoint and records would not fit
ALL_JOBS_UP_TO = 24  # sweeps up to this many jobs compose every job before the first starts


@dataclass
class Plan:
    """What the checks learnt, for Hydra's jobs (lnbench.launch.entry.Job): passed to them, never kept in a global."""

    args: list[str]  # for Hydra: the overrides as typed, then the output directory, resolved once
    multirun: bool
    out_dir: Path  # the run's directory, or the sweep's
    kind: LauncherKind  # how the sweep's launcher runs its jobs (lnbench.config.launchers)
    new_dir: bool = True  # a single run's directory did not exist: a run refused later removes it again
    # a single run's existing directory, locked (lnbench.runs.RunLock) before Hydra writes there
    lock: Any = None
    ckpt: Any = None  # its checkpoint, read and checked against the config (None: it has none)
    done: str | None = None  # it already completed: what to say instead of running

    @property
    def isolated(self) -> bool:
        """The launcher runs each job in a process of its own (submitit); the others run many in one."""
        return self.kind.isolated

    @property
    def local(self) -> bool:
        """A stop signal stops the whole sweep (lnbench.launch.sweep.stop); a SLURM job's SIGTERM is SLURM's
        business."""
        return not self.kind.remote


def preflight(
    args: list[str], conf_dir: str, sweep_values: bool = False, users: list[str] | None = None
) -> Plan | None:
    """The Plan of `lnbench train <args>`, or None for Hydra's own flags (--help, --cfg, ...). With sweep_values,
    a sweep's composed jobs are validated too, values included (lnbench check: a bad value is refused before
    any job; `lnbench train -m` lets such a job fail alone, the others run). `users`: the overrides that are the
    user's among `args`; a job refused also without them is the preset's own (batch_size_sweep's BN at batch 1,
    refused by design), left to fail alone, as under `lnbench train -m`."""

    parsed = hydra_args.parse(args)
    user_folder.check(list(parsed.overrides))  # your own defaults: their folder, file, YAML and keys
    if not hydra_args.is_a_run(parsed):
        return None
    overrides, multirun = list(parsed.overrides), bool(parsed.multirun)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3", job_name="train"):
        loader = GlobalHydra.instance().config_loader()
        with composing(overrides):
            master = loader.load_configuration(
                "train", overrides, run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN
            )
            HydraConfig.instance().set_config(master)  # for ${hydra:...} in the directory's name
            given = OmegaConf.select(master, key)
            if given is None or not str(given).strip():  # `hydra.run.dir=`: the run would land in this folder
                raise ConfigError(
                    f"{key}={given or ''} is not allowed: it is empty. Give a directory ({key}=outputs/mine), or "
                    f"leave {key} out for a new one under {'outputs/multirun' if multirun else 'outputs/runs'}."
                )
            out_dir = Path(str(given))  # ${now:...} resolves once, here
            check_typed(overrides, master)
            check_claims(master)
        check_output_dir(out_dir, key)
        plan = Plan(
            [*args, f"{key}={hydra_args.hydra_value(str(out_dir))}"],
            multirun,
            out_dir,
            launcher_kind(master),
            not out_dir.exists(),
        )
        if multirun:
            validate_sweep(master)
            jobs = sweep_jobs(master)
            devices = set() if jobs else {str(master.device)}
            for job in jobs:
                with composing(job, sweep=True):
                    job_cfg = without_hydra(loader.load_sweep_config(master, job))
                    check_keys(job_cfg)
                    devices.add(str(job_cfg.device))
                    if sweep_values:
                        user_modules.load(job_cfg.imports)
                        try:
                            validate(job_cfg)
                        except ConfigError:
                            if users is None or not refused_anyway(loader, overrides, job, users):
                                raise
            check_machine(devices, plan, str(master.hydra.runtime.choices.get("hydra/launcher")))
            return plan
    cfg = without_hydra(master)
    user_modules.load(cfg.imports)  # before validation: a user's normalizer is a kind model.norm.kind may name
    with composing(overrides):  # an interpolation resolves only now (${oc.env:...})
        validate(cfg)
    build_check(cfg)
    if not plan.new_dir:
        claim(plan, cfg)
    return plan


def check_machine(devices: set[str], plan: Plan, launcher: str) -> None:
    """This machine has what a sweep's jobs need, refused before any job starts whichever launcher runs them: each
    device they train on, as a single run's is (build_check), and SLURM for a SLURM launcher (submitit would raise
    only once Hydra began). A SLURM job's device is its node's, which the machine that submits it cannot see."""
    if plan.kind.remote:  # SLURM (slurm, submitit_slurm)
        if shutil.which("srun") is None:  # submitit's own test
            raise ConfigError(
                f"hydra/launcher={launcher} is not allowed here: this machine is no SLURM cluster's (no srun on "
                "PATH). Submit from the cluster's login node, or run on this machine with hydra/launcher=basic, "
                "joblib, submitit_local or packed."
            )
        return
    if devices <= {"auto", "cpu"}:
        return
    from lnbench.training.device import resolve_device  # noqa: PLC0415 (torch: only for a device to look for)

    for name in sorted(devices):
        check_device_name(name)
        resolve_device(name)


def check_claims(cfg) -> None:
    """Each claim a run declares is one lnbench.claims can judge (the report reads them after all the work); an
    experiment preset declares them (docs/verdicts.md), and `claims=[foo]` on a command line is refused here."""
    for i, raw in enumerate(OmegaConf.to_container(cfg.claims, resolve=True)):
        try:
            parse_claim(raw)
        except (ClaimError, TypeError) as e:
            raise ConfigError(
                f"claims[{i}]={raw} is not allowed: {e} A claim is declared in an experiment preset "
                "(docs/verdicts.md; conf/experiment/*.yaml)."
            ) from None


def refused_anyway(loader, overrides: list[str], job: list[str], users: list[str]) -> bool:
    """Whether the sweep `job` is refused also without the user's overrides: the preset's own refusal."""
    keys = {u.split("=", 1)[0].lstrip("+~") for u in users}
    base = [o for o in overrides if o not in users]
    try:
        master = loader.load_configuration("train", base, run_mode=RunMode.MULTIRUN)
        validate(without_hydra(loader.load_sweep_config(master, [o for o in job if o.split("=")[0] not in keys])))
    except ConfigError:
        return True
    except Exception:  # noqa: BLE001 - it does not compose without them: the user's error is the one to say
        return False
    return False


def launcher_kind(master) -> LauncherKind:
    """The kind of the launcher that runs the jobs (lnbench.config.launchers), its warning said where it has one."""
    kind = launchers.of_config(OmegaConf.select(master, "hydra.launcher", default=None))
    if kind.said:
        logging.getLogger("lnbench").warning(kind.said)
    return kind


def claim(plan: Plan, cfg) -> None:
    """An existing run directory: locked, its checkpoint read and checked against `cfg` (a resume continues
    the run exactly as it began); a run that already completed is left untouched."""

    from lnbench.training import checkpoint  # noqa: PLC0415 (torch: an existing run only)

    plan.lock = RunLock(plan.out_dir)  # refused while another process holds it
    try:
        plan.ckpt = checkpoint.load(plan.out_dir, OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
        if plan.ckpt is not None and checkpoint.completed_summary(plan.out_dir, plan.ckpt, cfg.steps):
            plan.done = f"{plan.out_dir} already completed its {cfg.steps} steps: nothing to do."
    except BaseException:
        plan.lock.release()  # refused: no lock file left behind
        raise
    if plan.done:
        plan.lock.release()


def check_output_dir(folder: Path, key: str) -> None:
    """The directory, or the nearest folder above it that exists, can be written into; nothing is created."""
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, f"{existing} is a file")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise ConfigError(
            f"{key}={folder} is not allowed: the output directory cannot be written ({e.strerror or e}). "
            f"Choose a writable one with {key}=<dir>, or start lnbench from a writable folder."
        ) from None
    disk = os.statvfs(existing)
    if disk.f_bavail * disk.f_frsize < MIN_FREE_BYTES:  # the machine's state (lnbench.launch.failures), not the input
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(existing))


def without_hydra(config):
    """The job's config as the task function gets it (typed by its schema, unlike OmegaConf.masked_copy)."""

    cfg = copy.deepcopy(config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def sweep_jobs(master) -> list[list[str]]:
    """The overrides of the jobs to compose before the sweep starts: every job of a basic sweep of up to
    ALL_JOBS_UP_TO; of a bigger one each value of each axis once, with the first value of the others (a
    composition costs ~0.1 s; this finds every typo, at the price of two values that only clash together).
    Other sweepers: none."""

    if not str(OmegaConf.select(master, "hydra.sweeper._target_", default="")).endswith(".BasicSweeper"):
        return []
    params = OmegaConf.select(master, "hydra.sweeper.params", default=None) or {}
    sweep = Sweep({str(k): str(v) for k, v in params.items()}, tuple(master.hydra.overrides.task))
    axes = list(sweep.axes().values())
    if math.prod(len(values) for values in axes) <= ALL_JOBS_UP_TO:
        return [list(job) for job in itertools.product(*axes)]
    first = [values[0] for values in axes]
    return [first[:i] + [v] + first[i + 1 :] for i, values in enumerate(axes) for v in values]


def build_check(cfg) -> None:
    """Builds the dataset, model and optimizer of a run as training would, on the CPU, and drops them; the
    training batch is measured on 2 cases, never built whole, and refused where it would not fit.

    Only bad input is refused here (a UserError). Any other exception is a bug: the run meets it again
    where lnbench.launch.entry reports it, with its traceback kept in the run's crash.log."""
    import torch  # noqa: PLC0415 (torch: after the cheap checks)

    from lnbench.training import recipe  # noqa: PLC0415 (torch: as above)

    device = recipe.resolve_device(str(cfg.device))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(cfg.seed)
        dataset = recipe.setup_data(cfg.dataset)
        for n in cfg.test_seq_lens:  # tested at the end of the run: refused now, not after the training
            recipe.setup_data(cfg.dataset, eval_seq_len=n)
        few = dataset.few_cases(2)
        model = recipe.setup_model(cfg.model, dataset.spec, first_batch=few[0])
        recipe.setup_optimizer(cfg.optim, cfg.schedule, model, torch.device("cpu"))
        check_batch_fits(model, dataset, few, device)
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - a bug, reported by the run itself (see the doc)
        pass
    finally:
        torch.random.set_rng_state(state)


def check_batch_fits(model, dataset, few, device=None) -> None:
    """The training batch: its cases and the activations autograd keeps for their backward, measured on the
    cases `few` (a forward of the model in training mode) and scaled to dataset.batch_size."""
    import torch  # noqa: PLC0415 (torch: after the cheap checks)

    from lnbench.data.memory import check_fits  # noqa: PLC0415 (torch: as above)
    from lnbench.training import tasks  # noqa: PLC0415 (torch: as above)

    x, y = few
    if hasattr(model, "kept_bytes_per_glimpse"):  # DRAW: a forward of too many glimpses would take long to say so
        check_fits(
            "model.glimpses",
            model.glimpses,
            dataset.batch_size * model.kept_bytes_per_glimpse(),
            f"a training batch of {dataset.batch_size} cases keeping each glimpse's canvas for the backward",
            device,
        )
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        try:
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                kept[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor without storage: its elements
            kept[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tasks.loss_and_metrics(dataset.spec, model(x), y)
    each = (sum(kept.values()) + x.nbytes + y.nbytes) / len(x)
    check_fits(
        "dataset.batch_size",
        dataset.batch_size,
        each,
        "a training batch of this model (its cases and the activations kept for the backward)",
        device,
    )


def resume_overrides(args: list[str]) -> list[str]:
    """`resume=DIR`: the overrides DIR's run was started with, then these (which may not differ from them:
    lnbench.training.checkpoint compares the composed config with the checkpoint's).

    `resume=` itself is not passed on, and Hydra does not write DIR/.hydra/ again: the run keeps the
    overrides it was started with (the report's swept keys, the W&B name), whatever the resume does."""
    given = [a for a in args if a.startswith("resume=")]
    if not given:
        return args
    run_dir = Path(given[-1].split("=", 1)[1]).expanduser()
    if any(a in ("-m", "--multirun") for a in args):
        raise ConfigError(
            f"resume={run_dir} continues one run and cannot be swept (-m). To resume a sweep, run the same "
            f"sweep command again with hydra.sweep.dir=<its directory>: each job continues from its checkpoint."
        )
    saved = run_dir / OVERRIDES
    if not saved.is_file():
        why = "does not exist" if not run_dir.exists() else f"holds no {OVERRIDES}"
        raise ConfigError(
            f"resume={run_dir} is not allowed: it {why}. resume takes the directory of an earlier run "
            f"(outputs/runs/<date>/<time>, or a sweep's <dir>/<job number>)."
        )

    before = [str(o) for o in OmegaConf.load(saved) if not str(o).startswith(("resume=", "hydra.run.dir="))]
    after = [a for a in args if not a.startswith("resume=")]
    return [*before, *after, f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]  # continue in its own directory
