"""A launcher's kind is one record it declares (lnbench.config.launchers): preflight, the thread decision, lnbench
check's runner and the error hints all read it, so that a new launcher of lnbench's own touches 3 files: its plugin
module (the class, `lnbench_kind` on it), conf/hydra/launcher/<name>.yaml and the module that does its work."""

import sys
import types

import pytest
from omegaconf import OmegaConf

from lnbench.check import cli as check
from lnbench.config import launchers
from lnbench.config.launchers import FORKED, PROCESS_PER_JOB, LauncherKind
from lnbench.launch.preflight import Plan, launcher_kind
from lnbench.launch.process.pool import THREAD_VARS, joblib_env
from lnbench.launch.process.threads import parallel_job_threads

STAND_IN = LauncherKind(PROCESS_PER_JOB, slots="workers", default_slots=5, cores="cpus", extra="standin")


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """A launcher of our own, as a new one would come: a class that declares its kind, and its YAML."""
    module = types.ModuleType("standin_launcher")

    class StandIn:
        lnbench_kind = STAND_IN

    class DerivedFromIt(StandIn):  # a launcher that derives from it keeps its kind
        pass

    module.StandIn, module.DerivedFromIt = StandIn, DerivedFromIt
    monkeypatch.setitem(sys.modules, "standin_launcher", module)
    (tmp_path / "hydra" / "launcher").mkdir(parents=True)
    (tmp_path / "hydra" / "launcher" / "standin.yaml").write_text("_target_: standin_launcher.StandIn\nworkers: 5\n")
    monkeypatch.setattr(launchers, "CONF_DIR", tmp_path)
    return "standin_launcher.StandIn"


def test_a_new_launcher_is_read_everywhere_from_the_kind_it_declares(stand_in, tmp_path):
    composed = OmegaConf.create({"hydra": {"launcher": {"_target_": stand_in, "workers": 3, "cpus": 2}}})
    kind = launcher_kind(composed)  # preflight
    assert kind is STAND_IN and launchers.kind_of("standin_launcher.DerivedFromIt") is STAND_IN
    plan = Plan([], True, tmp_path, kind)
    assert plan.isolated and plan.local  # a process per job, on this machine: lnbench forks none, a stop is ours
    assert parallel_job_threads(composed.hydra) == 2  # the thread decision: the cores it gives each job
    assert launchers.named("standin") is STAND_IN  # lnbench check's runner and its slots
    runner, workers = check.make_runner(check.Args(["fig6_mnist"], out=tmp_path, overrides=["hydra/launcher=standin"]))
    assert (type(runner).__name__, workers) == ("SubprocessRunner", 5)  # its default slots: no warm pool


def test_a_launcher_that_declares_nothing_runs_as_hydra_calls_it():
    assert launchers.kind_of("no_such_module.Launcher") == launchers.UNKNOWN
    assert launchers.of_config(None) is launchers.BASIC
    assert not launchers.UNKNOWN.isolated and launchers.UNKNOWN.job_slots({}) == 1


def test_one_share_of_the_cores_under_a_quota(monkeypatch):
    """joblib's workers and the thread decision divide the same count (affinity and CPU quota) by the same slots:
    a job under joblib gets the threads its worker's environment says, also where a quota leaves 3 of 8 cores."""
    monkeypatch.setattr(launchers, "shareable_cores", lambda: 3)
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    for n_jobs in (-1, 1, 2, 3, 4):
        hc = OmegaConf.create({"launcher": {"_target_": launchers.HYDRA["joblib"][0], "n_jobs": n_jobs}})
        workers = launchers.JOBLIB.job_slots({"n_jobs": n_jobs})
        assert int(joblib_env(workers)["OMP_NUM_THREADS"]) == parallel_job_threads(hc) == max(3 // workers, 1)
    assert launchers.JOBLIB.runs == FORKED and launchers.JOBLIB.job_slots({}) == 3  # n_jobs=-1: one per core
