"""The LN-LSTM's recurrence on a GPU in two Triton kernels per step, its matrix products on cuBLAS.

On CUDA the torch-op recurrence (lnbench.nn.fast.recurrence.LSTMRecurrence) launches about a dozen small kernels
per step forward and twenty backward, and a step's arithmetic is microseconds: the launches are the time. Here one
step forward is `torch.mm` (W_h h_{t-1}) and ONE kernel doing everything elementwise or per row: LN_h with its gain
and bias, + the input side (LN_x(W_x x_t) + b, computed for all steps at once before the loop), the gates, the cell,
LN_c and h_t. One step backward is one kernel (h_t's and c_t's gradients through LN_c, the gates and LN_h back to
W_h h_{t-1}) and `torch.addmm` (the gradient reaching h_{t-1}). The weight and normalizer-parameter gradients are
summed over all steps after the loop, in a few torch ops. Nothing is accumulated with atomics: the same inputs give
the same bits on every run.

Each program of a kernel owns one row of the batch (its 4H gate pre-activations, its H cell units), so LN's
statistics are reductions inside one program. tanh is 2 sigmoid(2x) - 1 (tl.sigmoid is in every Triton release;
a tanh is not, before 3.x's libdevice): the same identity the torch-op loop uses. Only long-stable `tl` calls
(load, store, arange, sum, sigmoid, sqrt, where, program_id): the kernels run on the GPU machine's Triton 3.6 and
on CI's 3.9 under TRITON_INTERPRET=1 (tests/nn/test_triton_lstm.py), where they run on CPU tensors too.

`runs_on(x)`: where this path runs (CUDA float32, triton importable, `LNBENCH_TRITON` not 0); the layer
(lnbench.nn.fast.layers.NormalizedLayer) falls back to the torch-op loop elsewhere, and if a launch fails.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from functools import lru_cache
from typing import NamedTuple

import torch
from torch import Tensor
from torch.nn import functional as F

from lnbench import environment

log = logging.getLogger("lnbench")
PROBE_TOLERANCE = 1e-4  # relative (norm of the difference over the norm): float32 lands near 1e-6


def available() -> bool:
    """triton installed (torch's CUDA wheels bring it; CPU installs get it from the `triton` extra, for the tests),
    and not turned off (LNBENCH_TRITON=0). Asked without importing it."""
    return importlib.util.find_spec("triton") is not None and environment.value("LNBENCH_TRITON", "1") != "0"


@lru_cache(maxsize=None)
def kernels():
    """lnbench.nn.fast.triton_kernels, imported at the first launch (importing triton costs a second)."""
    from lnbench.nn.fast import triton_kernels  # noqa: PLC0415 (triton's import cost, only where a kernel runs)

    return triton_kernels


def runs_on(x: Tensor) -> bool:
    """Whether the Triton recurrence runs a layer on x: float32 on CUDA; on CPU tensors too with
    LNBENCH_TRITON=interpret and TRITON_INTERPRET=1 (Triton's interpreter: slow, for trying the wiring without a GPU,
    scripts/gpu/run.sh --dry-run)."""
    if not available() or x.dtype != torch.float32:
        return False
    interpret = environment.value("LNBENCH_TRITON") == "interpret" and os.environ.get("TRITON_INTERPRET") == "1"
    return x.is_cuda or interpret


class Kept(NamedTuple):
    """What the forward keeps of every step for the backward: h_t, W_h h_{t-1}, the gates [i, f, g, o], c_t,
    tanh(LN_c(c_t)), and the two normalizers' mean and rstd per row."""

    out: Tensor
    AH: Tensor
    S: Tensor
    C: Tensor
    TC: Tensor
    MH: Tensor
    RH: Tensor
    MC: Tensor
    RC: Tensor

    @classmethod
    def empty(cls, xp: Tensor, slots: int) -> "Kept":
        """For xp (T, B, 4H): `slots` steps of each (all T for a backward; two in turn without one)."""
        T, B, G = xp.shape
        H = G // 4
        return cls(
            xp.new_empty(T, B, H),
            xp.new_empty(slots, B, G),
            xp.new_empty(slots, B, G),
            xp.new_empty(slots, B, H),
            xp.new_empty(slots, B, H),
            *(xp.new_empty(slots, B) for _ in range(4)),
        )


class Grads(NamedTuple):
    """The backward's results, in TritonLSTMRecurrence's input order: xp's, h_0's, c_0's, W_h's, LN_h's gain and
    bias's, LN_c's gain and bias's."""

    dxp: Tensor
    dh0: Tensor
    dc0: Tensor
    dWh: Tensor
    dwh: Tensor
    dbh: Tensor
    dwc: Tensor
    dbc: Tensor


def forward_loop(xp, h0, c0, Wh, wh, bh, wc, bc, eps_h: float, eps_c: float, kept: Kept) -> tuple[Tensor, Tensor]:
    """Every step, written into `kept` (contiguous inputs); returns (h_T, c_T), views of it."""
    T, B, G = xp.shape
    H, L = G // 4, kept.AH.shape[0]
    k_, WhT = kernels(), Wh.t()
    cfg = k_.launch_config(H)
    h, c = h0, c0
    for t in range(T):
        j = t if L == T else t % 2  # without a backward, two slots in turn: c_{t-1} is read while c_t is written
        k = [kept.AH[j], kept.S[j], kept.C[j], kept.TC[j], kept.out[t], kept.MH[j], kept.RH[j], kept.MC[j], kept.RC[j]]
        torch.mm(h, WhT, out=k[0])
        k_.ln_lstm_fwd_step[(B,)](k[0], xp[t], c, wh, bh, wc, bc, *k[1:], H, eps_h, eps_c, **cfg)
        h, c = kept.out[t], kept.C[j]
    return h, c


def backward_loop(dout, dhT, dcT, h0, c0, Wh, wh, wc, kept: Kept) -> Grads:
    """Every step back from the last (contiguous dout), then the weight and gain gradients over all steps."""
    out, AH, S, C, TC, MH, RH, MC, RC = kept
    T, B, G = AH.shape
    H = G // 4
    dA, dAH, DNC = torch.empty_like(AH), torch.empty_like(AH), torch.empty_like(C)
    dh = dout[T - 1] + dhT
    dcn = dcT.clone(memory_format=torch.contiguous_format)  # c_{t-1}'s, rewritten in place by each step
    k_ = kernels()
    cfg = k_.launch_config(H)
    for t in range(T - 1, -1, -1):
        cp = C[t - 1] if t else c0
        k_.ln_lstm_bwd_step[(B,)](
            dh, dcn, S[t], C[t], cp, TC[t], AH[t], MH[t], RH[t], MC[t], RC[t], wh, wc, dA[t], dAH[t], DNC[t], H, **cfg
        )
        dh = torch.addmm(dout[t - 1], dAH[t], Wh) if t else torch.mm(dAH[0], Wh)
    hprev = torch.cat([h0.unsqueeze(0), out[:-1]], 0)
    dWh = torch.mm(dAH.view(T * B, G).t(), hprev.view(T * B, H))  # every step's in one product
    xh = (AH - MH.unsqueeze(-1)) * RH.unsqueeze(-1)
    xc = (C - MC.unsqueeze(-1)) * RC.unsqueeze(-1)
    return Grads(dA, dh, dcn, dWh, (xh * dA).sum((0, 1)), dA.sum((0, 1)), (xc * DNC).sum((0, 1)), DNC.sum((0, 1)))


class TritonLSTMRecurrence(torch.autograd.Function):
    """The LN-LSTM recurrence (a = xp_t + LN_h(W_h h_{t-1}); c_t, h_t as lnbench.nn.rnn.LSTMCell) over all steps:
    xp (T, B, 4H) is the input side with the gate bias folded in; wh, bh: LN_h's gain and bias; wc, bc: LN_c's.
    Returns (out (T, B, H), h_T, c_T); once differentiable."""

    @staticmethod
    def forward(ctx, need_grad, xp, h0, c0, Wh, wh, bh, wc, bc, eps_h, eps_c):
        xp, h0, c0 = xp.contiguous(), h0.contiguous(), c0.contiguous()
        kept = Kept.empty(xp, xp.shape[0] if need_grad else 2)
        h, c = forward_loop(xp, h0, c0, Wh, wh, bh, wc, bc, eps_h, eps_c, kept)
        if need_grad:
            ctx.save_for_backward(h0, c0, Wh, wh, wc, *kept)
        return kept.out, h.clone(), c.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        h0, c0, Wh, wh, wc, *kept = ctx.saved_tensors
        grads = backward_loop(dout.contiguous(), dhT, dcT, h0, c0, Wh, wh, wc, Kept(*kept))
        return None, *grads, None, None


def reference_recurrence(xp, h0, c0, Wh, wh, bh, wc, bc, eps_h, eps_c) -> tuple[Tensor, Tensor, Tensor]:
    """The same recurrence as lnbench.nn.rnn.LSTMCell.step with layer norm, in plain torch ops under autograd."""
    G, H = xp.shape[-1], xp.shape[-1] // 4
    h, c, outs = h0, c0, []
    for xp_t in xp.unbind(0):
        i, f, g, o = (F.layer_norm(h @ Wh.t(), (G,), wh, bh, eps_h) + xp_t).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(F.layer_norm(c, (H,), wc, bc, eps_c))
        outs.append(h)
    return torch.stack(outs), h, c


def relative_error(got: Tensor, want: Tensor) -> float:
    got, want = got.detach(), want.detach()
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


@lru_cache(maxsize=None)
def works(device: torch.device, H: int) -> bool:
    """A first launch at width H on this device (which compiles the kernels the layer will launch): 3 steps of 2
    rows forward and backward against `reference_recurrence`. False, logged once, where it fails or differs: the
    layer then runs the torch-op loop, and its provenance says so."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        # in float32 proper (the products of both sides too), with autograd, whatever the caller's context
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.inference_mode(False), torch.enable_grad():
            gen = torch.Generator().manual_seed(0)  # never the global generator: a run's draws stay its own
            shapes = [(3, 2, 4 * H), (2, H), (2, H), (4 * H, H), (4 * H,), (4 * H,), (H,), (H,)]
            args = [(torch.randn(s, generator=gen) * 0.5).to(device).requires_grad_() for s in shapes]
            got = TritonLSTMRecurrence.apply(True, *args, 1e-5, 1e-5)
            want = reference_recurrence(*args, 1e-5, 1e-5)
            weights = [torch.randn(t.shape, generator=gen).to(device) for t in want]
            grads = [
                torch.autograd.grad(sum((w * t).sum() for w, t in zip(weights, outs)), args) for outs in (got, want)
            ]
        errors = [relative_error(a, b) for a, b in zip([*got, *grads[0]], [*want, *grads[1]])]
        if max(errors) > PROBE_TOLERANCE or not all(torch.isfinite(t).all() for t in [*got, *grads[0]]):
            raise RuntimeError(f"results differ from torch's ops (largest relative error {max(errors):.2g})")
        return True
    except Exception as e:  # noqa: BLE001 - any failure means: run the torch-op loop instead
        log.warning(
            "lnbench's Triton LN-LSTM kernels do not run on %s at hidden size %d, so the layer runs on torch's ops "
            "(slower): %s: %s",
            device,
            H,
            type(e).__name__,
            str(e).splitlines()[0][:300] if str(e) else "",
        )
        return False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
