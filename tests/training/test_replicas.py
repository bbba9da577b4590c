"""Packed replicas (lnbench.training.replicas): K runs trained as one pack write K ordinary run directories whose
numbers are their solo runs' within rounding, stop alone when they diverge, and resume.

What is bit for bit a solo run's: a replica's initial weights, its optimizer state and generator states at step 0
(its step-0 checkpoint), its data order, and its optimizer's arithmetic given the same gradients (the solo run's
own fused Adam on the replica's own tensors). What is not: the forward and backward, which vmap batches over the
replicas (a batched matmul, LayerNorm's affine as separate ops) and the reference loop runs instead of the C++
kernels; those round differently in the last bit, and a few steps later the metrics differ by ~1e-7 relative
(measured: at most 5e-7 over these runs; TOL allows 20x that). BN's running means differ more: its gradient with
respect to a weight of a constant input (MNIST's border pixels) is zero up to rounding, which Adam scales to
whole steps, in the solo run as in the pack, from different rounding.
"""

import math

import pytest
import torch
from conftest import after_log, metrics_without_time, summary_of, tiny

from lnbench.errors import ConfigError, Diverged
from lnbench.training import checkpoint
from lnbench.training.pack import NotPackable, Pack, check_packable, pack_key
from lnbench.training.recipe import train
from lnbench.training.replicas import KERNELS, PackJob, Replica, train_pack

TOL = 1e-5  # relative, on every logged float; see the module doc
# summary fields a packed run's may differ in from its solo run's: times, its metrics (within TOL, compared in
# metrics.jsonl), its provenance (its kernels), and `packed` itself
DIFFER = {"wall_time", "time_per_step", "eval_time", "checkpoint_time", "test", "final_val", "best_val"}
DIFFER |= {"provenance", "packed"}
SHORT = ["steps=6", "log_every=2", "eval_every=3", "logger=none", "device=cpu", "threads=1"]


def cfgs(*settings, extra=()):
    return [tiny("ln_lstm", "adding", *SHORT, *extra, *s) for s in settings]


def assert_close_records(packed, solo):
    assert [(r["split"], r["step"], sorted(r)) for r in packed] == [(r["split"], r["step"], sorted(r)) for r in solo]
    for a, b in zip(packed, solo):
        for k, v in a.items():
            if isinstance(v, float):
                assert math.isclose(v, b[k], rel_tol=TOL, abs_tol=1e-7), (a["split"], a["step"], k, v, b[k])
            else:
                assert v == b[k], (k, v, b[k])


def same(a, b) -> bool:
    """Equal bit for bit, tensors within nested dicts and lists included."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture
def step0(monkeypatch):
    """The first checkpoint each run directory wrote (its step-0 state)."""
    first, save = {}, checkpoint.save

    def keep(run_dir, state):
        save(run_dir, state)
        first.setdefault(str(run_dir), torch.load(run_dir / checkpoint.FILE, weights_only=True))

    monkeypatch.setattr(checkpoint, "save", keep)
    return first


def test_a_pack_of_three_writes_three_runs_equal_to_their_solo_runs(tmp_path, step0):
    # each replica its own seed (its init and data order), learning rate and clipping
    configs = cfgs(["seed=0", "optim.lr=1e-3"], ["seed=1", "optim.lr=3e-3"], ["seed=2", "clip_grad_norm=0.05"])
    outcomes = train_pack([PackJob(c, tmp_path / f"p{i}") for i, c in enumerate(configs)])
    for i, c in enumerate(configs):
        train(c, tmp_path / f"s{i}")
    for i, (kind, summary) in enumerate(outcomes):
        assert kind == "returned" and summary["status"] == "completed" and summary["packed"] == 3
        packed, solo = tmp_path / f"p{i}", tmp_path / f"s{i}"
        assert {p.name for p in solo.iterdir()} <= {p.name for p in packed.iterdir()}
        assert (packed / "config.yaml").read_text() == (solo / "config.yaml").read_text()
        assert_close_records(metrics_without_time(packed), metrics_without_time(solo))
        a, b = step0[str(packed)], step0[str(solo)]
        assert a.keys() == b.keys()
        for key in ("model", "optimizer", "scheduler", "rng", "config", "step"):  # bit for bit at step 0
            assert same(a[key], b[key]), key
        assert a["kernels"] == KERNELS and summary_of(packed)["provenance"]["kernels"] == KERNELS
        # the recipes' alignment: every field a solo run records (summary, provenance, checkpoint), a packed one too
        alone, in_pack = summary_of(solo), summary_of(packed)
        assert set(alone) | {"packed"} == set(in_pack) and set(alone["provenance"]) == set(in_pack["provenance"])
        assert {k: in_pack[k] for k in set(in_pack) - DIFFER} == {k: alone[k] for k in set(alone) - DIFFER}
    # the clipped replica was clipped: its logged norms are before clipping, its steps far smaller than unclipped
    assert max(r["grad_norm"] for r in metrics_without_time(tmp_path / "p2") if r["split"] == "train") > 0.05


def test_a_diverging_replica_stops_alone_and_the_others_go_on(tmp_path):
    sgd = ["optim=sgd", "steps=20", "log_every=5", "eval_every=10"]
    configs = cfgs(["seed=0", "optim.lr=0.01"], ["seed=1", "optim.lr=1e12"], ["seed=2", "optim.lr=0.01"], extra=sgd)
    outcomes = train_pack([PackJob(c, tmp_path / f"p{i}") for i, c in enumerate(configs)])
    kind, error = outcomes[1]
    assert kind == "raised" and isinstance(error, Diverged)
    s = summary_of(tmp_path / "p1")
    assert s["status"] == "diverged" and s["diverged_at_step"] == error.step and "test" not in s
    for i in (0, 2):  # the pack went on without it, each replica as its solo run
        assert outcomes[i][0] == "returned" and outcomes[i][1]["status"] == "completed"
        train(configs[i], tmp_path / f"s{i}")
        assert_close_records(metrics_without_time(tmp_path / f"p{i}"), metrics_without_time(tmp_path / f"s{i}"))


class HardStop(Exception):
    """Stands in for SIGKILL: the pack dies between two checkpoints."""


def test_a_packed_run_resumes_where_it_stopped(tmp_path, monkeypatch):
    resumable = ["steps=10", "log_every=2", "eval_every=4", "checkpoint_every=3"]
    configs = cfgs(["seed=0"], ["seed=1", "optim.lr=3e-3"], extra=resumable)

    def pack(name):
        return [PackJob(c, tmp_path / name / str(i)) for i, c in enumerate(configs)]

    train_pack(pack("whole"))

    def stop():
        raise HardStop

    def cut(name):
        with monkeypatch.context() as m:
            after_log(m, lambda split, step, extra: split == "train" and step == 8, stop)
            return train_pack(pack(name))

    assert all(kind == "raised" and isinstance(e, HardStop) for kind, e in cut("cut"))
    assert summary_of(tmp_path / "cut" / "0")["status"] == "failed"
    resumed = train_pack(pack("cut"))  # the same pack again, from the checkpoints of step 6: bit for bit
    assert [o[1]["status"] for o in resumed] == ["completed", "completed"]
    for i in (0, 1):
        assert summary_of(tmp_path / "cut" / str(i))["resumed_at"] == [6]
        assert metrics_without_time(tmp_path / "cut" / str(i)) == metrics_without_time(tmp_path / "whole" / str(i))
    # killed between two replicas' checkpoints of step 9: replica 0 goes on from step 9, replica 1 from step 6, each
    # in a pack of its own (a pack of another size rounds differently in the last bit: batched kernels block by K)
    save = Replica.save_checkpoint

    def save_but_die_at_9(self):
        if self.step == 9 and self.run_dir.name == "1":
            raise HardStop
        save(self)

    with monkeypatch.context() as m:
        m.setattr(Replica, "save_checkpoint", save_but_die_at_9)
        train_pack(pack("mixed"))
    assert [o[1]["status"] for o in train_pack(pack("mixed"))] == ["completed", "completed"]
    assert [summary_of(tmp_path / "mixed" / str(i))["resumed_at"] for i in (0, 1)] == [[9], [6]]
    for i in (0, 1):
        assert_close_records(
            metrics_without_time(tmp_path / "mixed" / str(i)), metrics_without_time(tmp_path / "whole" / str(i))
        )
    # a packed run's checkpoint is an ordinary one: a solo run continues it (its forward rounds differently)
    cut("solo")
    train(configs[0], tmp_path / "solo" / "0")
    assert summary_of(tmp_path / "solo" / "0")["resumed_at"] == [6]
    assert_close_records(metrics_without_time(tmp_path / "solo" / "0"), metrics_without_time(tmp_path / "whole" / "0"))
    # a completed pack is not trained again
    again = train_pack(pack("whole"))
    assert [o[1]["steps"] for o in again] == [10, 10]


def test_one_optimizer_for_a_pack_of_seeds_computes_what_each_replicas_own_would(tmp_path, monkeypatch):
    import lnbench.training.pack as pack_module
    import lnbench.training.replicas as replicas_module

    shared = []
    make = pack_module.shared_optimizer
    monkeypatch.setattr(replicas_module, "shared_optimizer", lambda opts: shared.append(make(opts)) or shared[-1])
    configs = cfgs(["seed=0"], ["seed=1"], extra=["optim.weight_decay=0.01"])  # one Adam for both
    train_pack([PackJob(c, tmp_path / "one" / str(i)) for i, c in enumerate(configs)])
    assert isinstance(shared[-1], torch.optim.Adam)
    monkeypatch.setattr(pack_module, "PER_PARAMETER", ())  # each replica's own Adam
    train_pack([PackJob(c, tmp_path / "own" / str(i)) for i, c in enumerate(configs)])
    assert shared[-1] is None
    for i in (0, 1):
        assert metrics_without_time(tmp_path / "one" / str(i)) == metrics_without_time(tmp_path / "own" / str(i))
        one, own = (torch.load(tmp_path / d / str(i) / checkpoint.FILE, weights_only=True) for d in ("one", "own"))
        assert same(one["optimizer"], own["optimizer"]) and same(one["model"], own["model"])


def test_only_runs_that_differ_in_seed_and_optimizer_scalars_pack(tmp_path):
    from omegaconf import OmegaConf

    def resolved(*overrides):
        return OmegaConf.to_container(tiny("ln_lstm", "adding", *overrides), resolve=True)

    base = resolved("seed=0")
    assert pack_key(base) == pack_key(resolved("seed=3", "optim.lr=0.1", "optim.weight_decay=0.01"))
    assert pack_key(base) == pack_key(resolved("clip_grad_norm=1.0", "logger=none", "checkpoint_every=7"))
    assert pack_key(base) != pack_key(resolved("optim=sgd"))  # another optimizer
    assert pack_key(base) != pack_key(resolved("model.hidden_size=32"))
    with pytest.raises(ConfigError, match="model.hidden_size"):
        check_packable([base, resolved("model.hidden_size=32")], [tmp_path / "a", tmp_path / "b"])


class Noisy(torch.nn.Module):
    """A model that draws random numbers in its forward (as dropout or DRAW's sampling does)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.linear(x + torch.rand_like(x)).squeeze(-1)


def test_a_model_that_draws_random_numbers_is_not_packed():
    from lnbench.data.base import DataSpec

    spec = DataSpec("flat", "regress", 1, input_size=3)
    pack = Pack([Noisy(), Noisy()], spec, torch.device("cpu"))
    batches = [(torch.ones(2, 3), torch.zeros(2))] * 2
    with pytest.raises(NotPackable, match="Noisy cannot run under vmap"):
        pack.probe(batches)
    plain = Pack([torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0)) for _ in range(2)], spec, "cpu")
    plain.probe(batches)  # the same in torch ops without randomness packs
