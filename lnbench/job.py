"""One Hydra job of `lnbench train`: the checks before Hydra runs (`preflight`: every override composes,
every key is in its schema, a single run builds), the checks Hydra runs as a callback before it writes
into a run or sweep directory (`RunChecks`), the task function Hydra calls, and its failure handling.

A user error becomes one paragraph and exit 2 with nothing written, a divergence exit 1; in a sweep a
job's failure is a one-line error Hydra records before it goes on with the other jobs, and under the
basic and joblib launchers each job runs in a forked process so that a segfault or an OOM kill ends
only that job. Each job's status is in its own summary.json.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("lnbench")


def resume_overrides(args: list[str]) -> list[str]:
    """`resume=DIR`: the overrides DIR's run was started with, then these (which may not differ from them:
    lnbench.checkpoint compares the composed config with the checkpoint's).

    `resume=` itself is not passed on, and Hydra does not write DIR/.hydra/ again: the run keeps the
    overrides it was started with (the report's swept keys, the W&B name), whatever the resume does."""
    from lnbench.errors import ConfigError

    given = [a for a in args if a.startswith("resume=")]
    if not given:
        return args
    run_dir = Path(given[-1].split("=", 1)[1]).expanduser()
    if any(a in ("-m", "--multirun") for a in args):
        raise ConfigError(
            f"resume={run_dir} continues one run and cannot be swept (-m). To resume a sweep, run the same "
            f"sweep command again with hydra.sweep.dir=<its directory>: each job continues from its checkpoint."
        )
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        why = "does not exist" if not run_dir.exists() else "holds no .hydra/overrides.yaml"
        raise ConfigError(
            f"resume={run_dir} is not allowed: it {why}. resume takes the directory of an earlier run "
            f"(outputs/runs/<date>/<time>, or a sweep's <dir>/<job number>)."
        )
    from omegaconf import OmegaConf

    before = [str(o) for o in OmegaConf.load(saved) if not str(o).startswith(("resume=", "hydra.run.dir="))]
    after = [a for a in args if not a.startswith("resume=")]
    return [*before, *after, f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]  # continue in its own directory


def task(cfg) -> dict:
    """One Hydra job. User errors become one paragraph and a non-zero exit, never a traceback.

    In a sweep a failed job (bad input, divergence, a crash of its process) raises a one-line error Hydra
    records, then it runs the other jobs; each job's status is in its own summary.json.
    """
    import time

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from lnbench import checkpoint, threads
    from lnbench.errors import Diverged, Interrupted, UserError
    from lnbench.track import job_name, run_tags, sweep_group
    from lnbench.train import UNREAD, train

    started = time.time()
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    overrides = list(hc.overrides.task)
    group = sweep_group(hc) if multirun else None
    tags = run_tags(dict(hc.runtime.choices), cfg)
    cfg.threads = threads.apply(cfg.threads, hc)[0]  # the cores the job may use, never the load; logged
    if multirun and _main_thread():
        import signal

        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # inherited from a submitit_local sweep (RunChecks)
            signal.signal(signal.SIGINT, signal.default_int_handler)
    run_dir.mkdir(parents=True, exist_ok=True)
    # RunChecks has locked a single run's existing directory and read its checkpoint (before Hydra wrote there)
    early_lock, ckpt = EARLY_RUNS.pop(str(run_dir.resolve()), (None, UNREAD))
    try:
        # The lock before anything is written: a process refused here leaves the directory (its summary,
        # and the crash.log of the process that holds it) as they were.
        lock = early_lock or checkpoint.RunLock(run_dir)
    except UserError as e:
        if full_error():
            raise
        if multirun:
            raise job_failed(f"lnbench: job {hc.job.num} ({' '.join(overrides)}) not run: {e}") from None
        sys.exit(user_error(e))
    try:
        with lock:
            warm_up()  # inside the try: a Ctrl-C during its imports (~1 s) is an interrupted job, not a traceback
            # A segfault or an OOM kill bypasses every except clause: leave the native traceback in the
            # job's own directory, where the report looks for it.
            with crash_log(run_dir):
                if multirun and not launcher_isolates_jobs(hc):
                    return in_child_process(run_dir, train, cfg, run_dir, name=job_name(hc), group=group, tags=tags)
                return train(cfg, run_dir, name=job_name(hc), group=group, tags=tags, ckpt=ckpt)
    except Diverged as e:  # summary.json already says diverged
        if full_error():
            raise
        if multirun:
            log.error("job %s diverged: %s", hc.job.num, e)
            raise job_failed(f"lnbench: job {hc.job.num} ({' '.join(overrides)}) diverged: {e}") from None
        print(f"lnbench: {e}", file=sys.stderr)
        sys.exit(1)
    except (Interrupted, KeyboardInterrupt) as e:
        if multirun and launcher_isolates_jobs(hc) and not full_error():
            # submitit: a job that raises gives the waiting sweep process a traceback, not a result. The
            # job's summary says interrupted; that process reports the sweep (lnbench.cli) once all end.
            log.warning("job %s: %s", hc.job.num, e)
            return {"status": "interrupted"}
        raise
    except BaseException as e:
        if not multirun and isinstance(e, UserError) and str(run_dir.resolve()) in NEW_RUN_DIRS:
            import shutil  # bad input found only now: the run directory this process made goes again

            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            record_failure(run_dir, e, started)
        if not isinstance(e, (UserError, JobCrashed)) or full_error():
            raise  # a bug: Hydra prints it (in a sweep it records the failure and runs the other jobs)
        if multirun:
            log.error("job %s failed: %s", hc.job.num, e)
            raise job_failed(f"lnbench: job {hc.job.num} ({' '.join(overrides)}) failed: {e}") from None
        sys.exit(user_error(e))


@contextmanager
def crash_log(run_dir: Path):
    """faulthandler writes a native traceback to <run dir>/crash.log on a segfault; an empty one is removed
    at the end (also one an attempt killed before its clean-up left). Called under the run's lock, so the
    file is never another process's."""
    path = run_dir / "crash.log"
    f = open(path, "a")
    faulthandler.enable(f)
    try:
        yield f
    finally:
        faulthandler.disable()
        f.close()
        if path.exists() and path.stat().st_size == 0:
            path.unlink()


def launcher_isolates_jobs(hc) -> bool:
    """Whether the launcher runs each job in a process of its own already (submitit does; basic runs every
    job in the one Hydra process, joblib several jobs in each of its workers)."""
    from omegaconf import OmegaConf

    return "submitit" in str(OmegaConf.select(hc, "launcher._target_", default="")).lower()


class JobCrashed(Exception):
    """A sweep job's process ended without an answer: a signal (segfault, the OOM killer's SIGKILL) or an exit."""


def in_child_process(run_dir: Path, fn, *args, **kwargs):
    """`fn(*args, **kwargs)` in a forked child process: its return value or its exception comes back
    through a pipe; a child killed by a signal (segfault, OOM kill, SIGKILL) becomes JobCrashed, noted
    in crash.log, and the sweep goes on with its next job.

    Hand-written rather than multiprocessing: a fork costs milliseconds (a spawned interpreter would
    import torch again, ~2 s per job), and the parent must answer SIGINT/SIGTERM by passing them on to
    the job (which checkpoints) and waiting for it, not by dying first. The parent has run no torch
    kernels in threads before the fork, so the child's OpenMP pool starts clean.
    """
    import pickle
    import signal

    from lnbench.errors import Interrupted

    warm_up()
    read_end, write_end = os.pipe()
    for h in [*logging.getLogger().handlers, *log.handlers]:  # or the child writes their buffers again
        h.flush()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run the job, send back what it returned or raised, never return into Hydra
        code = 0
        try:
            os.close(read_end)
            os.setpgid(0, 0)  # Ctrl-C reaches it once, from the parent (two would mean "stop at once")
            _die_with_parent()
            try:
                answer = ("returned", fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
                answer = ("raised", e)
            try:
                data = pickle.dumps(answer)
            except Exception:  # an exception that cannot be pickled: its text still goes back
                data = pickle.dumps(("raised", RuntimeError(f"{type(answer[1]).__name__}: {answer[1]}")))
            with os.fdopen(write_end, "wb") as w:
                w.write(data)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            logging.shutdown()
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(code)

    os.close(write_end)
    received: list[int] = []

    def pass_on(signum, frame):  # the job checkpoints and raises Interrupted, which comes back here
        received.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)} if _main_thread() else {}
    try:
        chunks = []
        with os.fdopen(read_end, "rb") as r:
            while chunk := r.read(1 << 16):
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    data = b"".join(chunks)
    if data:
        kind, value = pickle.loads(data)
        if kind == "raised":
            raise value
        return value
    if received:  # the job ended on the signal before it could answer
        raise Interrupted(received[0], -1, run_dir)
    why = (f"its process was killed by {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
           if os.WIFSIGNALED(status) else f"its process exited with code {os.waitstatus_to_exitcode(status)}")
    hint = " (the kernel's OOM killer sends SIGKILL when memory runs out; see `dmesg`)" if "SIGKILL" in why else ""
    with open(run_dir / "crash.log", "a") as f:
        f.write(f"lnbench: {why}{hint} before the job finished.\n")
    raise JobCrashed(f"{why}{hint}: see {run_dir / 'crash.log'}; re-run the sweep to retry it from its last checkpoint")


def warm_up() -> None:
    """Once per process: the imports every job needs, then their objects out of the garbage collector's way.

    torch's first optimizer imports torch._dynamo (~1 s on this machine): done here, a forked job finds it
    loaded. Then gc.freeze() moves the ~2,000 modules' objects to the permanent generation, which the
    collector never walks again: not in a job's full collections, not in the interpreter's exit, whose
    collections alone took 0.85 s with torch and torch._dynamo loaded (0.14 s frozen). A Hydra process
    or joblib worker pays that exit once per sweep, and the sweep waits for it. Frozen once, right
    after the imports, so no job's garbage is kept; a forked job inherits the frozen generation.
    """
    global _warmed_up
    if _warmed_up:
        return
    import gc

    import torch

    from lnbench.heap import keep_freed_memory

    keep_freed_memory()  # a joblib worker did not start through lnbench.cli
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    gc.freeze()
    _warmed_up = True


_warmed_up = False


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    """Linux: SIGTERM to this child if its parent dies (a killed launcher leaves no orphan training)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def user_error(e: BaseException) -> int:
    print(f"lnbench: error: {e}", file=sys.stderr)
    return 2


def _hydra_classes() -> dict[str, type]:
    """Classes built on Hydra's, made on first use so that `lnbench report|bench` does not import Hydra."""
    from hydra.errors import CompactHydraException
    from hydra.experimental.callback import Callback

    class JobFailed(CompactHydraException):
        """A sweep job's user error or divergence: Hydra prints a CompactHydraException as one line, no traceback."""

    class RunChecks(Callback):
        """A Hydra callback (conf/train.yaml), called before Hydra creates the run or sweep directory and
        writes its .hydra/ files there. One clear error, and a run directory left as it was, when that
        directory cannot be written, or when it holds a checkpoint of a run with another config."""

        def on_run_start(self, config, **kwargs) -> None:
            check_output_dir(config.hydra.run.dir, "hydra.run.dir")
            run_dir = Path(config.hydra.run.dir)
            if not run_dir.exists():
                NEW_RUN_DIRS.add(str(run_dir.resolve()))
                return
            with user_errors_exit():  # in use, or holding another run: refused before Hydra writes there
                from lnbench import checkpoint

                lock = checkpoint.RunLock(run_dir)
                try:
                    ckpt = check_resume(config)
                except BaseException:  # refused, or nothing to do: no lock file left behind
                    lock.release()
                    raise
                EARLY_RUNS[str(run_dir.resolve())] = (lock, ckpt)

        def on_multirun_start(self, config, **kwargs) -> None:
            check_output_dir(config.hydra.sweep.dir, "hydra.sweep.dir")
            SWEEP["dir"] = str(config.hydra.sweep.dir)
            if str(config.hydra.launcher._target_).endswith("submitit_launcher.SlurmLauncher"):
                from lnbench.slurm import PLAIN_SUBMITIT_SLURM

                log.warning(PLAIN_SUBMITIT_SLURM)  # Hydra's own SLURM launcher: say what lnbench's adds
            if "submitit" in str(config.hydra.launcher._target_) and "Local" in str(config.hydra.launcher._target_):
                # submitit's local controller processes (one per job, in the terminal's process group)
                # die on Ctrl-C with a traceback and take their job down mid-checkpoint. Ignored here,
                # SIGINT stays ignored in them (inherited); each job installs its own handler, checkpoints
                # and stops, and this process reports the sweep once every job has ended.
                import signal

                signal.signal(signal.SIGINT, signal.SIG_IGN)

    for c in (JobFailed, RunChecks):  # importable (and picklable, for parallel launchers) as lnbench.job.X
        c.__module__, c.__qualname__ = __name__, c.__name__
    return {"JobFailed": JobFailed, "RunChecks": RunChecks}


_HYDRA_CLASSES: dict[str, type] = {}


def __getattr__(name: str):
    if name in ("JobFailed", "RunChecks"):
        if not _HYDRA_CLASSES:
            _HYDRA_CLASSES.update(_hydra_classes())
        return _HYDRA_CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def job_failed(message: str) -> Exception:
    return __getattr__("JobFailed")(message)


@contextmanager
def user_errors_exit():
    """A UserError in the block ends the process with its message (exit 2), or a traceback with HYDRA_FULL_ERROR=1."""
    from lnbench.errors import UserError

    try:
        yield
    except UserError as e:
        if full_error():
            raise
        sys.exit(user_error(e))


# What the checks before a run learned, for the job in this process: run directories this invocation
# is about to create; for an existing run directory, the lock taken before Hydra wrote there and its
# checkpoint, read and checked against the config (None: it has none); the sweep directory.
NEW_RUN_DIRS: set[str] = set()
EARLY_RUNS: dict[str, tuple[object, object]] = {}
SWEEP: dict[str, str] = {}


def check_output_dir(folder: str, key: str) -> None:
    """The directory, or the nearest folder above it that exists, can be written into; nothing is created."""
    import tempfile

    from lnbench.errors import ConfigError

    with user_errors_exit():
        existing = Path(folder).absolute()
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


def check_resume(config):
    """A run directory with a checkpoint continues that run: the composed config must match its config.
    A run that already completed is reported and left untouched (exit 0, before Hydra writes there).
    Returns the checkpoint (None where there is none), so that the run does not read it again."""
    from omegaconf import OmegaConf

    run_dir = Path(config.hydra.run.dir)
    if not (run_dir / "checkpoint.pt").exists():
        return None
    from lnbench import checkpoint

    task_cfg = without_hydra(config)
    ckpt = checkpoint.load(run_dir, OmegaConf.to_container(task_cfg, resolve=True, enum_to_str=True))
    if checkpoint.completed_summary(run_dir, ckpt, task_cfg.steps):
        print(f"lnbench: {run_dir} already completed its {task_cfg.steps} steps: nothing to do.", file=sys.stderr)
        sys.exit(0)
    return ckpt


def record_failure(run_dir: Path, error: BaseException, started: float = 0.0) -> None:
    """A job that failed before its first step still leaves a summary.json saying why (replacing one an
    earlier attempt left, but not the one this attempt's train loop wrote)."""
    from lnbench.atomic import write_json

    import json

    summary = run_dir / "summary.json"
    try:
        running = json.loads(summary.read_text()).get("status") == "running"  # its process died mid-run
    except (OSError, ValueError):
        running = False
    if running or not summary.exists() or summary.stat().st_mtime < started:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_json(summary, {"status": "failed", "error": f"{type(error).__name__}: {error}", "steps": 0})
        except OSError:
            pass  # an unwritable directory: the error itself says so


# ---- before Hydra: every override composes, every key is in its schema ---------------------------
NOT_A_RUN = ("help", "hydra_help", "cfg", "info", "shell_completion", "experimental_rerun", "config_path", "config_name", "config_dir")


def preflight(args: list[str], conf_dir: str) -> None:
    """Checks an invocation before Hydra creates any directory; raises ConfigError (one paragraph naming the
    override as typed and what is allowed) for the first thing it refuses.

    Every job of a sweep must compose and name only keys of its schema (a typo refuses the sweep before
    its first job). A single run is also validated and built (dataset, model, optimizer, on the CPU, then
    discarded), so errors of torch's constructors, Hydra's instantiate and the datasets are caught here.
    The jobs of a sweep are built in their own job, where a refusal is recorded as that job's failure
    (a preset may include a point the paper says cannot run, e.g. BN at batch size 1).
    """
    from hydra import initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from lnbench.config import check_keys, validate

    parsed, _ = get_args_parser().parse_known_args(args)
    if any(getattr(parsed, k, None) for k in NOT_A_RUN):
        return  # help, --cfg, --info ...: Hydra's own business
    overrides = list(parsed.overrides)
    mode = RunMode.MULTIRUN if parsed.multirun else RunMode.RUN
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3", job_name="train"):
        loader = GlobalHydra.instance().config_loader()
        with composing(overrides):
            master = loader.load_configuration("train", overrides, run_mode=mode)
        if mode is RunMode.RUN:
            task_cfg = without_hydra(master)
            validate(task_cfg)
            build_check(task_cfg)
            return
        for job in sweep_jobs(master, overrides):
            with composing(job, sweep=True):
                cfg = loader.load_sweep_config(master, job)
                check_keys(without_hydra(cfg))


def without_hydra(config):
    """The job's config as the task function gets it (typed by its schema, unlike OmegaConf.masked_copy)."""
    import copy

    from omegaconf import open_dict, read_write

    cfg = copy.deepcopy(config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


ALL_JOBS_UP_TO = 24  # sweeps up to this many jobs compose every job before the first starts


def sweep_jobs(master, overrides: list[str]) -> list[list[str]]:
    """The override list of every job, expanded as Hydra's basic sweeper does (other sweepers: none)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if "BasicSweeper" not in str(OmegaConf.select(master, "hydra.sweeper._target_", default="")):
        return []
    params = OmegaConf.select(master, "hydra.sweeper.params", default=None) or {}
    task = [o for o in OmegaConf.to_container(master.hydra.overrides.task)]
    parsed = OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in params.items()), *task])
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    if len(jobs) <= ALL_JOBS_UP_TO:
        return jobs
    # A big sweep: each value of each axis once, with the first value of the others (a composition costs
    # ~0.1 s; this finds every typo, at the price of a combination of two values that only clash together).
    axes = BasicSweeper.split_arguments(parsed, 1)  # one job per batch, in order
    first = axes[0][0]
    values = {i: sorted({job[0][i] for job in axes}) for i in range(len(first))}
    return [first[:i] + [v] + first[i + 1:] for i, vs in values.items() for v in vs]


def build_check(cfg) -> None:
    """Builds the dataset, model and optimizer of a run as training would, on the CPU, and drops them."""
    import torch

    from lnbench.train import resolve_device, setup_data, setup_model, setup_optimizer

    resolve_device(str(cfg.device))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(cfg.seed)
        dataset = setup_data(cfg.dataset)
        model = setup_model(cfg.model, dataset.spec, first_batch=dataset.train_batch(0)[0][:2])
        setup_optimizer(cfg.optim, cfg.schedule, model, torch.device("cpu"))
    finally:
        torch.random.set_rng_state(state)


@contextmanager
def composing(overrides: list[str], sweep: bool = False):
    """Hydra's and OmegaConf's composition errors as one ConfigError naming the override as typed."""
    import dataclasses

    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    from lnbench.errors import ConfigError

    try:
        yield
    except MissingConfigException as e:  # model=ln_lstmm: no such preset
        group, _, name = str(e.missing_cfg_file).rpartition("/")
        typed = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == group), f"{group}={name}")
        options = ", ".join(o for o in e.options or [] if not o.startswith("base_"))
        job = f" (in the sweep job {' '.join(overrides)})" if sweep else ""
        raise ConfigError(f"{typed} is not allowed{job}: there is no {group} preset {name!r}. The {group} presets are {options}.") from None
    except (HydraException, OmegaConfBaseException) as e:
        cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else e
        typed = _typed_override(overrides, str(getattr(cause, "full_key", "") or ""), str(e))
        job = f" (in the sweep job {' '.join(overrides)})" if sweep else ""
        schema = getattr(cause, "object_type", None)
        key = str(getattr(cause, "key", "") or "")
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and dataclasses.is_dataclass(schema):
            keys = ", ".join(sorted(f.name for f in dataclasses.fields(schema) if not f.name.startswith("_")))
            raise ConfigError(
                f"{typed or key} is not allowed{job}: {schema.__name__} has no key {key!r}. Its keys are {keys}."
            ) from None
        said = _one_paragraph(str(e) + ("\n" + str(cause) if cause is not e else ""))
        raise ConfigError(f"{typed + ' is not allowed' + job + ': ' if typed else ''}{said}") from None


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
    import re

    skip = ("full_key:", "object_type=", "reference_type=", "To append to your config use", "Set the environment variable")
    lines = [ln.strip() for ln in text.splitlines()]
    kept = [ln for ln in lines if ln and not ln.startswith(skip)]
    out = " ".join(ln if re.search(r"[.:;!?]$", ln) else ln + "." for ln in kept)
    return re.sub(r"\s+", " ", out).replace(":.", ":")


# ---- a sweep stopped by Ctrl-C or SIGTERM -------------------------------------------------------
def sweep_was_interrupted() -> bool:
    import json

    folder = Path(SWEEP.get("dir", "/nonexistent"))
    for summary in folder.glob("*/summary.json"):
        try:
            if json.loads(summary.read_text()).get("status") == "interrupted":
                return True
        except (OSError, ValueError):
            pass
    return False


def sweep_interrupted(signum: int, args: list[str]) -> str:
    """One paragraph: how many jobs completed, how many stopped with a checkpoint, the command to resume."""
    import json
    import shlex

    folder = Path(SWEEP["dir"])
    completed = interrupted = 0
    for job in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        try:
            status = json.loads((job / "summary.json").read_text()).get("status")
        except (OSError, ValueError):
            status = None
        if status == "completed":
            completed += 1
        elif (job / "checkpoint.pt").exists():
            interrupted += 1
    import signal

    again = [a for a in args if not a.startswith("hydra.sweep.dir=")]
    command = shlex.join(["lnbench", "train", *again, f"hydra.sweep.dir={folder}"])
    return (
        f"{signal.Signals(signum).name} received: the sweep in {folder} stopped with {completed} job(s) completed "
        f"and {interrupted} interrupted with a checkpoint. Resume it with `{command}`: completed jobs are "
        f"skipped, interrupted ones continue from their checkpoints, the others start."
    )
