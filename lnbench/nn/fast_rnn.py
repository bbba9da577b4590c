"""Fast drop-in replacements for `RecurrentLayer(cell)` on the normalized reference cells.

`make_fast_layer(cell)` returns a module with the same `forward(x (T, B, F), state=None) -> (out, state)`
as `RecurrentLayer(cell)`, computing the same numbers (to float rounding) from the same parameters and
buffers: it keeps `cell` as the owner of every parameter, so a model's state_dict is the same whichever
path runs. It returns None where it has no fast path (the caller then uses `RecurrentLayer`).

How it is fast, with no compiler at all (so it runs wherever torch runs, CPU or CUDA, nothing to warm):
- the input side (W_x x, its normalizer, the gate bias) runs for all steps at once through the cell's
  own `project_input`, under ordinary autograd (so BN's input-side running statistics are the cell's);
- the recurrence runs inside ONE `torch.autograd.Function` per layer with a hand-written backward
  through time. The forward loop issues a few fused aten ops per step (`mm`, `native_layer_norm`,
  `sigmoid`, `addcmul`, `lerp`) writing into preallocated (T, B, .) buffers, and keeps only what the
  backward needs (W_h h_{t-1}, the gate activations, c_t, the normalizers' mean/rstd). Everything that
  does not depend on the recurrence is done over all steps at once: the activation derivatives before
  the backward loop; the normalizers' gain/bias gradients and the recurrent weight gradient after it,
  the latter as ONE (G x T*B) @ (T*B x H) matmul. This removes autograd's per-op bookkeeping, which
  dominates a Python loop of small ops.
- BN_t (per-time-step statistics, Cooijmans et al.) is written out by hand the same way: training uses
  step t's batch statistics (biased or unbiased variance, as configured) and updates the running
  averages of the steps below `time_steps` exactly as `BatchNorm._update_running` does; eval uses the
  stored statistics, the last slot for steps beyond it.
- LN on CPU (float32/float64) goes one step further when the C kernels of `lnbench.nn.ckernel` are
  available (built at first use with the system C compiler, cached): the whole recurrence is ONE C call
  each way, its own recurrent products included (per step h_{t-1} W_h^T, then all the step's pointwise
  work: the LNs, gates and state update; in the backward the pointwise/LN chain rule, the LN gain/bias
  gradients accumulated in place, then dA_t W_h), each step's work shared out over torch's threads.
  For the LSTM the input side's LN(W_x x) + b runs inside the step kernel too. The backward reuses the
  forward's buffers in place, so it runs once per forward (retain_graph=True raises; set
  LNBENCH_NO_CKERNEL=1 for that). Without a compiler, while it
  compiles, on CUDA or with LNBENCH_NO_CKERNEL=1, the eager aten path above runs (same numbers).
- In those C paths, float32 on CPU, the large matrix products (W_x x over all steps, its gradients, the
  recurrent weight's gradient) run through oneDNN's linear (`_matmul`, `_Linear`): torch.mm calls MKL,
  which on this AMD CPU took 1.5-2.5x as long.
- BN_t on CPU runs through C kernels the same way (BN's statistics are per column, so those are split
  over the threads by hidden units, the rest of each step by rows): for the LSTM the input side's
  BN_t(W_x x) + b is in the step kernel too; the GRU's input side is one torch batch norm over a
  (B, T*G) view.

Supported: LSTMCell / GRUCell with norm layer or batch. none / weight (torch's fused kernels serve
them: `lnbench.nn.fused`) and rms return None. The backward is once-differentiable (no double backward).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lnbench.nn.norm import BatchNorm, apply_norm, normalizer
from lnbench.nn.rnn import GRUCell, LSTMCell, RecurrentLayer, State

_ln = torch.native_layer_norm
_ln_bwd = torch.ops.aten.native_layer_norm_backward.default
_bn = torch.native_batch_norm
_bn_bwd = torch.ops.aten.native_batch_norm_backward.default


class _Norm:
    """One normalizer of the recurrence (LN or BN_t) as the fast loops use it.

    `fwd(a, t) -> (y, mean, rstd)`; `bwd(dy, a, mean, rstd) -> da` for one step (B, G);
    after the forward loop, `stats()` stacks mean/rstd over steps to shapes broadcasting against
    (T, B, G), and `finish()` updates BN's running averages.
    """

    def __init__(self, mod: nn.Module, steps: int):
        self.w = mod.weight
        self.b = mod.bias
        self.eps = mod.eps
        self.bn = isinstance(mod, BatchNorm)
        self.G = mod.weight.shape[0]
        self.means: list[Tensor] = []
        self.rstds: list[Tensor] = []
        if self.bn:
            self.mod = mod
            self.train = mod.training
            if self.train:
                self.vars_u: list[Tensor] = []
                self.k = None  # set from the batch size on the first step
            else:
                self.run_mean, self.run_var = _bn_eval_stats(mod, steps)

    def _unbiased_setup(self, n: int) -> None:
        # BN with the unbiased variance is torch's (biased) batch norm with eps' = eps (n-1)/n and the
        # gain scaled by k = sqrt((n-1)/n): (a - mu) / sqrt(v_u + eps) = k (a - mu) / sqrt(v_b + eps').
        if self.mod.unbiased:
            self.k = ((n - 1) / n) ** 0.5
            self.eps_t = self.eps * (n - 1) / n
            self.w_t = self.w * self.k
        else:
            self.k, self.eps_t, self.w_t = 1.0, self.eps, self.w

    def fwd(self, a: Tensor, t: int) -> tuple[Tensor, Tensor, Tensor]:
        if not self.bn:
            y, mean, rstd = _ln(a, (self.G,), self.w, self.b, self.eps)
        elif self.train:
            if self.k is None:
                self._unbiased_setup(a.shape[0])
            y, mean, rstd = _bn(a, self.w_t, self.b, None, None, True, 0.0, self.eps_t)
            self.vars_u.append(a.var(0, unbiased=True))
        else:  # rstd slot holds the running variance: native_batch_norm_backward takes it so
            mean, rstd = self.run_mean[t], self.run_var[t]
            y = _bn(a, self.w, self.b, mean, rstd, False, 0.0, self.eps)[0]
        self.means.append(mean)
        self.rstds.append(rstd)
        return y, mean, rstd

    def bwd(self, dy: Tensor, a: Tensor, mean: Tensor, rstd: Tensor):
        """(da, dweight, dbias) of one step."""
        mask = [True, True, self.b is not None]
        if not self.bn:
            return _ln_bwd(dy, a, (self.G,), mean, rstd, self.w, self.b, mask)
        if self.train:
            da, dw, db = _bn_bwd(dy, a, self.w_t, None, None, mean, rstd, True, self.eps_t, mask)
            return da, (dw if self.k == 1.0 else dw * self.k), db
        return _bn_bwd(dy, a, self.w, mean, rstd, None, None, False, self.eps, mask)

    def stats(self) -> tuple[Tensor, Tensor]:
        return torch.stack(self.means), torch.stack(self.rstds)

    def finish(self) -> None:
        """Update BN's running averages from the per-step batch statistics, as BatchNorm does."""
        if self.bn and self.train and self.means:
            _bn_update_running(self.mod, torch.stack(self.means), torch.stack(self.vars_u))


def _normalize_steps(norm: nn.Module, a: Tensor) -> Tensor:
    """apply_norm(norm, a) for a (T, B, G), under autograd. BN_t in training runs as ONE torch batch norm
    over the T*G columns of a (B, T*G) copy (each column is one unit at one step: per-step statistics),
    because the reference's reductions over the middle (batch) dim of (T, B, G) are slow strided passes."""
    if not (isinstance(norm, BatchNorm) and norm.training and a.shape[1] >= 2):
        return apply_norm(norm, a)
    T, B, G = a.shape
    a2 = a.transpose(0, 1).reshape(B, T * G)
    k, eps = (((B - 1) / B) ** 0.5, norm.eps * (B - 1) / B) if norm.unbiased else (1.0, norm.eps)  # see _Norm
    w = (norm.weight * k).repeat(T)
    b = None if norm.bias is None else norm.bias.repeat(T)
    y, mean, invstd = torch.native_batch_norm(a2, w, b, None, None, True, 0.0, eps)
    with torch.no_grad():  # the unbiased variance from invstd = 1/sqrt(v_b + eps) (a2.var(0) is a slow strided pass)
        var_u = (invstd.pow(-2) - eps).clamp_min_(0) * (B / (B - 1))
        _bn_update_running(norm, mean.view(T, G), var_u.view(T, G))
    return y.view(B, T, G).transpose(0, 1).contiguous()


def _shifted(first: Tensor, seq: Tensor) -> Tensor:
    """[first, seq[0], ..., seq[T-2]]: the value each step starts from."""
    return torch.cat([first.unsqueeze(0), seq[:-1]], 0)


def _sum_steps(grads: list) -> Optional[Tensor]:
    return None if grads[0] is None else torch.stack(grads).sum(0)


# On this kind of CPU a pass over a whole (T, B, G) tensor costs more than the same work done step by
# step while the step's data is in cache, so the backward loops below do everything per step (the
# normalizers' gain/bias gradients come out of the same fused backward call) and only the recurrent
# weight gradient is batched over all steps.

def _lstm_buffers(x: Tensor, need_grad: bool) -> tuple[Tensor, ...]:
    """What an LSTM forward keeps per step for its backward, for x (T, B, 4H): the outputs h_t, W_h h_{t-1},
    the gate activations (sigmoid of i, f, o; tanh of g in g's slot), c_t and tanh(N_c(c_t)). Without a
    backward, one step's scratch space is reused."""
    T, B, G = x.shape
    L = T if need_grad else 1
    return (x.new_empty(T, B, G // 4), x.new_empty(L, B, G), x.new_empty(L, B, G), x.new_empty(L, B, G // 4),
            x.new_empty(L, B, G // 4))


def _gru_buffers(xp_n: Tensor, need_grad: bool) -> tuple[Tensor, ...]:
    """What a GRU forward keeps per step, for xp_n (T, B, H): the outputs h_t, [W_h; U] h_{t-1},
    sigmoid(r) and sigmoid(z), and the candidate h~_t (one step's scratch space without a backward)."""
    T, B, H = xp_n.shape
    L = T if need_grad else 1
    return xp_n.new_empty(T, B, H), xp_n.new_empty(L, B, 3 * H), xp_n.new_empty(L, B, 2 * H), xp_n.new_empty(L, B, H)


# --------------------------------------------------------------------------------------------------
# LSTM: a = xp_t + N_h(W_h h_{t-1}); c_t = sf c_{t-1} + si tanh(g); h_t = so tanh(N_c(c_t))
# --------------------------------------------------------------------------------------------------
class _LSTMRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norms, need_grad, xp, h0, c0, Wh, wh, bh, wc, bc):
        nh, nc = norms
        T, B, G = xp.shape
        H = G // 4
        WhT = Wh.t()
        out, AH, S, C, TC = _lstm_buffers(xp, need_grad)
        h, c = h0, c0
        for t, xp_t in enumerate(xp.unbind(0)):
            k = t if need_grad else 0
            ah = torch.mm(h, WhT, out=AH[k])
            a = nh.fwd(ah, t)[0].add_(xp_t)
            s = torch.sigmoid(a, out=S[k])
            i, f, g, o = s.chunk(4, 1)
            torch.tanh(a[:, 2 * H : 3 * H], out=g)
            c = torch.addcmul(f * c, i, g, out=C[k])
            tc = torch.tanh(nc.fwd(c, t)[0], out=TC[k])
            h = torch.mul(o, tc, out=out[t])
        nh.finish()
        nc.finish()
        if need_grad:
            ctx.norms = norms
            ctx.save_for_backward(xp, h0, c0, Wh, out, AH, S, C, TC, *nh.stats(), *nc.stats())
        return out, h.clone(), c.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        nh, nc = ctx.norms
        xp, h0, c0, Wh, out, AH, S, C, TC, MH, RH, MC, RC = ctx.saved_tensors
        T, B, G = xp.shape
        H = G // 4
        dA = torch.empty_like(xp)  # grad of the gate pre-activations = grad of xp
        dA4 = dA.view(T, B, 4, H)
        dAH = torch.empty_like(xp)  # grad of W_h h_{t-1}
        dwh, dbh, dwc, dbc = [], [], [], []
        dh = dout[T - 1] + dhT
        dc_next = dcT
        for t in range(T - 1, -1, -1):
            s, tc, d = S[t], TC[t], dA4[t]
            i, f, g, o = s.chunk(4, 1)
            dtc = dh * o
            dnc = torch.addcmul(dtc, dtc * tc, tc, value=-1)  # dh o (1 - tc^2)
            dc, gw, gb = nc.bwd(dnc, C[t], MC[t], RC[t])
            dwc.append(gw)
            dbc.append(gb)
            dc = dc.add_(dc_next)
            torch.mul(dc, g, out=d[:, 0])
            torch.mul(dc, C[t - 1] if t else c0, out=d[:, 1])
            torch.mul(dc, i, out=d[:, 2])
            torch.mul(dh, tc, out=d[:, 3])
            ds = s - s * s  # sigmoid'; g's slot becomes tanh' below
            dsg = ds[:, 2 * H : 3 * H]
            torch.mul(g, g, out=dsg).neg_().add_(1)
            da = dA[t].mul_(ds)
            dc_next = dc.mul_(f)
            dah, gw, gb = nh.bwd(da, AH[t], MH[t], RH[t])
            dwh.append(gw)
            dbh.append(gb)
            dAH[t] = dah
            dh = torch.addmm(dout[t - 1], dah, Wh) if t else torch.mm(dah, Wh)
        # W_h's gradient for all steps as one matmul.
        dWh = torch.mm(dAH.view(T * B, G).t(), _shifted(h0, out).view(T * B, H))
        return (None, None, dA, dh, dc_next, dWh,
                _sum_steps(dwh), _sum_steps(dbh), _sum_steps(dwc), _sum_steps(dbc))


# --------------------------------------------------------------------------------------------------
# GRU: [r, z] = sigmoid(xp_rz + N_rz(W_h h)); n = tanh(xp_n + r N_n(U h)); h_t = h + z (n - h)
# --------------------------------------------------------------------------------------------------
class _GRURecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, norms, need_grad, xp_rz, xp_n, h0, Wh, w_rz, b_rz, w_n, b_n):
        n_rz, n_n = norms
        T, B, H = xp_n.shape
        WhT = Wh.t()
        out, AH, SRZ, N = _gru_buffers(xp_n, need_grad)
        NN = []  # N_n(U h_{t-1})
        h = h0
        for t, (xr, xn) in enumerate(zip(xp_rz.unbind(0), xp_n.unbind(0))):
            k = t if need_grad else 0
            ah = torch.mm(h, WhT, out=AH[k])
            rz = n_rz.fwd(ah[:, : 2 * H], t)[0].add_(xr)
            s = torch.sigmoid(rz, out=SRZ[k])
            r, z = s.chunk(2, 1)
            nn_ = n_n.fwd(ah[:, 2 * H :], t)[0]
            n = torch.tanh(torch.addcmul(xn, r, nn_), out=N[k])
            h = torch.lerp(h, n, z, out=out[t])
            if need_grad:
                NN.append(nn_)
        n_rz.finish()
        n_n.finish()
        if need_grad:
            ctx.norms = norms
            ctx.save_for_backward(h0, Wh, out, AH, SRZ, N, *n_rz.stats(), *n_n.stats(), *NN)
        return out, h.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        n_rz, n_n = ctx.norms
        h0, Wh, out, AH, SRZ, N, M1, R1, M4, R4, *NN = ctx.saved_tensors
        T, B, H = out.shape
        G = 3 * H
        dXRZ = torch.empty(T, B, 2 * H, dtype=out.dtype, device=out.device)
        dXN = torch.empty_like(out)
        dAH = torch.empty_like(AH)
        dw_rz, db_rz, dw_n, db_n = [], [], [], []
        dh = dout[T - 1] + dhT
        for t in range(T - 1, -1, -1):
            s, n, drz = SRZ[t], N[t], dXRZ[t]
            r, z = s.chunk(2, 1)
            hprev = out[t - 1] if t else h0
            dzh = dh * z
            dn = torch.addcmul(dzh, dzh * n, n, value=-1, out=dXN[t])  # dh z (1 - n^2)
            torch.mul(dn, NN[t], out=drz[:, :H])
            torch.mul(dh, n - hprev, out=drz[:, H:])
            drz.mul_(s - s * s)
            dnn = dn * r
            dah, gw, gb = n_rz.bwd(drz, AH[t, :, : 2 * H], M1[t], R1[t])
            dw_rz.append(gw)
            db_rz.append(gb)
            dAH[t, :, : 2 * H] = dah
            dah, gw, gb = n_n.bwd(dnn, AH[t, :, 2 * H :], M4[t], R4[t])
            dw_n.append(gw)
            db_n.append(gb)
            dAH[t, :, 2 * H :] = dah
            dh = dh.sub_(dzh)  # dh (1 - z)
            dh = dh.add_(dout[t - 1]).addmm_(dAH[t], Wh) if t else dh.addmm_(dAH[0], Wh)
        dWh = torch.mm(dAH.view(T * B, G).t(), _shifted(h0, out).view(T * B, H))
        return (None, None, dXRZ, dXN, dh, dWh,
                _sum_steps(dw_rz), _sum_steps(db_rz), _sum_steps(dw_n), _sum_steps(db_n))


# --------------------------------------------------------------------------------------------------
# The same two recurrences for LN on CPU through the C kernels of `lnbench.nn.ckernel`: the whole
# sequence is ONE C call each way, the recurrent products (h_{t-1} W_h^T, dA_t W_h) included, and per
# step everything pointwise (the LNs, the gates, the state update; in the backward the pointwise/LN chain
# rule, accumulating the LN gains/biases' gradients in place). Tensors are contiguous; the C side gets
# raw pointers. The kernels share each step's work out over torch's OpenMP threads (the library links
# libgomp.so.1, which resolves to the copy torch already loaded, so both share one thread pool).
# --------------------------------------------------------------------------------------------------
def _onednn_linear() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
                    and torch.ops.mkldnn._linear_pointwise is not None)
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def _use_onednn(t: Tensor) -> bool:
    return t.dtype == torch.float32 and t.device.type == "cpu" and _onednn_linear()


ONEDNN_MAX_INNER = 8192  # longer reductions: torch.mm (M=400 K=78400 N=100, T=784: 135 vs 81 ms)
ONEDNN_MIN_COLS = 16  # narrower results (W_x x's gradient for one input feature): torch.mm


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for the large products of the C paths (W_x x over all steps, its gradients, the recurrent
    weight's gradient): through oneDNN for float32 on CPU, where torch.mm (MKL) was up to 2x slower on
    this AMD CPU (M=1024 K=400 N=256: 1.15 vs 2.37 ms, 1 thread), except for long reductions and narrow
    results, where torch.mm was the faster; torch.mm otherwise."""
    if _use_onednn(a) and a.shape[1] <= ONEDNN_MAX_INNER and b.shape[1] >= ONEDNN_MIN_COLS:
        return torch.ops.mkldnn._linear_pointwise(a, b.t(), None, "none", [], "")
    return torch.mm(a, b)


class _Linear(torch.autograd.Function):
    """F.linear(x, W, b) with the forward and both gradient products through `_matmul` (the input side
    W_x x of the C paths, all steps at once)."""

    @staticmethod
    def forward(ctx, x, W, b):
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, W)
        ctx.has_bias = b is not None
        y = _matmul(x2, W.t()) if b is None else _matmul(x2, W.t()).add_(b)
        return y.view(*x.shape[:-1], W.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2, W = ctx.saved_tensors
        dy2 = dy.reshape(-1, W.shape[0])
        dx = _matmul(dy2, W).view(*dy.shape[:-1], W.shape[1]) if ctx.needs_input_grad[0] else None
        dW = _weight_grad(dy2, x2) if ctx.needs_input_grad[1] else None
        db = dy2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dW, db


def _linear(x: Tensor, W: Tensor, b: Optional[Tensor]) -> Tensor:
    return _Linear.apply(x, W, b) if _use_onednn(x) and W.dtype == x.dtype else F.linear(x, W, b)


def _weight_grad(a: Tensor, b: Tensor, b0: Optional[Tensor] = None) -> Tensor:
    """a^T @ [b0; b] for the C paths' weight gradients (a: (K, M), b0: (K0, N) or None, b: (K - K0, N),
    K = T*B rows): through the C kernels' gemm_tn where `_matmul` would take oneDNN, which needs a^T
    copied first (see gemm_tn), and b has a panel's width of columns; `_matmul` otherwise. Measured
    (2 threads, quiet machine): at T=100 B=32 H=256 the lstm layer's step fell from 28.5 to 21.3 ms; at
    T=784 B=100 H=100 (K=78,400, past ONEDNN_MAX_INNER) torch.mm took 38 ms for dW_h and gemm_tn 82
    before it packed its operands, 34-42 after: no faster, so torch.mm keeps those."""
    from lnbench.nn import ckernel

    kern = ckernel.kernel() if a.device.type == "cpu" and a.dtype in (torch.float32, torch.float64) else None
    suf = "f64" if a.dtype == torch.float64 else "f32"
    if (kern is None or not kern.vectorized or b.dtype != a.dtype or b.shape[1] < ckernel.PANEL["f32"]
            or a.shape[0] > ONEDNN_MAX_INNER):
        return _matmul(a.t(), b if b0 is None else torch.cat([b0, b]))
    a, b = a.contiguous(), b.contiguous()
    b0 = b if b0 is None else b0.contiguous()
    kh = 0 if b0 is b else b0.shape[0]
    nt = torch.get_num_threads()
    out = a.new_empty(a.shape[1], b.shape[1])
    work = a.new_empty(ckernel.gemm_tn_work(nt, b.shape[1], suf))
    _call(kern.fn("gemm_tn", a.dtype), nt, a.shape[0], a.shape[1], b.shape[1], a, a.shape[1], b0, kh, b,
          b.shape[1], out, work)
    return out


def _recurrent_weight_grad(dA: Tensor, h0: Tensor, out: Tensor) -> Tensor:
    """dL/dW_h = sum_t dA_t^T h_{t-1} for the C paths: all T steps as one product (dA: (T, B, G)), h_{t-1}
    read from h0 and out[:T-1] in place."""
    T, B, G = dA.shape
    H = h0.shape[-1]
    return _weight_grad(dA.view(T * B, G), out[:T - 1].reshape((T - 1) * B, H), h0.reshape(B, H))


def _call(fn, *args) -> None:
    """fn(*args) with each tensor passed as its data pointer; `args` keeps the tensors alive (a temporary
    whose pointer alone went into the call could be freed before the call runs)."""
    fn(*(a.data_ptr() if isinstance(a, Tensor) else a for a in args))


def _panels(kern, Wh: Tensor, direction: str) -> Tensor:
    """W_h (G, H) packed for the C recurrences' products (ckernel's gemm_panels): "forward" as the K=H x
    N=G matrix W_h^T of h_{t-1} W_h^T, "backward" as the K=G x N=H matrix W_h of dA_t W_h."""
    from lnbench.nn import ckernel

    W = Wh.detach().contiguous()
    G, H = W.shape
    K, N, rk, rn = (H, G, 1, H) if direction == "forward" else (G, H, H, 1)
    panel = ckernel.PANEL["f64" if W.dtype == torch.float64 else "f32"]
    packed = W.new_empty(-(-N // panel) * K * panel)
    _call(kern.fn("pack_panels", W.dtype), K, N, W, rk, rn, packed)
    return packed


MIN_ROWS_PER_THREAD = 8  # the C kernels split the batch over torch's threads, at least this many rows each


def _kernel_threads(B: int) -> int:
    return max(1, min(torch.get_num_threads(), B // MIN_ROWS_PER_THREAD))


def _consume(ctx) -> None:
    """The C backward overwrites its saved buffers, so it can run only once per forward."""
    if getattr(ctx, "consumed", False):
        raise RuntimeError("lnbench fast LN layer (C kernels): backward through the same forward twice "
                           "(retain_graph=True) is unsupported; set LNBENCH_NO_CKERNEL=1 for that")
    ctx.consumed = True


class _LNLSTMRecurrenceC(torch.autograd.Function):
    """LN-LSTM with the input side's LN folded into the step kernel too: it takes ax = W_x x (T, B, 4H)
    and bx = b2 + b (LN(W_x x)'s bias plus the gate bias), so no (T, B, 4H) pass runs outside the loop.
    The whole recurrence, products included, is one C call each way (lnlstm_fwd / lnlstm_bwd)."""

    @staticmethod
    def forward(ctx, kern, eps, need_grad, ax, h0, c0, Wh, wx, bx, wh, bh, wc, bc):
        T, B, G = ax.shape
        H = G // 4
        ax, h0, c0 = ax.contiguous(), h0.contiguous(), c0.contiguous()
        wx, bx, wh, bh, wc, bc = (p.contiguous() for p in (wx, bx, wh, bh, wc, bc))
        out, AH, S, C, TC = _lstm_buffers(ax, need_grad)
        ST = ax.new_empty(AH.shape[0], 6, B)  # mean/rstd of LN(W_h h), LN(W_x x), LN(c): per step and row
        _call(kern.fn("lnlstm_fwd", ax.dtype), torch.get_num_threads(), T, B, H, int(need_grad), eps,
              _panels(kern, Wh, "forward"), h0, c0, ax, wh, bh, wx, bx, wc, bc, AH, S, C, TC, out, ST)
        c_last = C[AH.shape[0] - 1]
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(ax, h0, c0, Wh, wx, wh, wc, out, AH, S, C, TC, ST)
        return out, out[T - 1].clone(), c_last.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        _consume(ctx)
        ax, h0, c0, Wh, wx, wh, wc, out, AH, S, C, TC, ST = ctx.saved_tensors
        T, B, G = AH.shape
        H = G // 4
        opts = dict(dtype=AH.dtype, device=AH.device)
        nc = _kernel_threads(B)  # the kernel's row chunks accumulate the LN gradients separately
        dwh, dbh, dwx, dbx = (torch.zeros(nc, G, **opts) for _ in range(4))
        dwc, dbc = torch.zeros(nc, H, **opts), torch.zeros(nc, H, **opts)
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        dc = dcT.contiguous().clone()  # -> dL/dc0
        # In place (each step's forward values are dead once its backward ran): the grad of W_h h_{t-1}
        # overwrites AH, that of W_x x_t overwrites ax; S is the kernel's scratch.
        _call(ctx.kern.fn("lnlstm_bwd", AH.dtype), torch.get_num_threads(), nc, T, B, H,
              _panels(ctx.kern, Wh, "backward"), c0, dout.contiguous(), AH, ax, S, C, TC, ST, wh, wx, wc, dh, dc,
              dwh, dbh, dwx, dbx, dwc, dbc, torch.empty(nc, G, **opts))
        dWh = _recurrent_weight_grad(AH, h0, out)
        return (None, None, None, ax, dh, dc, dWh, dwx.sum(0), dbx.sum(0),
                dwh.sum(0), dbh.sum(0), dwc.sum(0), dbc.sum(0))


class _LNGRURecurrenceC(torch.autograd.Function):
    """LN-GRU: the whole recurrence, products included, one C call each way (lngru_fwd / lngru_bwd)."""

    @staticmethod
    def forward(ctx, kern, eps, need_grad, xp_rz, xp_n, h0, Wh, w_rz, b_rz, w_n, b_n):
        T, B, H = xp_n.shape
        xp_rz, xp_n, h0 = xp_rz.contiguous(), xp_n.contiguous(), h0.contiguous()
        w_rz, b_rz, w_n, b_n = (p.contiguous() for p in (w_rz, b_rz, w_n, b_n))
        out, AH, SRZ, N = _gru_buffers(xp_n, need_grad)
        ST = xp_n.new_empty(4, AH.shape[0], B)  # mean/rstd of LN(W_h h) and of LN(U h)
        _call(kern.fn("lngru_fwd", xp_n.dtype), torch.get_num_threads(), T, B, H, int(need_grad), eps,
              _panels(kern, Wh, "forward"), h0, xp_rz, xp_n, w_rz, b_rz, w_n, b_n, AH, SRZ, N, out, ST)
        if need_grad:
            ctx.kern = kern
            ctx.save_for_backward(h0, Wh, w_rz, w_n, b_n, out, AH, SRZ, N, ST)
        return out, out[T - 1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        _consume(ctx)
        h0, Wh, w_rz, w_n, b_n, out, AH, SRZ, N, ST = ctx.saved_tensors
        T, B, G = AH.shape
        H = G // 3
        opts = dict(dtype=AH.dtype, device=AH.device)
        nc = _kernel_threads(B)  # row chunks, each accumulating its own LN gradients
        dw_rz, db_rz = torch.zeros(nc, 2 * H, **opts), torch.zeros(nc, 2 * H, **opts)
        dw_n, db_n = torch.zeros(nc, H, **opts), torch.zeros(nc, H, **opts)
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        # In place, as in the LSTM: grad of xp_rz over SRZ, of xp_n over N, of [W_h; U] h_{t-1} over AH.
        _call(ctx.kern.fn("lngru_bwd", AH.dtype), torch.get_num_threads(), nc, T, B, H,
              _panels(ctx.kern, Wh, "backward"), h0, out, dout.contiguous(), AH, SRZ, N, ST, w_rz, w_n, b_n, dh,
              dw_rz, db_rz, dw_n, db_n, torch.empty(nc, G, **opts))
        dWh = _recurrent_weight_grad(AH, h0, out)
        return None, None, None, SRZ, N, dh, dWh, dw_rz.sum(0), db_rz.sum(0), dw_n.sum(0), db_n.sum(0)


# --------------------------------------------------------------------------------------------------
# BN_t on CPU through the C kernels: per step one torch.mm and ONE C call, the hidden units split over
# the threads (BN's statistics are per column). Training computes each step's batch statistics in the
# kernel (mean, rstd with the configured variance, and the unbiased variance for the running averages,
# updated after the loop as BatchNorm does); eval hands the kernel the running averages' mean/rstd.
# --------------------------------------------------------------------------------------------------
def _bn_eval_stats(mod: BatchNorm, steps: int) -> tuple[Tensor, Tensor]:
    """(mean, var) of each step (steps, G) from the running averages (the last slot past time_steps)."""
    if mod.time_steps:
        return mod._running(steps, None)
    return mod.running_mean.expand(steps, -1), mod.running_var.expand(steps, -1)


def _bn_update_running(mod: BatchNorm, means: Tensor, vars_u: Tensor) -> None:
    """BatchNorm._update_running for the per-step batch means / unbiased variances (T, G) of one sequence."""
    m = mod.momentum
    with torch.no_grad():
        if not mod.time_steps:  # one set of statistics, updated at every step in turn
            for mean, var in zip(means, vars_u):
                mod.running_mean.lerp_(mean, m)
                mod.running_var.lerp_(var, m)
            return
        n = min(len(means), mod.time_steps)  # steps past the last slot do not update it
        mod.running_mean[:n].lerp_(means[:n], m)
        mod.running_var[:n].lerp_(vars_u[:n], m)


def _bn_step_stats(mods: tuple, T: int, B: int, like: Tensor) -> tuple[Tensor, bool, float, float]:
    """The (T, 3, G) statistics buffer of BNs `mods` side by side (mean, rstd, unbiased var), filled from
    the running averages in eval; whether they train; eps; 1/M for the variance (M = B-1 or B)."""
    train, eps = mods[0].training, mods[0].eps
    G = sum(m.weight.shape[0] for m in mods)
    st = like.new_empty(T, 3, G)
    if not train:
        col = 0
        for m in mods:
            mean, var = _bn_eval_stats(m, T)
            g = m.weight.shape[0]
            st[:, 0, col : col + g] = mean
            st[:, 1, col : col + g] = torch.rsqrt(var + eps)
            col += g
    inv_m = 1.0 / (B - 1 if mods[0].unbiased else B) if B > 1 else 0.0
    return st, train, eps, inv_m


class _BNLSTMRecurrenceC(torch.autograd.Function):
    """BN-LSTM with the input side's BN_t(W_x x_t) + b inside the step kernel too (as for the LN-LSTM): it
    takes ax = W_x x (T, B, 4H) and the gate bias, so no (T, B, 4H) pass runs outside the loop. One C call
    each way (bnlstm_fwd / bnlstm_bwd), as for the LN-LSTM."""

    @staticmethod
    def forward(ctx, kern, bns, need_grad, ax, h0, c0, Wh, wx, bx, wh, wc, bc):
        bn_x, bn_h, bn_c = bns
        T, B, G = ax.shape
        H = G // 4
        ax, h0, c0 = ax.contiguous(), h0.contiguous(), c0.contiguous()
        wx, bx, wh, wc, bc = (p.contiguous() for p in (wx, bx, wh, wc, bc))
        out, AH, S, C, TC = _lstm_buffers(ax, need_grad)
        STX, train, eps, inv_m = _bn_step_stats((bn_x,), T, B, ax)
        STH, STC = _bn_step_stats((bn_h,), T, B, ax)[0], _bn_step_stats((bn_c,), T, B, ax)[0]
        _call(kern.fn("bnlstm_fwd", ax.dtype), torch.get_num_threads(), _kernel_threads(H), T, B, H,
              int(need_grad), int(train), eps, inv_m, _panels(kern, Wh, "forward"), h0, c0, ax, wh, wx, bx, wc,
              bc, AH, S, C, TC, out, STH, STX, STC)
        if train:
            for bn, st in zip(bns, (STX, STH, STC)):
                _bn_update_running(bn, st[:, 0], st[:, 2])
        c_last = C[AH.shape[0] - 1]
        if need_grad:
            ctx.kern, ctx.train, ctx.inv_m = kern, train, inv_m
            ctx.save_for_backward(ax, h0, c0, Wh, wx, wh, wc, out, AH, S, C, TC, STH, STX, STC)
        return out, out[T - 1].clone(), c_last.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT, dcT):
        _consume(ctx)
        ax, h0, c0, Wh, wx, wh, wc, out, AH, S, C, TC, STH, STX, STC = ctx.saved_tensors
        T, B, G = AH.shape
        H = G // 4
        opts = dict(dtype=AH.dtype, device=AH.device)
        dwh, dwx, dbx = (torch.zeros(G, **opts) for _ in range(3))
        s1, s2 = torch.zeros(2 * G, **opts), torch.zeros(2 * G, **opts)
        dwc, dbc = torch.zeros(H, **opts), torch.zeros(H, **opts)
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        dc = dcT.contiguous().clone()  # -> dL/dc0
        # in place, step by step, as in the LN-LSTM; S is the kernel's scratch
        _call(ctx.kern.fn("bnlstm_bwd", AH.dtype), torch.get_num_threads(), _kernel_threads(H), T, B, H,
              int(ctx.train), ctx.inv_m, _panels(ctx.kern, Wh, "backward"), c0, dout.contiguous(), AH, ax, S, C,
              TC, STH, STX, STC, wh, wx, wc, dh, dc, dwh, dwx, dbx, dwc, dbc, torch.empty(B, H, **opts), s1, s2)
        dWh = _recurrent_weight_grad(AH, h0, out)
        return None, None, None, ax, dh, dc, dWh, dwx, dbx, dwh, dwc, dbc


class _BNGRURecurrenceC(torch.autograd.Function):
    """BN-GRU: one C call each way (bngru_fwd / bngru_bwd), as the BN-LSTM."""

    @staticmethod
    def forward(ctx, kern, bns, need_grad, xp_rz, xp_n, h0, Wh, w_rz, w_n):
        T, B, H = xp_n.shape
        xp_rz, xp_n, h0 = xp_rz.contiguous(), xp_n.contiguous(), h0.contiguous()
        w = torch.cat([w_rz, w_n])
        out, AH, SRZ, N = _gru_buffers(xp_n, need_grad)
        ST, train, eps, inv_m = _bn_step_stats(bns, T, B, xp_n)
        _call(kern.fn("bngru_fwd", xp_n.dtype), torch.get_num_threads(), _kernel_threads(H), T, B, H, int(need_grad),
              int(train), eps, inv_m, _panels(kern, Wh, "forward"), h0, xp_rz, xp_n, w, AH, SRZ, N, out, ST)
        if train:
            _bn_update_running(bns[0], ST[:, 0, : 2 * H], ST[:, 2, : 2 * H])
            _bn_update_running(bns[1], ST[:, 0, 2 * H :], ST[:, 2, 2 * H :])
        if need_grad:
            ctx.kern, ctx.train, ctx.inv_m = kern, train, inv_m
            ctx.save_for_backward(h0, Wh, w, out, AH, SRZ, N, ST)
        return out, out[T - 1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhT):
        _consume(ctx)
        h0, Wh, w, out, AH, SRZ, N, ST = ctx.saved_tensors
        T, B, G = AH.shape
        H = G // 3
        opts = dict(dtype=AH.dtype, device=AH.device)
        dw, s1, s2 = (torch.zeros(G, **opts) for _ in range(3))
        dh = (dout[T - 1] + dhT).contiguous()  # -> dL/dh0
        # in place, as in the LN-GRU
        _call(ctx.kern.fn("bngru_bwd", AH.dtype), torch.get_num_threads(), _kernel_threads(H), T, B, H, int(ctx.train),
              ctx.inv_m, _panels(ctx.kern, Wh, "backward"), h0, out, dout.contiguous(), AH, SRZ, N, ST, w, dh, dw,
              torch.empty(B, H, **opts), s1, s2)
        dWh = _recurrent_weight_grad(AH, h0, out)
        return None, None, None, SRZ, N, dh, dWh, dw[: 2 * H], dw[2 * H :]


def _c_kernel_for(cell: nn.Module, x: Tensor):
    """The loaded C kernels if this call can run through them (LN or BN cell, CPU, float32/64), else None."""
    kind = normalizer(cell.norm_kind).fast_kernel
    if kind is None or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return None
    lstm = isinstance(cell, LSTMCell)
    if cell.weight_h.bias is not None:
        return None
    if kind == "layer":
        norms = (cell.norm_h, cell.norm_c, cell.norm_x) if lstm else (cell.norm_h_rz, cell.norm_h_n)
        if lstm and (cell.bias is None or cell.weight_x.bias is not None):
            return None
        if any(n.weight is None or n.bias is None for n in norms):
            return None
    else:  # BN_t: gains only on W_h h's normalizers, gain and bias on the cell state's
        norms = (cell.norm_h, cell.norm_x, cell.norm_c) if lstm else (cell.norm_h_rz, cell.norm_h_n)
        if any(n.bias is not None for n in norms[: 2]) or (lstm and norms[2].bias is None):
            return None
        if lstm and (cell.bias is None or cell.weight_x.bias is not None):
            return None
        if any((n.unbiased, n.training) != (norms[0].unbiased, norms[0].training) for n in norms):
            return None
    if any(n.eps != norms[0].eps for n in norms):
        return None
    params = [cell.weight_h.weight] + [p for n in norms for p in (n.weight, n.bias) if p is not None]
    if any(p.dtype != x.dtype or p.device.type != "cpu" for p in params):
        return None
    from lnbench.nn import ckernel

    return ckernel.kernel()


# --------------------------------------------------------------------------------------------------
class FastRecurrentLayer(nn.Module):
    """`RecurrentLayer(cell)` with the recurrence in one autograd.Function; `cell` owns every parameter."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell

    def forward(self, x: Tensor, state: Optional[State] = None) -> tuple[Tensor, State]:
        cell = self.cell
        if x.shape[0] == 0:  # nothing to run: the reference's own answer
            return RecurrentLayer(cell)(x, state)
        T, B = x.shape[:2]
        Wh = cell.weight_h.weight
        kern = _c_kernel_for(cell, x)
        if kern is not None:
            return self._forward_c(kern, x, state)
        if isinstance(cell, LSTMCell):
            xp = self._project_lstm(x)
            h0, c0 = cell.initial_state(B, xp) if state is None else state
            norms = (_Norm(cell.norm_h, T), _Norm(cell.norm_c, T))
            args = (xp, h0, c0, Wh, *_wb(cell.norm_h), *_wb(cell.norm_c))
            fn = _LSTMRecurrence
        else:
            xp_rz, xp_n = self._project_gru(x)
            (h0,) = cell.initial_state(B, xp_n) if state is None else state
            norms = (_Norm(cell.norm_h_rz, T), _Norm(cell.norm_h_n, T))
            args = (xp_rz, xp_n, h0, Wh, *_wb(cell.norm_h_rz), *_wb(cell.norm_h_n))
            fn = _GRURecurrence
        need_grad = torch.is_grad_enabled() and any(a is not None and a.requires_grad for a in args)
        out, *final = fn.apply(norms, need_grad, *args)
        return out, tuple(final)

    def _forward_c(self, kern, x: Tensor, state: Optional[State]) -> tuple[Tensor, State]:
        cell = self.cell
        B = x.shape[1]
        Wh = cell.weight_h.weight
        if normalizer(cell.norm_kind).fast_kernel == "batch":
            if B < 2 and cell.weight_h.training:  # BatchNorm's own error for a batch of one
                apply_norm(cell.norm_h if isinstance(cell, LSTMCell) else cell.norm_h_n, x.new_zeros(1, B, cell.hidden_size))
            if isinstance(cell, LSTMCell):
                ax = _linear(x, cell.weight_x.weight, cell.weight_x.bias)  # BN_t(W_x x) + b runs inside the step kernel
                h0, c0 = cell.initial_state(B, ax) if state is None else state
                args = (ax, h0, c0, Wh, cell.norm_x.weight, cell.bias, cell.norm_h.weight, cell.norm_c.weight,
                        cell.norm_c.bias)
                fn, bns = _BNLSTMRecurrenceC, (cell.norm_x, cell.norm_h, cell.norm_c)
            else:
                xp_rz, xp_n = self._project_gru(x)
                (h0,) = cell.initial_state(B, xp_n) if state is None else state
                args = (xp_rz, xp_n, h0, Wh, cell.norm_h_rz.weight, cell.norm_h_n.weight)
                fn, bns = _BNGRURecurrenceC, (cell.norm_h_rz, cell.norm_h_n)
            need_grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
            out, *final = fn.apply(kern, bns, need_grad, *args)
            return out, tuple(final)
        if isinstance(cell, LSTMCell):
            ax = _linear(x, cell.weight_x.weight, cell.weight_x.bias)  # LN(W_x x) + b runs inside the step kernel
            h0, c0 = cell.initial_state(B, ax) if state is None else state
            ln = cell.norm_x
            args = (ax, h0, c0, Wh, ln.weight, ln.bias + cell.bias, *_wb(cell.norm_h), *_wb(cell.norm_c))
            fn, eps = _LNLSTMRecurrenceC, cell.norm_h.eps
        else:
            xp_rz, xp_n = self._project_gru(x)
            (h0,) = cell.initial_state(B, xp_n) if state is None else state
            args = (xp_rz, xp_n, h0, Wh, *_wb(cell.norm_h_rz), *_wb(cell.norm_h_n))
            fn, eps = _LNGRURecurrenceC, cell.norm_h_rz.eps
        need_grad = torch.is_grad_enabled() and any(a.requires_grad for a in args)
        out, *final = fn.apply(kern, eps, need_grad, *args)
        return out, tuple(final)

    def _project_lstm(self, x: Tensor) -> Tensor:
        """cell.project_input(x); for LN the gate bias b is folded into LN's own bias (one pass less)."""
        cell = self.cell
        if normalizer(cell.norm_kind).fast_kernel != "layer":
            a = _normalize_steps(cell.norm_x, _linear(x, cell.weight_x.weight, cell.weight_x.bias))
            return a + cell.bias if cell.bias is not None else a
        ln = cell.norm_x
        return F.layer_norm(_linear(x, cell.weight_x.weight, cell.weight_x.bias), ln.normalized_shape, ln.weight, ln.bias + cell.bias, ln.eps)

    def _project_gru(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """cell.project_input(x) as its two parts [W_x x; W x], with no slicing or concatenation."""
        cell = self.cell
        H = cell.hidden_size
        W = cell.weight_x.weight
        b = cell.weight_x.bias
        parts = []
        for rows, norm in ((slice(0, 2 * H), cell.norm_x_rz), (slice(2 * H, 3 * H), cell.norm_x_n)):
            a = _linear(x, W[rows], None if b is None else b[rows])
            a = _normalize_steps(norm, a)
            parts.append(a if cell.bias is None else a + cell.bias[rows])
        return parts[0], parts[1]


def _wb(norm: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
    return norm.weight, norm.bias


def make_fast_layer(cell: nn.Module) -> Optional[nn.Module]:
    """A fast drop-in for `RecurrentLayer(cell)` sharing `cell`'s parameters, or None if unsupported."""
    if not isinstance(cell, (LSTMCell, GRUCell)):
        return None
    if normalizer(cell.norm_kind).fast_kernel is None:  # only the kinds its kernels compute exactly
        return None
    if hasattr(cell.weight_h, "parametrizations"):
        return None
    return FastRecurrentLayer(cell)
