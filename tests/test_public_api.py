"""The names the README teaches exist where it says, and its "Extending" normalizer example runs as written.

The package was re-laid out by layer (issue 29); users' modules written against the old flat names keep
working through two shims, `lnbench.options` and `lnbench.train`.
"""

from __future__ import annotations

import importlib
import re
import sys

import pytest
import torch

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
# `lnbench.a.b.Name` or `lnbench.a.b.name(...)` in backticks: a module path, then maybe an attribute
DOTTED = sorted(set(re.findall(r"`(lnbench(?:\.[A-Za-z_]\w*)+)", README)))
# the recipe's named steps, which the README lists for scripts and notebooks
RECIPE_STEPS = ("setup_data", "setup_model", "setup_optimizer", "train_step", "evaluate")


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_readme_names_some_public_api():
    assert len(DOTTED) >= 3, DOTTED  # the scan below would pass vacuously on a README that names nothing


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_dotted_name_in_the_readme_resolves(dotted):
    resolve(dotted)


def test_the_recipes_named_steps_are_importable():
    recipe = importlib.import_module("lnbench.training.recipe")
    missing = [s for s in RECIPE_STEPS if not callable(getattr(recipe, s, None))]
    assert not missing and all(f"`{s}`" in README for s in RECIPE_STEPS), missing


def test_old_flat_names_still_work_for_users_modules_and_say_when_they_go(monkeypatch):
    from lnbench.nn.normalizers import register
    from lnbench.training.recipe import train

    for shim in ("lnbench.options", "lnbench.train"):
        monkeypatch.delitem(sys.modules, shim, raising=False)  # imported afresh: the warning comes at import
    with pytest.warns(DeprecationWarning, match=r"lnbench\.options is deprecated .* removed in lnbench 0\.4"):
        from lnbench.options import register as old_register
    with pytest.warns(DeprecationWarning, match=r"lnbench\.train is deprecated .* removed in lnbench 0\.4"):
        from lnbench.train import train as old_train
    assert old_register is register and old_train is train


def readme_block_after(marker: str) -> str:
    """The first ```python block after `marker` in the README."""
    start = README.index(marker)
    return re.search(r"```python\n(.*?)```", README[start:], re.S).group(1)


def test_the_readme_normalizer_example_registers_and_trains(tmp_path, monkeypatch):
    from lnbench.nn.normalizers import NORMALIZERS, NormConfig, normalizer

    code = readme_block_after("**A normalizer.**")
    # The example leaves MyModule to the reader: a plain centering module stands in for it.
    stand_in = (
        "import torch\n"
        "class MyModule(torch.nn.Module):\n"
        "    def __init__(self, n, gain, bias):\n"
        "        super().__init__()\n"
        "        self.g = torch.nn.Parameter(torch.full((n,), float(gain)))\n"
        "        self.b = torch.nn.Parameter(torch.zeros(n)) if bias else None\n"
        "    def forward(self, a):\n"
        "        y = self.g * (a - a.mean(-1, keepdim=True))\n"
        "        return y if self.b is None else y + self.b\n"
    )
    (tmp_path / "readme_mynorm.py").write_text(stand_in + code)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = dict(NORMALIZERS)
    try:
        importlib.import_module("readme_mynorm")
        kind = normalizer("center")
        from lnbench.nn.rnn import LSTMCell, RecurrentLayer

        layer = RecurrentLayer(LSTMCell(3, 5, NormConfig(kind="center")))
        out, (h, c) = layer(torch.randn(7, 4, 3))
        out.sum().backward()
        assert kind.name == "center" and out.shape == (7, 4, 5) and torch.isfinite(c).all()
        # the Linears dropped their bias (linear_bias=False), so the cell carries the gate bias b of eq. 20
        assert layer.cell.weight_x.bias is None and layer.cell.bias is not None
    finally:
        NORMALIZERS.clear()
        NORMALIZERS.update(saved)
        sys.modules.pop("readme_mynorm", None)
