"""The fast recurrent layers: one interface, `fast_layer(cell)`, in front of torch's own kernels.

`fast_layer(cell)` returns a module with the same `forward(x (T, B, F), state=None) -> (out, state)` as
`RecurrentLayer(cell)`, computing the same numbers (to float rounding) from the same parameters and
buffers: `cell` keeps owning every parameter, so a model's state_dict is the same whichever path runs.
It returns None where it has no fast path; the caller then runs the reference loop.

- No normalizer, weight norm (`TorchKernelLayer`): torch's fused LSTM/GRU kernel (what nn.LSTM.forward
  calls, oneDNN's RNN on CPU, cuDNN on CUDA) on the cell's own tensors; except the un-normalized GRU, which
  runs lnbench's C++ GRU kernel where it runs (`NativeGRULayer`, NATIVE_NONE_GRU_ISAS says where and why).
- Layer norm and BN_t (`NormalizedLayer`): lnbench's C++ kernels, the whole layer in one call each way
  (W_x x and N_x included); or, without them, the input side (W_x x, its normalizer, the gate bias) for all
  steps at once under ordinary autograd, then the recurrence inside ONE autograd.Function with a
  hand-written backward through time on torch's ops (lnbench.nn.fast.recurrence). On CUDA the LN-LSTM's
  recurrence runs lnbench's Triton kernels instead (lnbench.nn.fast.triton_lstm), where they run.

What runs a layer on given tensors is a value, `layer_path(layer, x) -> KernelPath` (lnbench.nn.fast.kernel_path).

Supported: LSTMCell / GRUCell with norm none, weight, layer or batch. The backward is once-differentiable.
"""

from __future__ import annotations

import logging
import warnings
from typing import Optional

import torch
from torch import _VF, Tensor, nn
from torch.nn import functional as F

from lnbench.nn.fast import native, triton_graphs, triton_lstm
from lnbench.nn.fast.kernel_path import FUSED, NATIVE, REFERENCE, TORCH_OPS, TRITON, KernelPath, on_device
from lnbench.nn.fast.recurrence import (
    GRURecurrence,
    LSTMRecurrence,
    NativeGRURecurrence,
    NativeLSTMRecurrence,
    lstm_scale,
)
from lnbench.nn.fast.step_norms import ColumnLayerNorm, NativeNorms, StepNorm, normalize_steps
from lnbench.nn.norm import normalizer
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer, State

log = logging.getLogger("lnbench")
# TorchKernelLayer hands cuDNN the cell's own weights (four tensors, so that the state_dict stays the cell's): cuDNN
# copies them into its packed buffer at every call (one pass over the weights) and torch warns at each call.
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk of memory")


class NormalizedLayer(nn.Module):
    """`RecurrentLayer(cell)` for LN and BN_t cells, the recurrence in one autograd.Function: in lnbench's C++
    kernels where `use_native` and they are built (lnbench.nn.fast.native), else in torch ops."""

    def __init__(self, cell: nn.Module, use_native: bool = True, graphs: Optional[bool] = None):
        super().__init__()
        self.cell, self.use_native = cell, use_native
        self.graphs = graphs  # the Triton LN-LSTM's training steps as CUDA graphs; None: LNBENCH_CUDA_GRAPHS decides

    def native(self, x: Tensor) -> bool:
        """Whether the C++ kernels run this layer on x (they compute W_x x and W_h h with no Linear bias)."""
        return self.use_native and not self.cell.nz.linear_bias and native_runs(x)

    def triton(self, x: Tensor) -> bool:
        """Whether lnbench's Triton kernels run this layer's recurrence on x: the LN-LSTM on CUDA, float32, once a
        first small launch (compile) gave the torch-op loop's numbers on this device (triton_lstm.works)."""
        cell = self.cell
        ok = self.use_native and isinstance(cell, LSTMCell) and cell.nz.fast_kernel == "layer"
        ok = ok and cell.nz.norm_bias and cell.norm_h.bias is not None and cell.norm_c.bias is not None
        return ok and triton_lstm.runs_on(x) and triton_lstm.works(x.device, cell.hidden_size)

    def graphed(self, x: Tensor) -> bool:
        """Whether the Triton LN-LSTM's training steps replay CUDA graphs of its loops (lnbench.nn.fast.triton_graphs:
        the same kernels in the same order, so the same bits, with fewer launches from Python)."""
        return x.is_cuda and (self.graphs if self.graphs is not None else triton_graphs.enabled())

    def path(self, x: Tensor) -> KernelPath:
        if self.native(x):
            return KernelPath(NATIVE, f"{native.isa()} build", True)
        if self.triton(x):
            return KernelPath(TRITON, "CUDA graphs", True) if self.graphed(x) else on_device(TRITON, x.device.type)
        return on_device(TORCH_OPS, x.device.type)

    def forward(self, x: Tensor, state: Optional[State] = None) -> tuple[Tensor, State]:
        cell = self.cell
        if x.shape[0] == 0:  # nothing to run: the reference's own answer
            return RecurrentLayer(cell)(x, state)
        T, B = x.shape[:2]
        if B < 2 and cell.nz.batch_stats and cell.training:  # the normalizer's own refusal of a batch of one
            probe = cell.norm_h if isinstance(cell, LSTMCell) else cell.norm_h_n
            cell.nz.apply(probe, x.new_zeros(1, B, cell.hidden_size))
        Wh = cell.weight_h.weight
        if isinstance(cell, LSTMCell) and self.native(x):
            x = x.contiguous()  # the model's (T, B, F) view of its batch: copied once, not in each direction
            h0, c0 = cell.initial_state(B, x) if state is None else state
            args = (
                x,
                h0,
                c0,
                cell.weight_x.weight,
                Wh,
                cell.bias,
                *_wb(cell.norm_x),
                *_wb(cell.norm_h),
                *_wb(cell.norm_c),
            )
            norms, fn = NativeNorms(cell, T), NativeLSTMRecurrence
        elif self.native(x):  # the GRU
            return native_gru(cell, x, state)
        elif isinstance(cell, LSTMCell) and self.triton(x):
            return self._triton_lstm(x, state)
        elif isinstance(cell, LSTMCell):
            xp = self._project_lstm(x)
            h0, c0 = cell.initial_state(B, xp) if state is None else state
            args = (xp, h0, c0, Wh, *_wb(cell.norm_h), *_wb(cell.norm_c))
            two = xp.new_full((), 2.0)  # a fill, not a copy from the host: capturable in a CUDA graph
            kernel = cell.nz.fast_kernel
            norms = (
                StepNorm(cell.norm_h, kernel, T, lstm_scale(cell.hidden_size, xp)),
                StepNorm(cell.norm_c, kernel, T, two),
            )
            fn = LSTMRecurrence
        else:
            xp_rz, xp_n = self._project_gru(x)
            (h0,) = cell.initial_state(B, xp_n) if state is None else state
            norms = (StepNorm(cell.norm_h_rz, cell.nz.fast_kernel, T), StepNorm(cell.norm_h_n, cell.nz.fast_kernel, T))
            args = (xp_rz, xp_n, h0, Wh, *_wb(cell.norm_h_rz), *_wb(cell.norm_h_n))
            fn = GRURecurrence
        need_grad = torch.is_grad_enabled() and any(a is not None and a.requires_grad for a in args)
        out, *final = fn.apply(norms, need_grad, *args)
        return out, tuple(final)

    def _triton_lstm(self, x: Tensor, state: Optional[State]) -> tuple[Tensor, State]:
        cell = self.cell
        xp = self._project_lstm(x)
        h0, c0 = cell.initial_state(x.shape[1], xp) if state is None else state
        args = (xp, h0, c0, cell.weight_h.weight, *_wb(cell.norm_h), *_wb(cell.norm_c))
        eps = (cell.norm_h.eps, cell.norm_c.eps)
        need_grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        if need_grad and self.graphed(x):
            T, B = x.shape[:2]
            if (graphs := triton_graphs.graphs_for(T, B, cell.hidden_size, eps, x.device)) is not None:
                out, h, c = triton_graphs.GraphedTritonLSTMRecurrence.apply(graphs, *args)
                return out, (h, c)
        out, h, c = triton_lstm.TritonLSTMRecurrence.apply(need_grad, *args, *eps)
        return out, (h, c)

    def _project_lstm(self, x: Tensor) -> Tensor:
        """cell.project_input(x); for LN the gate bias b is folded into LN's own bias (one pass less)."""
        cell, nz = self.cell, self.cell.nz
        a = F.linear(x, cell.weight_x.weight, cell.weight_x.bias)
        ln = cell.norm_x
        if nz.fast_kernel == "layer" and nz.norm_bias and nz.cell_gate_bias:
            return ColumnLayerNorm.apply(a, ln.weight, ln.bias + cell.bias, ln.eps)
        a = normalize_steps(ln, nz.fast_kernel, a)
        return a + cell.bias if cell.bias is not None else a

    def _project_gru(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """cell.project_input(x) as its two parts [W_x x; W x], with no slicing or concatenation."""
        cell = self.cell
        H = cell.hidden_size
        W, b = cell.weight_x.weight, cell.weight_x.bias
        parts = []
        for rows, norm in ((slice(0, 2 * H), cell.norm_x_rz), (slice(2 * H, 3 * H), cell.norm_x_n)):
            a = normalize_steps(norm, cell.nz.fast_kernel, F.linear(x, W[rows], None if b is None else b[rows]))
            parts.append(a if cell.bias is None else a + cell.bias[rows])
        return parts[0], parts[1]


def _wb(norm: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
    return norm.weight, norm.bias


def native_runs(x: Tensor) -> bool:
    """Whether lnbench's C++ kernels can run a layer on x: CPU, float32/float64, the kernels built."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and native.ops() is not None


def native_gru(cell: GRUCell, x: Tensor, state: Optional[State]) -> tuple[Tensor, State]:
    """The GRU layer in lnbench's C++ kernels (NativeGRURecurrence): LN, BN_t, or no normalizer, whose
    normalizers are the Linears' biases (r multiplies U h + b_U, as in torch's GRU)."""
    T, B = x.shape[:2]
    x = x.contiguous()  # the model's (T, B, F) view of its batch: copied once, not in each direction
    (h0,) = cell.initial_state(B, x) if state is None else state
    if cell.nz.activations:
        norms = (cell.norm_x_rz, cell.norm_x_n, cell.norm_h_rz, cell.norm_h_n)
        params = [p for norm in norms for p in _wb(norm)]
    else:
        H2, bx, bh = 2 * cell.hidden_size, cell.weight_x.bias, cell.weight_h.bias
        params = [None, bx[:H2], None, bx[H2:], None, bh[:H2], None, bh[H2:]]
    args = (x, h0, cell.weight_x.weight, cell.weight_h.weight, cell.bias, *params)
    need_grad = torch.is_grad_enabled() and any(a is not None and a.requires_grad for a in args)
    out, hT = NativeGRURecurrence.apply(NativeNorms(cell, T), need_grad, *args)
    return out, (hT,)


class TorchKernelLayer(nn.Module):
    """torch's fused LSTM/GRU kernel (what nn.LSTM / nn.GRU call) on an un-normalized cell's own weights;
    with weight norm the parametrization computes them here, under autograd."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell
        if isinstance(cell, GRUCell):
            # The paper's z is PyTorch's 1 - z: negate the z rows (sigmoid(-a) = 1 - sigmoid(a)).
            sign = torch.ones(3 * cell.hidden_size)
            sign[cell.hidden_size : 2 * cell.hidden_size] = -1
            self.register_buffer("sign", sign, persistent=False)

    def forward(self, x: Tensor, state: Optional[State] = None) -> tuple[Tensor, State]:
        cell = self.cell
        wx, wh = cell.weight_x, cell.weight_h
        weights = [wx.weight, wh.weight, wx.bias, wh.bias]
        h0 = x.new_zeros(1, x.shape[1], cell.hidden_size) if state is None else state[0].unsqueeze(0)
        if isinstance(cell, LSTMCell):
            c0 = h0 if state is None else state[1].unsqueeze(0)
            out, h, c = _VF.lstm(x, (h0, c0), weights, True, 1, 0.0, self.training, False, False)
            return out, (h[0], c[0])
        s = self.sign.to(x.device, x.dtype)  # SequenceModel keeps its layers in a plain list: .to(device) skips them
        weights = [weights[0] * s[:, None], weights[1] * s[:, None], weights[2] * s, weights[3] * s]
        out, h = _VF.gru(x, h0, weights, True, 1, 0.0, self.training, False, False)
        return out, (h[0],)


class NativeGRULayer(TorchKernelLayer):
    """The un-normalized GRU (norm none) in lnbench's C++ kernels (`native_gru`) where they run on x (CPU,
    float32/float64, the kernels built), torch's fused GRU (TorchKernelLayer) elsewhere: the same equations,
    the same parameters, different rounding."""

    def native(self, x: Tensor) -> bool:
        return native_runs(x)

    def forward(self, x: Tensor, state: Optional[State] = None) -> tuple[Tensor, State]:
        if x.shape[0] == 0 or not self.native(x):
            return super().forward(x, state)
        return native_gru(self.cell, x, state)


# The builds on which the un-normalized GRU (`gru`) runs lnbench's kernel (NativeGRULayer) rather than torch's
# GRU, a fixed choice by ISA (never decided at run time: a config gives the same numbers on every machine with the
# same build): on a Zen 5 EPYC, 2 threads, float32, fwd+bwd at B=32 T=100 I=64 H=256 and at B=4, it was 0.40
# and 0.21 of nn.GRU's time on the AVX-512 build and 0.58 and 0.28 on the AVX2 build, but 1.18 (and 0.39) on
# the baseline build, whose products have no FMA (docs/performance.md). `model.impl=torch` keeps torch's GRU.
NATIVE_NONE_GRU_ISAS = ("AVX2", "AVX512")


def fast_layer(cell: nn.Module, use_native: bool = True) -> Optional[nn.Module]:
    """A fast drop-in for `RecurrentLayer(cell)` sharing `cell`'s parameters, or None where there is none:
    torch's fused kernel for cells without activation normalizers, `NormalizedLayer` for the kinds its
    loops compute exactly (`Normalizer.fast_kernel`: layer, batch); `use_native=False` keeps it on torch's
    own ops."""
    if not isinstance(cell, (LSTMCell, GRUCell)):
        return None
    nz = normalizer(cell.norm_kind)
    if not nz.activations:
        plain = not any(hasattr(m, "parametrizations") for m in (cell.weight_x, cell.weight_h))  # not weight norm
        if use_native and native.isa() in NATIVE_NONE_GRU_ISAS and plain and isinstance(cell, GRUCell):
            return NativeGRULayer(cell)
        return TorchKernelLayer(cell)
    if nz.fast_kernel is None or hasattr(cell.weight_h, "parametrizations"):
        return None
    return NormalizedLayer(cell, use_native)


def layer_path(layer: nn.Module, like: Tensor) -> KernelPath:
    """What computes `layer` on tensors like `like` (str() of it as provenance has always named it): "torch's fused
    kernel", lnbench's C++ kernels ("native (AVX512 build)"), lnbench's Triton kernels ("triton (CUDA)"), "torch ops"
    or "reference loop"; the device added on a GPU."""
    device = like.device.type
    if isinstance(layer, NativeGRULayer) and layer.native(like):
        return KernelPath(NATIVE, f"{native.isa()} build", True)
    if isinstance(layer, TorchKernelLayer):
        return on_device(FUSED, device, cpu_same_bits=True)
    if isinstance(layer, NormalizedLayer):
        return layer.path(like)
    return on_device(REFERENCE, device)
