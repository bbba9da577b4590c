"""A user's own normalizer, in a module outside the package, trains wherever lnbench runs a job: the CLI
and every launcher's processes import the modules the `imports` key names (issue 24: under joblib every
job used to fail after the config check had passed)."""

import textwrap

import pytest
from conftest import TINY_CLI, run_cli, summary_of

MYNORM = textwrap.dedent('''
    """A user's normalizer: mean-only layer norm, registered as model.norm.kind=center."""
    import torch
    from torch import nn

    from lnbench.nn.normalizers import Normalizer, register


    class CenterNorm(nn.Module):
        def __init__(self, width, gain_init, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.full((width,), gain_init))
            self.bias = nn.Parameter(torch.zeros(width)) if bias else None

        def forward(self, a):
            y = (a - a.mean(-1, keepdim=True)) * self.weight
            return y + self.bias if self.bias is not None else y


    class Center(Normalizer):
        name, linear_bias, norm_bias, batch_stats, activations = "center", False, True, False, True

        def module(self, cfg, num_features, *, bias=True, time_steps=0):
            return CenterNorm(num_features, cfg.gain_init, bias)


    register(Center())
''')
RUN = [*TINY_CLI, "steps=2", "eval_every=2", "imports=[mynorm]", "model.norm.kind=center"]


@pytest.fixture
def user_dir(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "mynorm.py").write_text(MYNORM)
    return folder


def test_a_users_normalizer_trains_in_a_joblib_sweep(user_dir, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli(
        "train",
        "-m",
        *RUN,
        "seed=0,1",
        "hydra/launcher=joblib",
        f"hydra.sweep.dir={sweep}",
        env={"PYTHONPATH": str(user_dir)},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    for job in ("0", "1"):
        summary = summary_of(sweep / job)
        assert summary["status"] == "completed", summary
        assert "kind: center" in (sweep / job / ".hydra" / "config.yaml").read_text()


def test_a_users_normalizer_trains_in_a_single_run_started_from_its_folder(user_dir, tmp_path):
    # No PYTHONPATH: the folder lnbench is started from is searched too, as `python -c 'import mynorm'` would
    r = run_cli("train", *RUN, f"hydra.run.dir={tmp_path / 'run'}", cwd=user_dir)
    assert r.returncode == 0, r.stderr
    assert summary_of(tmp_path / "run")["status"] == "completed"


def test_without_the_import_the_kind_is_refused_and_a_missing_module_too(tmp_path, user_dir):
    r = run_cli(
        "train", *[o for o in RUN if not o.startswith("imports=")], f"hydra.run.dir={tmp_path / 'a'}", cwd=user_dir
    )
    assert r.returncode == 2 and "model.norm.kind=center is not allowed" in r.stderr
    r = run_cli("train", *RUN, "imports=[mynorm_typo]", f"hydra.run.dir={tmp_path / 'b'}", cwd=user_dir)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "imports=['mynorm_typo'] is not allowed: there is no module 'mynorm_typo'" in r.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
