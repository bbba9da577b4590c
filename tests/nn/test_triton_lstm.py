"""lnbench's Triton LN-LSTM kernels (lnbench.nn.fast.triton_lstm) on the CPU, under Triton's interpreter
(TRITON_INTERPRET=1): the arithmetic the GPU runs, against the reference cell, in CI. The interpreter is chosen when
triton is imported, so the checks run in a fresh process, with triton where it is: importable here (a CUDA build of
torch brings it), else `make setup`'s folder beside a CPU build (.venv/triton-site, or $LNBENCH_TRITON_SITE, off
the venv's path: docs/install.md). Where neither has it, the test skips."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SITE = Path(os.environ.get("LNBENCH_TRITON_SITE") or Path(sys.prefix) / "triton-site")
HERE = importlib.util.find_spec("triton") is not None
pytestmark = pytest.mark.skipif(
    not HERE and not (SITE / "triton").is_dir(), reason=f"triton is neither importable nor in {SITE} (make setup)"
)

CHECK = r"""
import json, torch
from lnbench.nn.fast import triton_lstm as tl_
from lnbench.nn.fast.layers import NormalizedLayer, fast_layer, layer_path
from lnbench.nn.norm import NormConfig
from lnbench.nn.rnn import LSTMCell, RecurrentLayer

def err(a, b):
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())

found = {}
for T, B, H in [(5, 3, 6), (4, 2, 16), (3, 1, 13)]:
    torch.manual_seed(T * B * H)
    shapes = [(T, B, 4 * H), (B, H), (B, H), (4 * H, H), (4 * H,), (4 * H,), (H,), (H,)]
    args = [(torch.randn(s) * 0.7 + (1.0 if i in (4, 6) else 0.0)).requires_grad_() for i, s in enumerate(shapes)]
    ref_args = [a.detach().double().requires_grad_() for a in args]
    got = tl_.TritonLSTMRecurrence.apply(True, *args, 1e-5, 1e-4)
    want = tl_.reference_recurrence(*ref_args, 1e-5, 1e-4)
    w = [torch.randn(t.shape, dtype=torch.float64) for t in want]
    g_got = torch.autograd.grad(sum((a * b.float()).sum() for a, b in zip(got, w)), args)
    g_want = torch.autograd.grad(sum((a * b).sum() for a, b in zip(want, w)), ref_args)
    nograd = tl_.TritonLSTMRecurrence.apply(False, *[a.detach() for a in args], 1e-5, 1e-4)
    found[f"{T}x{B}x{H}"] = {
        "outputs": max(err(a, b) for a, b in zip(got, want)),
        "gradients": max(err(a, b) for a, b in zip(g_got, g_want)),
        "no_grad_same_bits": all(torch.equal(a, b) for a, b in zip(nograd, got)),
    }
# the layer a model runs (LNBENCH_TRITON=interpret: the Triton path on CPU tensors), against the reference loop
torch.manual_seed(0)
cell = LSTMCell(5, 8, NormConfig(kind="layer"))
layer = fast_layer(cell)
x = torch.randn(6, 4, 5, requires_grad=True)
out, (h, c) = layer(x)
ref, (rh, rc) = RecurrentLayer(cell)(x)
g = torch.autograd.grad(out.square().sum() + c.sum(), [x, *cell.parameters()])
rg = torch.autograd.grad(ref.square().sum() + rc.sum(), [x, *cell.parameters()])
found["layer"] = {
    "path": str(layer_path(layer, x)),
    "outputs": max(err(a, b) for a, b in [(out, ref), (h, rh), (c, rc)]),
    "gradients": max(err(a, b) for a, b in zip(g, rg)),
}

# lnbench.nn.fast.triton_graphs' bookkeeping, its capture replaced by one that replays by running the loops again:
# two stacked layers of one shape share the graphs (the second's forward overwrites the buffers before the first's
# backward), over two steps; against the eager recurrence
from lnbench.nn.fast import triton_graphs as tg

def rerun_capture(fn, device):
    results = fn()
    def replay():
        for old, new in zip(results, fn()):
            old.copy_(new)
    return replay, results

tg.capture = rerun_capture
T, B, H = 4, 3, 8
torch.manual_seed(1)
leaves = [(torch.randn(s) * 0.5 + (1.0 if i in (2, 4) else 0.0)).requires_grad_()
          for layer in range(2) for i, s in enumerate([(4 * H, H), (4 * H,), (4 * H,), (H,), (H,)])]
xp1 = torch.randn(T, B, 4 * H, requires_grad=True)
Wx2 = torch.randn(4 * H, H, requires_grad=True)
zeros = torch.zeros(B, H)
graphs = tg.graphs_for(T, B, H, (1e-5, 1e-5), torch.device("cpu"))
w = torch.randn(T, B, H)

def step(graphed):
    def layer(xp, params):
        if graphed:
            return tg.GraphedTritonLSTMRecurrence.apply(graphs, xp, zeros, zeros, *params)
        return tl_.TritonLSTMRecurrence.apply(True, xp, zeros, zeros, *params, 1e-5, 1e-5)
    out1, _, c1 = layer(xp1, leaves[:5])
    out2, h2, _ = layer(out1 @ Wx2.t(), leaves[5:])
    loss = (out2 * w).sum() + h2.sum() + c1.square().sum()
    return [out2, *torch.autograd.grad(loss, [xp1, Wx2, *leaves])]

eager = step(False) + step(False)
graphed = step(True) + step(True)
found["graphs"] = {"captured": graphs is not None, "same_bits": all(torch.equal(a, b) for a, b in zip(eager, graphed))}
print(json.dumps(found))
"""


def test_the_triton_kernels_compute_the_ln_lstm_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "LNBENCH_TRITON": "interpret", "LNBENCH_NATIVE": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *([] if HERE else [str(SITE)]), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    layer, graphs = found.pop("layer"), found.pop("graphs")
    assert graphs == {"captured": True, "same_bits": True}  # the graphs' buffers kept each call's own values
    assert layer["path"] == "triton"  # the layer took the Triton path, not torch's ops
    # float32 kernels against float64 (shapes) or float32 torch ops (the layer): rounding only
    assert layer["outputs"] < 1e-5 and layer["gradients"] < 1e-4, layer
    for shape, r in found.items():
        assert r["outputs"] < 1e-5 and r["gradients"] < 1e-4, (shape, r)
        assert r["no_grad_same_bits"], shape  # the two-slot forward without a backward computes the same
