"""The Triton kernels of lnbench's LN-LSTM (lnbench.nn.fast.triton_lstm says what they compute and how they are
called), in a module of their own: importing triton costs a second, so only a layer that launches them imports it.

Each program owns one row of the batch. Only long-stable `tl` calls (load, store, arange, sum, sigmoid, sqrt, where,
program_id): they run on the GPU machine's Triton 3.6 and on CI's 3.9 under TRITON_INTERPRET=1.
"""

import triton
import triton.language as tl


@triton.jit
def ln_lstm_fwd_step(AH, XP, CP, WH, BH, WC, BC, S, C, TC, OUT, MH, RH, MC, RC, H, eps_h, eps_c, BLOCK: tl.constexpr):
    """One step for one row: a = LN_h(AH) + XP; [i, f, g, o] = sig, sig, tanh, sig (a); c = f CP + i g;
    h = o tanh(LN_c(c)). Writes the gates S (4H), c, tanh(LN_c(c)), h and both normalizers' mean and rstd."""
    row = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    m = k < H
    r4 = row * 4 * H
    a0 = tl.load(AH + r4 + k, mask=m, other=0.0)
    a1 = tl.load(AH + r4 + H + k, mask=m, other=0.0)
    a2 = tl.load(AH + r4 + 2 * H + k, mask=m, other=0.0)
    a3 = tl.load(AH + r4 + 3 * H + k, mask=m, other=0.0)
    n4 = 4.0 * H
    mean = (tl.sum(a0, axis=0) + tl.sum(a1, axis=0) + tl.sum(a2, axis=0) + tl.sum(a3, axis=0)) / n4
    d0 = tl.where(m, a0 - mean, 0.0)
    d1 = tl.where(m, a1 - mean, 0.0)
    d2 = tl.where(m, a2 - mean, 0.0)
    d3 = tl.where(m, a3 - mean, 0.0)
    var = tl.sum(d0 * d0, axis=0) + tl.sum(d1 * d1, axis=0) + tl.sum(d2 * d2, axis=0) + tl.sum(d3 * d3, axis=0)
    rstd = 1.0 / tl.sqrt(var / n4 + eps_h)
    p0 = d0 * rstd * tl.load(WH + k, mask=m, other=0.0) + tl.load(BH + k, mask=m, other=0.0)
    p1 = d1 * rstd * tl.load(WH + H + k, mask=m, other=0.0) + tl.load(BH + H + k, mask=m, other=0.0)
    p2 = d2 * rstd * tl.load(WH + 2 * H + k, mask=m, other=0.0) + tl.load(BH + 2 * H + k, mask=m, other=0.0)
    p3 = d3 * rstd * tl.load(WH + 3 * H + k, mask=m, other=0.0) + tl.load(BH + 3 * H + k, mask=m, other=0.0)
    i = tl.sigmoid(p0 + tl.load(XP + r4 + k, mask=m, other=0.0))
    f = tl.sigmoid(p1 + tl.load(XP + r4 + H + k, mask=m, other=0.0))
    g = 2.0 * tl.sigmoid(2.0 * (p2 + tl.load(XP + r4 + 2 * H + k, mask=m, other=0.0))) - 1.0
    o = tl.sigmoid(p3 + tl.load(XP + r4 + 3 * H + k, mask=m, other=0.0))
    r1 = row * H
    c = f * tl.load(CP + r1 + k, mask=m, other=0.0) + i * g
    mean_c = tl.sum(tl.where(m, c, 0.0), axis=0) / H
    dc = tl.where(m, c - mean_c, 0.0)
    rstd_c = 1.0 / tl.sqrt(tl.sum(dc * dc, axis=0) / H + eps_c)
    hc = dc * rstd_c * tl.load(WC + k, mask=m, other=0.0) + tl.load(BC + k, mask=m, other=0.0)
    tc = 2.0 * tl.sigmoid(2.0 * hc) - 1.0
    tl.store(S + r4 + k, i, mask=m)
    tl.store(S + r4 + H + k, f, mask=m)
    tl.store(S + r4 + 2 * H + k, g, mask=m)
    tl.store(S + r4 + 3 * H + k, o, mask=m)
    tl.store(C + r1 + k, c, mask=m)
    tl.store(TC + r1 + k, tc, mask=m)
    tl.store(OUT + r1 + k, o * tc, mask=m)
    tl.store(MH + row, mean)
    tl.store(RH + row, rstd)
    tl.store(MC + row, mean_c)
    tl.store(RC + row, rstd_c)


@triton.jit
def ln_lstm_bwd_step(DH, DCN, S, C, CP, TC, AH, MH, RH, MC, RC, WH, WC, DA, DAH, DNC, H, BLOCK: tl.constexpr):
    """One step backward for one row, from h_t's gradient DH and c_t's from the later steps DCN: the gate
    pre-activations' gradient DA (= the input side's), W_h h_{t-1}'s DAH (through LN_h), LN_c's output's DNC,
    and c_{t-1}'s from this step, written over DCN."""
    row = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    m = k < H
    r4 = row * 4 * H
    r1 = row * H
    dh = tl.load(DH + r1 + k, mask=m, other=0.0)
    i = tl.load(S + r4 + k, mask=m, other=0.0)
    f = tl.load(S + r4 + H + k, mask=m, other=0.0)
    g = tl.load(S + r4 + 2 * H + k, mask=m, other=0.0)
    o = tl.load(S + r4 + 3 * H + k, mask=m, other=0.0)
    tc = tl.load(TC + r1 + k, mask=m, other=0.0)
    dhc = dh * o * (1.0 - tc * tc)
    tl.store(DNC + r1 + k, dhc, mask=m)
    # LN_c backward: rstd (gy - mean(gy) - xhat mean(gy xhat)), gy = dhc * gain
    xc = tl.where(m, (tl.load(C + r1 + k, mask=m, other=0.0) - tl.load(MC + row)) * tl.load(RC + row), 0.0)
    gy = dhc * tl.load(WC + k, mask=m, other=0.0)
    dc = tl.load(RC + row) * (gy - tl.sum(gy, axis=0) / H - xc * (tl.sum(gy * xc, axis=0) / H))
    dc = dc + tl.load(DCN + r1 + k, mask=m, other=0.0)
    da0 = dc * g * i * (1.0 - i)
    da1 = dc * tl.load(CP + r1 + k, mask=m, other=0.0) * f * (1.0 - f)
    da2 = dc * i * (1.0 - g * g)
    da3 = dh * tc * o * (1.0 - o)
    tl.store(DA + r4 + k, da0, mask=m)
    tl.store(DA + r4 + H + k, da1, mask=m)
    tl.store(DA + r4 + 2 * H + k, da2, mask=m)
    tl.store(DA + r4 + 3 * H + k, da3, mask=m)
    tl.store(DCN + r1 + k, dc * f, mask=m)
    # LN_h backward over the 4H pre-activations
    mh, rh = tl.load(MH + row), tl.load(RH + row)
    x0 = tl.where(m, (tl.load(AH + r4 + k, mask=m, other=0.0) - mh) * rh, 0.0)
    x1 = tl.where(m, (tl.load(AH + r4 + H + k, mask=m, other=0.0) - mh) * rh, 0.0)
    x2 = tl.where(m, (tl.load(AH + r4 + 2 * H + k, mask=m, other=0.0) - mh) * rh, 0.0)
    x3 = tl.where(m, (tl.load(AH + r4 + 3 * H + k, mask=m, other=0.0) - mh) * rh, 0.0)
    g0 = da0 * tl.load(WH + k, mask=m, other=0.0)
    g1 = da1 * tl.load(WH + H + k, mask=m, other=0.0)
    g2 = da2 * tl.load(WH + 2 * H + k, mask=m, other=0.0)
    g3 = da3 * tl.load(WH + 3 * H + k, mask=m, other=0.0)
    n4 = 4.0 * H
    mg = (tl.sum(g0, axis=0) + tl.sum(g1, axis=0) + tl.sum(g2, axis=0) + tl.sum(g3, axis=0)) / n4
    mgx = (tl.sum(g0 * x0, axis=0) + tl.sum(g1 * x1, axis=0) + tl.sum(g2 * x2, axis=0) + tl.sum(g3 * x3, axis=0)) / n4
    tl.store(DAH + r4 + k, rh * (g0 - mg - x0 * mgx), mask=m)
    tl.store(DAH + r4 + H + k, rh * (g1 - mg - x1 * mgx), mask=m)
    tl.store(DAH + r4 + 2 * H + k, rh * (g2 - mg - x2 * mgx), mask=m)
    tl.store(DAH + r4 + 3 * H + k, rh * (g3 - mg - x3 * mgx), mask=m)


def launch_config(H: int) -> dict:
    block = triton.next_power_of_2(H)
    return {"BLOCK": block, "num_warps": 4 if block <= 256 else 8}
