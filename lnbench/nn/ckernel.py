"""Plain-C kernels for the LN / BN / plain LSTM and GRU recurrences, loaded with ctypes.

`lnbench.nn.fast_rnn` (and `lnbench.nn.fused` for the un-normalized cells) hands each recurrence to ONE
C call per direction: `*_fwd` runs all T steps, per step the recurrent product h_{t-1} W_h^T
(`gemm_panels`, W_h packed once per call by `pack_panels`) and then everything else of the step -- both
layer norms (or BN_t's batch statistics), the gate nonlinearities, the state update -- instead of ~25
small aten ops and a return to Python; for the LSTM that includes the input side's LN(W_x x_t) + b.
`*_bwd` runs the steps backwards: the whole pointwise/LN chain rule with the LN gain/bias gradients
accumulated in place, then dA_t W_h. Each step's work is shared out over the threads of one OpenMP
region that spans the sequence (`nt`, chosen by the caller): the product by column panels, LN's rows
in `nc` chunks whose per-chunk LN gradient partials make the result independent of scheduling, BN_t's
hidden units in `nc` chunks. The C is plain C99 (no torch headers), so it compiles in about a second;
it works on raw pointers (`tensor.data_ptr()`) of contiguous CPU tensors, float32 (`*_f32`) and float64
(`*_f64`): the same kernel body is compiled twice with REAL = float / double.

Build: at first use, `kernel()` compiles the source with the system C compiler (`$CC`, else cc, else
gcc) into the cache directory (`$LNBENCH_CACHE`, else ~/.cache/lnbench), the file name keyed by a hash
of the source, the flags and the machine (arch and CPU flags, since it is built with -march=native);
it compiles to a temporary name and renames, so concurrent runs never load half a file. The compiler
runs in a background process: the first call waits for it up to `WAIT_S` seconds, and if it is not done
by then callers get None (the eager torch path) until it is. No compiler, a failed compile or a failed
load: one warning, and None from then on. `LNBENCH_NO_CKERNEL=1` always gives None.

Vector math: gcc vectorizes the exp calls (sigmoid = 1 / (1 + exp(-x)), tanh = 2 sigmoid(2x) - 1)
through glibc's libmvec, declared `omp declare simd` here as <math.h> itself does under -ffast-math,
without the rest of -ffast-math (no reassociation beyond the `omp simd` reductions). libmvec's exp is
accurate to a few ulp in float32 and float64; the float64 exactness tests (1e-12 vs the reference) run
through these kernels. Where that build fails (no libmvec, no OpenMP, another compiler or arch), a
portable single-threaded build with scalar libm calls is tried next (correct, much slower math).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Optional

# Longest a run waits for the compiler on first use (it takes ~0.5-1 s; `make setup` builds it ahead).
# Generous on purpose: a run that took its first steps on the eager path and the rest in C would differ in
# the last bits from one that found the kernel cached, and same-seed runs are meant to be bit-identical.
WAIT_S = 30.0

_PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif

/* Memory a thread reads or writes in its next phase, fetched into its caches while it computes a product
   (gemm_panels_ahead): up to AHEAD_MAX byte ranges, taken front to back one 64-byte line at a time. */
#define AHEAD_MAX 8
typedef struct { const char *p[AHEAD_MAX]; int64_t n[AHEAD_MAX]; int cnt, cur; } ahead_t;

static inline void ahead_add(ahead_t *q, const void *p, int64_t bytes)
{
    if (q->cnt < AHEAD_MAX && bytes > 0) { q->p[q->cnt] = (const char *)p; q->n[q->cnt] = bytes; ++q->cnt; }
}

/* The share [*i0, *i1) of n iterations that this thread gets from `omp for schedule(static)` (libgomp's rule). */
static inline void static_share(int64_t n, int64_t *i0, int64_t *i1)
{
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t q = n / nt, r = n % nt;
    if (id < r) { r = 0; ++q; }
    *i0 = q * id + r;
    *i1 = *i0 + q;
}

/* The next contiguous run of at most `lines` lines to fetch (its length in *got), or 0 when all are taken. */
static inline const char *ahead_take(ahead_t *q, int64_t lines, int64_t *got)
{
    while (q->cur < q->cnt && q->n[q->cur] <= 0) ++q->cur;
    if (q->cur >= q->cnt) { *got = 0; return 0; }
    const int64_t have = (q->n[q->cur] + 63) / 64, n = have < lines ? have : lines;
    const char *r = q->p[q->cur];
    q->p[q->cur] += n * 64;
    q->n[q->cur] -= n * 64;
    *got = n;
    return r;
}

#ifdef LNB_VECMATH
/* Vector variants from glibc's libmvec, as <bits/math-vector.h> declares them under -ffast-math. */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);
#endif
"""

# The kernel body, compiled once per REAL type. SUF(name) appends the type suffix.
_BODY = r"""
static inline REAL SUF(sigm)(REAL x) { return (REAL)1 / ((REAL)1 + EXP(-x)); }
/* tanh(x) = 2 sigmoid(2x) - 1: one vectorized exp (libmvec's tanh is slower); absolute error a few ulp of 1. */
static inline REAL SUF(tanh_)(REAL x) { return (REAL)2 / ((REAL)1 + EXP((REAL)-2 * x)) - (REAL)1; }

/* mean and 1/sqrt(var + eps) of x[0..n) (biased variance, two passes), as torch's layer_norm. */
static inline void SUF(ln_stats)(const REAL *x, int64_t n, REAL eps, REAL *mean, REAL *rstd)
{
    REAL s = 0, v = 0;
#pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < n; ++j) s += x[j];
    const REAL m = s / (REAL)n;
#pragma omp simd reduction(+:v)
    for (int64_t j = 0; j < n; ++j) { const REAL d = x[j] - m; v += d * d; }
    *mean = m;
    *rstd = (REAL)1 / SQRT(v / (REAL)n + eps);
}

/* LN backward for one row, first pass: accumulates dw += dy xhat, db += dy (xhat = (x - mean) rstd);
   writes g = dy w into g[0..n); returns s1 = sum(g), s2 = sum(g xhat). */
static inline void SUF(ln_bwd_start)(const REAL *x, const REAL *dy, int64_t n, REAL mean, REAL rstd,
                                     const REAL *w, REAL *dw, REAL *db, REAL *g, REAL *s1o, REAL *s2o)
{
    REAL s1 = 0, s2 = 0;
#pragma omp simd reduction(+:s1, s2)
    for (int64_t j = 0; j < n; ++j) {
        const REAL xh = (x[j] - mean) * rstd, d = dy[j], gj = d * w[j];
        dw[j] += d * xh;
        db[j] += d;
        g[j] = gj;
        s1 += gj;
        s2 += gj * xh;
    }
    *s1o = s1;
    *s2o = s2;
}

/* LN backward for one row, second pass: dx = rstd (g - mean(g) - xhat mean(g xhat)).
   dx may alias x (each x[j] is read before dx[j] is written), not g. */
static inline void SUF(ln_bwd_finish)(const REAL *x, const REAL *g, int64_t n, REAL mean, REAL rstd,
                                      REAL s1, REAL s2, REAL *dx)
{
    const REAL a = s1 / (REAL)n, c = s2 / (REAL)n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[j] = rstd * (g[j] - a - (x[j] - mean) * rstd * c);
}

/* ---- The recurrent product h_{t-1} W^T of every step, in C ----------------------------------------
   Why not a BLAS: called from Python once per step, the product and the step kernel paid a return to
   Python, torch's dispatch and a ctypes call per step, which at small batch cost more than the
   arithmetic (ln_lstm 2.6x torch's nn.LSTM at B=4). The whole sequence now runs in C, and no BLAS is
   callable from here: torch's bundled MKL exports sgemm_ but ran 2-4x slower than this on an AMD CPU
   (B=4 K=256 N=1024: 57 vs 14 us, 1 thread), and its oneDNN exports no C API.
   The right-hand matrix is packed once per call into panels of PANEL columns (zero-padded), each K x PANEL
   row-major, so the inner loop reads one contiguous vector row per k; the output is computed MROWS rows
   x one panel at a time in registers (8 x 2 AVX-512 vectors). */
#define MROWS 8
#define AHEAD_K 4 /* k-steps of a register tile per line fetched ahead */

/* dst = ceil(N / PANEL) panels of the K x N matrix whose (k, n) element is src[k rk + n rn]. */
void SUF(pack_panels)(int64_t K, int64_t N, const REAL *src, int64_t rk, int64_t rn, REAL *dst)
{
    for (int64_t p = 0; p * PANEL < N; ++p)
        for (int64_t k = 0; k < K; ++k) {
            REAL *d = dst + (p * K + k) * PANEL;
            for (int64_t j = 0; j < PANEL; ++j) {
                const int64_t n = p * PANEL + j;
                d[j] = n < N ? src[k * rk + n * rn] : (REAL)0;
            }
        }
}

/* acc = a w over k in [k0, k1) for one block of m <= MROWS rows and one panel of nn <= PANEL columns, with
   a[r][k] = x[r xr + k xk] and w[k][j] = w[k wk + j]: the inner loop of gemm_panels and gemm_tn. */
static inline void SUF(block)(int64_t m, int64_t nn, int64_t k0, int64_t k1, const REAL *x, int64_t xr, int64_t xk,
                              const REAL *w, int64_t wk, REAL acc[MROWS][PANEL])
{
    for (int64_t r = 0; r < MROWS; ++r)
        for (int64_t j = 0; j < PANEL; ++j) acc[r][j] = 0;
    if (m == MROWS && nn == PANEL) { /* constant trip counts: the accumulators stay in registers */
        for (int64_t k = k0; k < k1; ++k)
            for (int64_t r = 0; r < MROWS; ++r) {
                const REAL a = x[r * xr + k * xk];
#pragma omp simd
                for (int64_t j = 0; j < PANEL; ++j) acc[r][j] += a * w[k * wk + j];
            }
    } else {
        for (int64_t k = k0; k < k1; ++k)
            for (int64_t r = 0; r < m; ++r) {
                const REAL a = x[r * xr + k * xk];
#pragma omp simd
                for (int64_t j = 0; j < nn; ++j) acc[r][j] += a * w[k * wk + j];
            }
    }
}

/* block for a whole tile (MROWS rows, one full panel) over k in [0, K), fetching the npf lines from pf on,
   one every AHEAD_K steps of k. A separate kernel: with the fetches folded into block, gcc compiled its
   part-tile path (batch 4) 4-7% slower. */
static inline void SUF(block_ahead)(int64_t K, const REAL *x, int64_t xr, const REAL *w, REAL acc[MROWS][PANEL],
                                    const char *pf, int64_t npf)
{
    for (int64_t r = 0; r < MROWS; ++r)
        for (int64_t j = 0; j < PANEL; ++j) acc[r][j] = 0;
    int64_t k = 0;
    for (; npf > 0 && k + AHEAD_K <= K; k += AHEAD_K, --npf, pf += 64) {
        __builtin_prefetch(pf, 1, 3);
        for (int64_t kk = k; kk < k + AHEAD_K; ++kk)
            for (int64_t r = 0; r < MROWS; ++r) {
                const REAL a = x[r * xr + kk];
#pragma omp simd
                for (int64_t j = 0; j < PANEL; ++j) acc[r][j] += a * w[kk * PANEL + j];
            }
    }
    for (; k < K; ++k)
        for (int64_t r = 0; r < MROWS; ++r) {
            const REAL a = x[r * xr + k];
#pragma omp simd
            for (int64_t j = 0; j < PANEL; ++j) acc[r][j] += a * w[k * PANEL + j];
        }
}

/* y (B, N) = x (B, K) times the packed matrix, + add (B, N) and + bias (N) unless NULL (y may alias add). The panels are
   shared out over the threads of the caller's parallel region; each element is one thread's sum in k
   order, so the result does not depend on the number of threads. */
static void SUF(gemm_panels)(int64_t B, int64_t K, int64_t N, const REAL *x, const REAL *Wp, const REAL *add,
                             const REAL *bias, REAL *y)
{
    const int64_t P = (N + PANEL - 1) / PANEL;
#pragma omp for schedule(static)
    for (int64_t p = 0; p < P; ++p) {
        const REAL *w = Wp + p * K * PANEL;
        const int64_t n0 = p * PANEL, nn = N - n0 < PANEL ? N - n0 : PANEL;
        for (int64_t i = 0; i < B; i += MROWS) {
            const int64_t m = B - i < MROWS ? B - i : MROWS;
            REAL acc[MROWS][PANEL];
            SUF(block)(m, PANEL, 0, K, x + i * K, K, 1, w, PANEL, acc); /* a whole panel: the last is zero-padded */
            for (int64_t r = 0; r < m; ++r) {
                REAL *yr = y + (i + r) * N + n0;
                const REAL *ar = add ? add + (i + r) * N + n0 : 0, *br = bias ? bias + n0 : 0;
                for (int64_t j = 0; j < nn; ++j) yr[j] = (ar ? ar[j] + acc[r][j] : acc[r][j]) + (br ? br[j] : (REAL)0);
            }
        }
    }
}

/* gemm_panels, and meanwhile this thread fetches q's lines (what it reads next; see ahead_t), spread over
   its whole tiles. Why: at T=100 B=32 H=256 the LN-LSTM's saved steps (39 MB) live in memory, not in
   cache, and the pointwise phase between two products waited for them, while the products, bound by
   arithmetic, left memory idle. A separate function: folded into gemm_panels, the fetching made gcc
   compile its batch-4 path slower (lstm at B=4: 1.07x nn.LSTM before, 1.17x after). Its tile loop and
   store repeat gemm_panels' on purpose: with the store shared as an inline function, gemm_panels'
   batch-4 product took 1.16x as long (the kernels alone, 10 alternations). */
static void SUF(gemm_panels_ahead)(int64_t B, int64_t K, int64_t N, const REAL *x, const REAL *Wp, const REAL *add,
                                   REAL *y, ahead_t *q)
{
    if (B < MROWS) { /* no whole tile to fetch in: gemm_panels' own part-tile path is the faster one */
        SUF(gemm_panels)(B, K, N, x, Wp, add, 0, y);
        return;
    }
    const int64_t P = (N + PANEL - 1) / PANEL, nt = omp_get_num_threads();
    const int64_t tiles = (P + nt - 1) / nt * (B / MROWS); /* whole tiles per thread, at most */
    int64_t lines = 0;
    for (int i = q->cur; i < q->cnt; ++i) lines += (q->n[i] + 63) / 64;
    const int64_t per_tile = (lines + tiles - 1) / tiles;
#pragma omp for schedule(static)
    for (int64_t p = 0; p < P; ++p) {
        const REAL *w = Wp + p * K * PANEL;
        const int64_t n0 = p * PANEL, nn = N - n0 < PANEL ? N - n0 : PANEL;
        for (int64_t i = 0; i < B; i += MROWS) {
            const int64_t m = B - i < MROWS ? B - i : MROWS;
            REAL acc[MROWS][PANEL];
            int64_t npf = 0;
            const char *pf = m == MROWS ? ahead_take(q, per_tile, &npf) : 0;
            if (npf)
                SUF(block_ahead)(K, x + i * K, K, w, acc, pf, npf);
            else
                SUF(block)(m, PANEL, 0, K, x + i * K, K, 1, w, PANEL, acc);
            for (int64_t r = 0; r < m; ++r) {
                REAL *yr = y + (i + r) * N + n0;
                const REAL *ar = add ? add + (i + r) * N + n0 : 0;
                for (int64_t j = 0; j < nn; ++j) yr[j] = ar ? ar[j] + acc[r][j] : acc[r][j];
            }
        }
    }
}

/* C (M, N) = A^T B, with A (K, M) and B (K, N) row-major (leading dimensions lda, ldb): the weight
   gradients sum_t dA_t^T h_{t-1} and dY^T X over all steps, K = T*B rows. B's first kh rows are read
   from B0 and the rest from B, so that [h0; h_1 .. h_{T-1}] needs no copy (kh = 0: B alone). Why here:
   oneDNN's linear wants A^T contiguous, and torch's copy of the transposed (T*B, 4H) gradient took as
   long as the product itself (6.9 ms at T=100 B=32 H=256, 2 threads); MKL's own transposed product was
   slower still on this CPU.
   K runs in blocks of KB rows, and both operands are packed per block: the block's rows of B into
   PANEL-wide panels (shared by the threads), each thread's MC columns of A into MROWS-wide tiles. Read
   in place, a tile's MROWS values in one row of A lie lda elements from the next row's and a panel's
   rows ldb apart: at those 1-4 KB strides every access maps to the same few L1 sets (packing: 0.87x
   the time at K=3200 M=1024 N=256, 0.44x at K=78400 M=400 N=100; 2 threads). The rows of C are shared
   out over the threads in blocks of at most MC; each element is one thread's sum over each K block in k
   order, so the result does not depend on the number of threads.
   work: ceil(N / PANEL) PANEL KB + nt MC KB elements (KB, MC: GEMM_KB, GEMM_MC of the Python side). */
void SUF(gemm_tn)(int64_t nt, int64_t K, int64_t M, int64_t N, const REAL *A, int64_t lda, const REAL *B0,
                  int64_t kh, const REAL *B, int64_t ldb, REAL *C, REAL *work)
{
    const int64_t P = (N + PANEL - 1) / PANEL, share = ((M + nt - 1) / nt + MROWS - 1) / MROWS * MROWS;
    const int64_t mb = share < MC ? share : MC, NB = (M + mb - 1) / mb;
    REAL *bp = work;
#pragma omp parallel num_threads(nt) if(nt > 1)
    {
        REAL *ap = work + P * PANEL * KB + (int64_t)omp_get_thread_num() * MC * KB;
        int64_t ib0, ib1; /* this thread's blocks of A's columns (the omp for below) */
        static_share(NB, &ib0, &ib1);
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
            const int64_t kc = K - k0 < KB ? K - k0 : KB;
#pragma omp for schedule(static)
            for (int64_t p = 0; p < P; ++p) {
                const int64_t n0 = p * PANEL, nn = N - n0 < PANEL ? N - n0 : PANEL;
                for (int64_t k = 0; k < kc; ++k) {
                    const REAL *b = k0 + k < kh ? B0 + (k0 + k) * ldb + n0 : B + (k0 + k - kh) * ldb + n0;
                    REAL *d = bp + (p * KB + k) * PANEL;
                    for (int64_t j = 0; j < PANEL; ++j) d[j] = j < nn ? b[j] : (REAL)0;
                }
            } /* (the barrier: every panel is packed) */
#pragma omp for schedule(static)
            for (int64_t ib = 0; ib < NB; ++ib) {
                const int64_t i0 = ib * mb, mc = M - i0 < mb ? M - i0 : mb;
                /* Two tiles at a time: each row of A gives 2 MROWS values (a 64-byte line in float32) and the
                   writes run along two tiles. Packed one row at a time across all tiles, the writes went to 16
                   places 8 KB apart, which share one L1 set (this: 0.86x the time at K=3200 M=1024 N=256,
                   0.69x at N=64; 2 threads; the same result bit for bit). */
                int64_t i = 0;
                for (; i + 2 * MROWS <= mc; i += 2 * MROWS) {
                    REAL *d0 = ap + i * kc, *d1 = ap + (i + MROWS) * kc;
                    for (int64_t k = 0; k < kc; ++k) {
                        const REAL *a = A + (k0 + k) * lda + i0 + i;
#pragma omp simd
                        for (int64_t r = 0; r < MROWS; ++r) {
                            d0[k * MROWS + r] = a[r];
                            d1[k * MROWS + r] = a[MROWS + r];
                        }
                    }
                }
                for (; i < mc; i += MROWS)
                    for (int64_t k = 0; k < kc; ++k) {
                        const REAL *a = A + (k0 + k) * lda + i0;
                        for (int64_t r = 0; r < MROWS; ++r) ap[i * kc + k * MROWS + r] = i + r < mc ? a[i + r] : (REAL)0;
                    }
                /* This thread's next block of A (its next ib, else its first at the next K block) is fetched
                   a few rows per tile while this one computes: packing had waited on memory (this: 0.92x the
                   time at K=3200 M=1024 N=256, 0.89x at N=64; 2 threads). */
                int64_t k0n = k0, ibn = ib + 1, fetched = 0;
                if (ibn >= ib1) {
                    ibn = ib0;
                    k0n = k0 + KB;
                }
                const int64_t kcn = k0n >= K ? 0 : (K - k0n < KB ? K - k0n : KB), i0n = ibn * mb;
                const int64_t row_bytes = (M - i0n < mb ? M - i0n : mb) * (int64_t)sizeof(REAL);
                const int64_t tiles = P * ((mc + MROWS - 1) / MROWS), rows_per_tile = (kcn + tiles - 1) / tiles;
                for (int64_t p = 0; p < P; ++p) {
                    const int64_t n0 = p * PANEL, nn = N - n0 < PANEL ? N - n0 : PANEL;
                    for (int64_t i = 0; i < mc; i += MROWS) {
                        const int64_t m = mc - i < MROWS ? mc - i : MROWS;
                        REAL acc[MROWS][PANEL];
                        for (int64_t q = 0; q < rows_per_tile && fetched < kcn; ++q, ++fetched) {
                            const char *row = (const char *)(A + (k0n + fetched) * lda + i0n);
                            for (int64_t l = 0; l < row_bytes; l += 64) __builtin_prefetch(row + l, 0, 3);
                        }
                        SUF(block)(MROWS, PANEL, 0, kc, ap + i * kc, 1, MROWS, bp + p * KB * PANEL, PANEL, acc);
                        for (int64_t r = 0; r < m; ++r) {
                            REAL *c = C + (i0 + i + r) * N + n0;
                            for (int64_t j = 0; j < nn; ++j) c[j] = k0 ? c[j] + acc[r][j] : acc[r][j];
                        }
                    }
                }
            } /* (the barrier: the panels can be packed again) */
        }
    }
}

/* LN-LSTM forward, one time step, rows b = 0..B-1 (paper eqs. 20-22; gate order i, f, g, o):
     a   = LN(ah; wh, bh) + LN(ax; wx, bx)    ah = W_h h_{t-1}, ax = W_x x_t, bx = b2 + the gate bias b
     s   = [sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)]
     c   = sigmoid(f) c_prev + sigmoid(i) tanh(g)
     tc  = tanh(LN(c; wc, bc)),  h = sigmoid(o) tc
   Writes s (B, 4H), c, tc, h (B, H) and the three LNs' mean/rstd (B). c may alias c_prev.
   The rows are shared out over the threads of the caller's parallel region. */
static void SUF(lnlstm_step)(int64_t B, int64_t H, REAL eps,
                             const REAL *ah, const REAL *ax, const REAL *wh, const REAL *bh, const REAL *wx,
                             const REAL *bx, const REAL *wc, const REAL *bc, const REAL *c_prev,
                             REAL *s, REAL *c, REAL *tc, REAL *h, REAL *mh, REAL *rh, REAL *mx, REAL *rx,
                             REAL *mc, REAL *rc)
{
    const int64_t G = 4 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *axb = ax + b * G, *cp = c_prev + b * H;
        REAL *sb = s + b * G, *cb = c + b * H, *tcb = tc + b * H, *hb = h + b * H;
        REAL m, r, m2, r2;
        SUF(ln_stats)(ahb, G, eps, &m, &r);
        SUF(ln_stats)(axb, G, eps, &m2, &r2);
        mh[b] = m;
        rh[b] = r;
        mx[b] = m2;
        rx[b] = r2;
#pragma omp simd
        for (int64_t j = 0; j < G; ++j)
            sb[j] = ((ahb[j] - m) * r * wh[j] + bh[j]) + ((axb[j] - m2) * r2 * wx[j] + bx[j]);
#pragma omp simd
        for (int64_t j = 0; j < 2 * H; ++j) sb[j] = SUF(sigm)(sb[j]);
#pragma omp simd
        for (int64_t j = 2 * H; j < 3 * H; ++j) sb[j] = SUF(tanh_)(sb[j]);
#pragma omp simd
        for (int64_t j = 3 * H; j < G; ++j) sb[j] = SUF(sigm)(sb[j]);
        const REAL *si = sb, *sf = sb + H, *sg = sb + 2 * H, *so = sb + 3 * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) cb[j] = sf[j] * cp[j] + si[j] * sg[j];
        SUF(ln_stats)(cb, H, eps, &m, &r);
        mc[b] = m;
        rc[b] = r;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL t = SUF(tanh_)((cb[j] - m) * r * wc[j] + bc[j]);
            tcb[j] = t;
            hb[j] = so[j] * t;
        }
    }
}

/* LN-LSTM forward over the whole sequence: per step, ah_t = W_h h_{t-1} (gemm_panels, Whp packed by
   pack_panels from W_h^T) and lnlstm_step, in one parallel region of nt threads (two barriers per step
   instead of a fork and join per step, and no return to Python between steps). ax: (T, B, 4H); out:
   (T, B, H). keep = 1: every step's ah, s, c, tc and statistics st (6 x B per step: mh rh mx rx mc rc)
   are kept for the backward, (T, ...) buffers; keep = 0: one slot of each, overwritten (eval). */
void SUF(lnlstm_fwd)(int64_t nt, int64_t T, int64_t B, int64_t H, int64_t keep, double eps_,
                     const REAL *Whp, const REAL *h0, const REAL *c0, const REAL *ax,
                     const REAL *wh, const REAL *bh, const REAL *wx, const REAL *bx, const REAL *wc, const REAL *bc,
                     REAL *ah, REAL *s, REAL *c, REAL *tc, REAL *out, REAL *st)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
    const REAL eps = (REAL)eps_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0, *c_prev = t ? c + (keep ? t - 1 : 0) * BH : c0;
        REAL *ahk = ah + k * BG, *stk = st + k * 6 * B;
        /* while it computes ah_t, each thread fetches the rows of step t its lnlstm_step reads and writes */
        ahead_t q = {0};
        int64_t r0, r1;
        static_share(B, &r0, &r1);
        const int64_t sz = (int64_t)sizeof(REAL);
        ahead_add(&q, ax + t * BG + r0 * G, (r1 - r0) * G * sz);
        ahead_add(&q, s + k * BG + r0 * G, (r1 - r0) * G * sz);
        ahead_add(&q, c + k * BH + r0 * H, (r1 - r0) * H * sz);
        ahead_add(&q, tc + k * BH + r0 * H, (r1 - r0) * H * sz);
        ahead_add(&q, out + t * BH + r0 * H, (r1 - r0) * H * sz);
        SUF(gemm_panels_ahead)(B, H, G, h_prev, Whp, 0, ahk, &q);
        SUF(lnlstm_step)(B, H, eps, ahk, ax + t * BG, wh, bh, wx, bx, wc, bc, c_prev, s + k * BG, c + k * BH,
                         tc + k * BH, out + t * BH, stk, stk + B, stk + 2 * B, stk + 3 * B, stk + 4 * B, stk + 5 * B);
    }
}

/* The LSTM's gate gradients for one row: d = g + dc is dL/dc_t (g: through h_t, dc: from c_{t+1}); s (the
   gate activations) becomes dL/d(gate pre-activations), dc becomes dL/dc_{t-1}. For the LN and BN cells. */
static inline void SUF(lstm_gates_bwd)(int64_t H, const REAL *g, REAL *sb, REAL *dcb, const REAL *cp,
                                       const REAL *dhb, const REAL *tcb)
{
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
        const REAL d = g[j] + dcb[j];
        const REAL si = sb[j], sf = sb[H + j], sg = sb[2 * H + j], so = sb[3 * H + j];
        sb[j] = d * sg * si * ((REAL)1 - si);
        sb[H + j] = d * cp[j] * sf * ((REAL)1 - sf);
        sb[2 * H + j] = d * si * ((REAL)1 - sg * sg);
        sb[3 * H + j] = dhb[j] * tcb[j] * so * ((REAL)1 - so);
        dcb[j] = d * sf;
    }
}

/* LN-LSTM backward, one time step (the chain rule of lnlstm_fwd, row by row):
     in:     dh = dL/dh_t (B, H) (from the output and from step t+1)
     in/out: dc = dL/dc_t from step t+1 on entry, dL/dc_{t-1} on exit (B, H)
             s: the gate activations on entry, dL/d(gate pre-activations) on exit (B, 4H)
     out:    dah = dL/d(W_h h_{t-1}), dax = dL/d(W_x x_t) (B, 4H); may alias ah, ax (written in place)
     accumulates the LN gradients dwh, dbh, dwx, dbx (4H) and dwc, dbc (H): rows are split into nt
     chunks run in parallel, chunk k accumulating into dwh + k 4H, ... (the caller sums the nt partials).
     tmp: scratch of nt x 4H. */
static void SUF(lnlstm_bwd_rows)(int64_t b0, int64_t b1, int64_t B, int64_t H,
                                 const REAL *ah, const REAL *ax, REAL *s, const REAL *c, const REAL *c_prev,
                                 const REAL *tc, const REAL *st, const REAL *wh, const REAL *wx, const REAL *wc,
                                 const REAL *dh, REAL *dc, REAL *dah, REAL *dax, REAL *dwh, REAL *dbh,
                                 REAL *dwx, REAL *dbx, REAL *dwc, REAL *dbc, REAL *tmp)
{
    const int64_t G = 4 * H;
    const REAL *mh = st, *rh = st + B, *mx = st + 2 * B, *rx = st + 3 * B, *mc = st + 4 * B, *rc = st + 5 * B;
    for (int64_t b = b0; b < b1; ++b) {
        const REAL *ahb = ah + b * G, *axb = ax + b * G, *cb = c + b * H, *cp = c_prev + b * H;
        const REAL *tcb = tc + b * H, *dhb = dh + b * H;
        REAL *sb = s + b * G, *dcb = dc + b * H;
        const REAL mcb = mc[b], rcb = rc[b];
        REAL s1 = 0, s2 = 0;
        /* h_t = sigmoid(o) tanh(LN(c_t)): LN(c)'s backward, first pass, with dy = dh sigmoid(o) (1 - tc^2) */
#pragma omp simd reduction(+:s1, s2)
        for (int64_t j = 0; j < H; ++j) {
            const REAL dy = dhb[j] * sb[3 * H + j] * ((REAL)1 - tcb[j] * tcb[j]);
            const REAL xh = (cb[j] - mcb) * rcb, g = dy * wc[j];
            dwc[j] += dy * xh;
            dbc[j] += dy;
            tmp[j] = g;
            s1 += g;
            s2 += g * xh;
        }
        const REAL a1 = s1 / (REAL)H, a2 = s2 / (REAL)H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) tmp[j] = rcb * (tmp[j] - a1 - (cb[j] - mcb) * rcb * a2); /* through LN(c_t) */
        SUF(lstm_gates_bwd)(H, tmp, sb, dcb, cp, dhb, tcb);
        /* the gate pre-activations' gradient (now in sb) into both LNs */
        SUF(ln_bwd_start)(ahb, sb, G, mh[b], rh[b], wh, dwh, dbh, tmp, &s1, &s2);
        SUF(ln_bwd_finish)(ahb, tmp, G, mh[b], rh[b], s1, s2, dah + b * G);
        SUF(ln_bwd_start)(axb, sb, G, mx[b], rx[b], wx, dwx, dbx, tmp, &s1, &s2);
        SUF(ln_bwd_finish)(axb, tmp, G, mx[b], rx[b], s1, s2, dax + b * G);
    }
}

/* LN-LSTM backward over the whole sequence, from step T-1 down to 0: lnlstm_bwd_rows over nc row chunks
   (the chunks shared out over the nt threads), then dh = dah_t W_h + dout_{t-1} (gemm_panels, Whp packed
   from W_h itself), in one parallel region as in lnlstm_fwd. The forward's buffers (kept: keep = 1) are
   overwritten in place: the gradient of W_h h_{t-1} into ah, that of W_x x_t into ax, s is scratch.
   dh, dc: dL/dh_{T-1}, dL/dc_{T-1} on entry, dL/dh0, dL/dc0 on exit. The LN gradients accumulate per
   chunk (nc x 4H, nc x H), tmp: nc x 4H scratch. */
void SUF(lnlstm_bwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, const REAL *Whp,
                     const REAL *c0, const REAL *dout, REAL *ah, REAL *ax, REAL *s, const REAL *c, const REAL *tc,
                     const REAL *st, const REAL *wh, const REAL *wx, const REAL *wc, REAL *dh, REAL *dc,
                     REAL *dwh, REAL *dbh, REAL *dwx, REAL *dbx, REAL *dwc, REAL *dbc, REAL *tmp)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        REAL *aht = ah + t * BG, *axt = ax + t * BG;
        const REAL *c_prev = t ? c + (t - 1) * BH : c0;
#pragma omp for schedule(static, 1)
        for (int64_t k = 0; k < nc; ++k)
            SUF(lnlstm_bwd_rows)(B * k / nc, B * (k + 1) / nc, B, H, aht, axt, s + t * BG, c + t * BH, c_prev,
                                 tc + t * BH, st + t * 6 * B, wh, wx, wc, dh, dc, aht, axt, dwh + k * G,
                                 dbh + k * G, dwx + k * G, dbx + k * G, dwc + k * H, dbc + k * H, tmp + k * G);
        /* while it computes dh, each thread fetches the rows of step t-1 it works on next */
        ahead_t q = {0};
        if (t)
            for (int64_t k = omp_get_thread_num(); k < nc; k += omp_get_num_threads()) {
                const int64_t r0 = B * k / nc, rows = B * (k + 1) / nc - r0;
                ahead_add(&q, ah + (t - 1) * BG + r0 * G, rows * G * (int64_t)sizeof(REAL));
                ahead_add(&q, ax + (t - 1) * BG + r0 * G, rows * G * (int64_t)sizeof(REAL));
                ahead_add(&q, s + (t - 1) * BG + r0 * G, rows * G * (int64_t)sizeof(REAL));
                ahead_add(&q, c + (t - 1) * BH + r0 * H, rows * H * (int64_t)sizeof(REAL));
                ahead_add(&q, tc + (t - 1) * BH + r0 * H, rows * H * (int64_t)sizeof(REAL));
                ahead_add(&q, (t > 1 ? c + (t - 2) * BH : c0) + r0 * H, rows * H * (int64_t)sizeof(REAL));
            }
        SUF(gemm_panels_ahead)(B, G, H, aht, Whp, t ? dout + (t - 1) * BH : 0, dh, &q);
    }
}

/* LN-GRU forward, one time step (paper eqs. 26-28), ah = [W_h; U] h_{t-1} (B, 3H):
     [r, z] = sigmoid(LN(ah[:2H]; w_rz, b_rz) + xp_rz)      xp_rz = LN(W_x x_t; a2, b2)
     n      = tanh(xp_n + r LN(ah[2H:]; w_n, b_n))          xp_n  = LN(W x_t; a3, b3)
     h      = h_prev + z (n - h_prev)
   Writes srz = [sigmoid(r), sigmoid(z)] (B, 2H), n, h (B, H) and both LNs' mean/rstd (B). The rows are
   shared out over the threads of the caller's parallel region. */
static void SUF(lngru_step)(int64_t B, int64_t H, REAL eps,
                            const REAL *ah, const REAL *xrz, const REAL *xn, const REAL *wrz, const REAL *brz,
                            const REAL *wn, const REAL *bn, const REAL *h_prev,
                            REAL *srz, REAL *n, REAL *h, REAL *m1, REAL *r1, REAL *m4, REAL *r4)
{
    const int64_t G = 3 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *xrzb = xrz + b * 2 * H, *xnb = xn + b * H, *hp = h_prev + b * H;
        REAL *sb = srz + b * 2 * H, *nb = n + b * H, *hb = h + b * H;
        REAL m, r, mn, rn;
        SUF(ln_stats)(ahb, 2 * H, eps, &m, &r);
        SUF(ln_stats)(ahb + 2 * H, H, eps, &mn, &rn);
        m1[b] = m;
        r1[b] = r;
        m4[b] = mn;
        r4[b] = rn;
#pragma omp simd
        for (int64_t j = 0; j < 2 * H; ++j) sb[j] = SUF(sigm)((ahb[j] - m) * r * wrz[j] + brz[j] + xrzb[j]);
        const REAL *ahn = ahb + 2 * H, *z = sb + H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL v = SUF(tanh_)(xnb[j] + sb[j] * ((ahn[j] - mn) * rn * wn[j] + bn[j]));
            nb[j] = v;
            hb[j] = hp[j] + z[j] * (v - hp[j]);
        }
    }
}

/* LN-GRU forward over the whole sequence, as lnlstm_fwd: ah_t = [W_h; U] h_{t-1}, then lngru_step.
   xrz: (T, B, 2H), xn: (T, B, H); st: (4, L, B) with L = T (keep) or 1: m1, r1, m4, r4 per slot. */
void SUF(lngru_fwd)(int64_t nt, int64_t T, int64_t B, int64_t H, int64_t keep, double eps_, const REAL *Whp,
                    const REAL *h0, const REAL *xrz, const REAL *xn, const REAL *wrz, const REAL *brz,
                    const REAL *wn, const REAL *bn, REAL *ah, REAL *srz, REAL *n, REAL *out, REAL *st)
{
    const int64_t G = 3 * H, BH = B * H, LB = (keep ? T : 1) * B;
    const REAL eps = (REAL)eps_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0;
        REAL *ahk = ah + k * B * G, *stk = st + k * B;
        SUF(gemm_panels)(B, H, G, h_prev, Whp, 0, 0, ahk);
        SUF(lngru_step)(B, H, eps, ahk, xrz + t * 2 * BH, xn + t * BH, wrz, brz, wn, bn, h_prev, srz + k * 2 * BH,
                        n + k * BH, out + t * BH, stk, stk + LB, stk + 2 * LB, stk + 3 * LB);
    }
}

/* LN-GRU backward, one time step (the chain rule of lngru_fwd, row by row):
     in/out: dh = dL/dh_t on entry; on exit dL/dh_{t-1} except for the matmul term, i.e.
             dh (1 - z) + dout_prev (dout_prev may be NULL); the caller adds dah [W_h; U].
     out:    dxrz = dL/dxp_rz (B, 2H), may alias srz; dxn = dL/dxp_n (B, H), may alias n;
             dah = dL/d([W_h; U] h_{t-1}) (B, 3H), may alias ah (all written in place)
     accumulates the LN gradients dwrz, dbrz (2H) and dwn, dbn (H), per chunk of rows as in lnlstm_bwd.
     tmp: scratch of nt x 3H. */
static void SUF(lngru_bwd_rows)(int64_t b0, int64_t b1, int64_t H,
                    const REAL *ah, const REAL *srz, const REAL *n, const REAL *h_prev,
                    const REAL *m1, const REAL *r1, const REAL *m4, const REAL *r4,
                    const REAL *wrz, const REAL *wn, const REAL *bn, REAL *dh, const REAL *dout_prev,
                    REAL *dxrz, REAL *dxn, REAL *dah, REAL *dwrz, REAL *dbrz, REAL *dwn, REAL *dbn, REAL *tmp)
{
    const int64_t G = 3 * H;
    REAL *dnn = tmp, *g = tmp + H;
    for (int64_t b = b0; b < b1; ++b) {
        const REAL *ahb = ah + b * G, *ahn = ahb + 2 * H, *sb = srz + b * 2 * H;
        const REAL *nb = n + b * H, *hp = h_prev + b * H, *dop = dout_prev ? dout_prev + b * H : 0;
        REAL *dhb = dh + b * H, *drz = dxrz + b * 2 * H, *dnb = dxn + b * H, *dahb = dah + b * G;
        const REAL mn = m4[b], rn = r4[b];
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL d = dhb[j], rj = sb[j], zj = sb[H + j], nj = nb[j];
            const REAL nn = (ahn[j] - mn) * rn * wn[j] + bn[j]; /* LN(U h_{t-1}), recomputed */
            const REAL dn = d * zj * ((REAL)1 - nj * nj);
            dnb[j] = dn;
            drz[j] = dn * nn * rj * ((REAL)1 - rj);
            drz[H + j] = d * (nj - hp[j]) * zj * ((REAL)1 - zj);
            dnn[j] = dn * rj; /* dL/dLN(U h_{t-1}) */
            dhb[j] = d - d * zj + (dop ? dop[j] : (REAL)0);
        }
        REAL s1, s2;
        SUF(ln_bwd_start)(ahb, drz, 2 * H, m1[b], r1[b], wrz, dwrz, dbrz, g, &s1, &s2);
        SUF(ln_bwd_finish)(ahb, g, 2 * H, m1[b], r1[b], s1, s2, dahb);
        SUF(ln_bwd_start)(ahn, dnn, H, mn, rn, wn, dwn, dbn, g, &s1, &s2);
        SUF(ln_bwd_finish)(ahn, g, H, mn, rn, s1, s2, dahb + 2 * H);
    }
}

/* LN-GRU backward over the whole sequence, as lnlstm_bwd: lngru_bwd_rows over nc row chunks, then
   dh += dah_t [W_h; U]. In place: the gradients of xp_rz over srz, of xp_n over n, of ah over ah.
   dh: dL/dh_{T-1} on entry, dL/dh0 on exit. */
void SUF(lngru_bwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, const REAL *Whp, const REAL *h0,
                    const REAL *out, const REAL *dout, REAL *ah, REAL *srz, REAL *n, const REAL *st,
                    const REAL *wrz, const REAL *wn, const REAL *bn, REAL *dh,
                    REAL *dwrz, REAL *dbrz, REAL *dwn, REAL *dbn, REAL *tmp)
{
    const int64_t G = 3 * H, BH = B * H, TB = T * B;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        REAL *aht = ah + t * B * G, *srzt = srz + t * 2 * BH, *n_t = n + t * BH;
        const REAL *stt = st + t * B;
#pragma omp for schedule(static, 1)
        for (int64_t k = 0; k < nc; ++k)
            SUF(lngru_bwd_rows)(B * k / nc, B * (k + 1) / nc, H, aht, srzt, n_t, t ? out + (t - 1) * BH : h0, stt,
                                stt + TB, stt + 2 * TB, stt + 3 * TB, wrz, wn, bn, dh, t ? dout + (t - 1) * BH : 0,
                                srzt, n_t, aht, dwrz + k * 2 * H, dbrz + k * 2 * H, dwn + k * H, dbn + k * H,
                                tmp + k * 3 * H);
        SUF(gemm_panels)(B, G, H, aht, Whp, dh, 0, dh);
    }
}

/* ---- BN_t (per-time-step batch statistics) ------------------------------------------------------
   BN normalizes each column (unit) over the B rows of a step, so the BN kernels split the hidden units
   (not the rows) over the nt threads: thread k owns units [H k/nt, H (k+1)/nt) and every column of
   the step that belongs to them (one per gate), so each column's statistics and gain/bias gradients
   are computed by one thread, independently of nt. train = 0: the given mean/rstd (running averages). */

/* mean, rstd = 1/sqrt(var + eps) (var = sum d^2 / M, M = B or B-1) and varu = sum d^2 / (B-1) of the
   n columns x[., 0..n) of a (B, ld) block. */
static void SUF(bn_stats)(int64_t B, const REAL *x, int64_t ld, int64_t n, REAL eps, REAL invM,
                          REAL *mean, REAL *rstd, REAL *varu)
{
    for (int64_t c = 0; c < n; ++c) { mean[c] = 0; varu[c] = 0; }
    for (int64_t b = 0; b < B; ++b) {
        const REAL *xb = x + b * ld;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) mean[c] += xb[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) mean[c] /= (REAL)B;
    for (int64_t b = 0; b < B; ++b) {
        const REAL *xb = x + b * ld;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) { const REAL d = xb[c] - mean[c]; varu[c] += d * d; }
    }
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) {
        const REAL ss = varu[c];
        rstd[c] = (REAL)1 / SQRT(ss * invM + eps);
        varu[c] = ss / (REAL)(B - 1);
    }
}

/* BN backward over n columns, the reductions: dw += sum_b dy xhat, db += sum_b dy (db may be NULL), and
   into s1, s2 what bn_bwd_row needs: mean_b(g) and sum_b(g xhat) / M, g = dy w. */
static void SUF(bn_bwd_sums)(int64_t B, const REAL *x, int64_t ldx, const REAL *dy, int64_t ldy, int64_t n,
                             const REAL *mean, const REAL *rstd, const REAL *w, REAL *dw, REAL *db, REAL *s1,
                             REAL *s2, REAL invM)
{
    for (int64_t c = 0; c < n; ++c) { s1[c] = 0; s2[c] = 0; }
    for (int64_t b = 0; b < B; ++b) {
        const REAL *xb = x + b * ldx, *dyb = dy + b * ldy;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) {
            const REAL d = dyb[c], xh = (xb[c] - mean[c]) * rstd[c];
            s1[c] += d;
            s2[c] += d * xh;
        }
    }
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) {
        dw[c] += s2[c];
        if (db) db[c] += s1[c];
        s1[c] = s1[c] * w[c] / (REAL)B;  /* mean_b(g) */
        s2[c] = s2[c] * w[c] * invM;      /* sum_b(g xhat) / M */
    }
}

/* BN backward of one row x, dy over n columns, after bn_bwd_sums: dx = rstd (g - mean_b(g) - xhat
   sum_b(g xhat) / M), g = dy w (train), or dx = rstd g (eval). dx may alias x or dy. */
static inline void SUF(bn_bwd_row)(const REAL *x, const REAL *dy, REAL *dx, int64_t n, const REAL *mean,
                                   const REAL *rstd, const REAL *w, const REAL *s1, const REAL *s2, int64_t train)
{
    if (train) {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) {
            const REAL xh = (x[c] - mean[c]) * rstd[c];
            dx[c] = rstd[c] * (dy[c] * w[c] - s1[c] - xh * s2[c]);
        }
    } else {
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) dx[c] = rstd[c] * dy[c] * w[c];
    }
}

/* BN-LSTM forward, one step (Cooijmans et al.; gains only on the two gate-side BNs):
     a = BN_t(ax; wx) + bx + BN_t(ah; wh)      ax = W_x x_t, ah = W_h h_{t-1}, bx = the gate bias
     s = [sigmoid i, sigmoid f, tanh g, sigmoid o], c = sf c_prev + si sg, tc = tanh(BN_t(c; wc, bc)), h = so tc
   st_h, st_x: mean, rstd, varu of ah's / ax's G columns (3 x G); st_c: those of c (3 x H); computed
   (train) or given (eval: mean and rstd only). c may alias c_prev. Shared out over the threads of the
   caller's parallel region in four phases: the column statistics by units (nc chunks), the elementwise
   work by whole rows. Split by units, the threads wrote the same cache lines of every row wherever a
   chunk's edge fell inside one (H=100: unit 50 of each gate's block), and two threads ran slower than
   one (T=200 B=100 H=100: forward 32.5 vs 27.6 ms, backward 69.6 vs 51.8). */
static void SUF(bnlstm_step)(int64_t nc, int64_t train, int64_t B, int64_t H, REAL eps, REAL invM,
                             const REAL *ah, const REAL *ax, const REAL *wh, const REAL *wx, const REAL *bx,
                             const REAL *wc, const REAL *bc, const REAL *c_prev, REAL *s, REAL *c, REAL *tc,
                             REAL *h, REAL *st_h, REAL *st_x, REAL *st_c)
{
    const int64_t G = 4 * H;
    if (train) {
#pragma omp for schedule(static, 1)
        for (int64_t k = 0; k < nc; ++k) {
            const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
            for (int64_t q = 0; q < 4; ++q) {
                const int64_t o = q * H + j0;
                SUF(bn_stats)(B, ah + o, G, n, eps, invM, st_h + o, st_h + G + o, st_h + 2 * G + o);
                SUF(bn_stats)(B, ax + o, G, n, eps, invM, st_x + o, st_x + G + o, st_x + 2 * G + o);
            }
        }
    }
    const REAL *mh = st_h, *rh = st_h + G, *mx = st_x, *rx = st_x + G;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *axb = ax + b * G, *cp = c_prev + b * H;
        REAL *sb = s + b * G, *cb = c + b * H;
#pragma omp simd
        for (int64_t j = 0; j < G; ++j)
            sb[j] = ((axb[j] - mx[j]) * rx[j] * wx[j] + bx[j]) + (ahb[j] - mh[j]) * rh[j] * wh[j];
#pragma omp simd
        for (int64_t j = 0; j < 2 * H; ++j) sb[j] = SUF(sigm)(sb[j]);
#pragma omp simd
        for (int64_t j = 2 * H; j < 3 * H; ++j) sb[j] = SUF(tanh_)(sb[j]);
#pragma omp simd
        for (int64_t j = 3 * H; j < G; ++j) sb[j] = SUF(sigm)(sb[j]);
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) cb[j] = sb[H + j] * cp[j] + sb[j] * sb[2 * H + j];
    }
    if (train) {
#pragma omp for schedule(static, 1)
        for (int64_t k = 0; k < nc; ++k) {
            const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
            SUF(bn_stats)(B, c + j0, H, n, eps, invM, st_c + j0, st_c + H + j0, st_c + 2 * H + j0);
        }
    }
    const REAL *mc = st_c, *rc = st_c + H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *cb = c + b * H, *so = s + b * G + 3 * H;
        REAL *tcb = tc + b * H, *hb = h + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL t = SUF(tanh_)((cb[j] - mc[j]) * rc[j] * wc[j] + bc[j]);
            tcb[j] = t;
            hb[j] = so[j] * t;
        }
    }
}

/* BN-LSTM forward over the whole sequence, as lnlstm_fwd: per step ah_t = W_h h_{t-1} (gemm_panels) and
   bnlstm_step, in one parallel region. st_h, st_x: (T, 3, G), st_c: (T, 3, H), one per step whatever keep. */
void SUF(bnlstm_fwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, int64_t keep, int64_t train,
                     double eps_, double invM_, const REAL *Whp, const REAL *h0, const REAL *c0, const REAL *ax,
                     const REAL *wh, const REAL *wx, const REAL *bx, const REAL *wc, const REAL *bc,
                     REAL *ah, REAL *s, REAL *c, REAL *tc, REAL *out, REAL *st_h, REAL *st_x, REAL *st_c)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
    const REAL eps = (REAL)eps_, invM = (REAL)invM_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0, *c_prev = t ? c + (keep ? t - 1 : 0) * BH : c0;
        SUF(gemm_panels)(B, H, G, h_prev, Whp, 0, 0, ah + k * BG);
        SUF(bnlstm_step)(nc, train, B, H, eps, invM, ah + k * BG, ax + t * BG, wh, wx, bx, wc, bc, c_prev,
                         s + k * BG, c + k * BH, tc + k * BH, out + t * BH, st_h + t * 3 * G, st_x + t * 3 * G,
                         st_c + t * 3 * H);
    }
}

/* BN-LSTM backward, one step (the chain rule of bnlstm_fwd):
     in:     dh (B, H); in/out: dc = dL/dc_t on entry, dL/dc_{t-1} on exit (B, H)
     in/out: s: the gate activations on entry, dL/d(gate pre-activations) on exit (B, G)
     out:    dah = dL/d(W_h h_{t-1}), dax = dL/d(W_x x_t) (B, G), may alias ah, ax
     accumulates dwh, dwx, dbx (G), dwc, dbc (H). gc: scratch (B, H); s1, s2: scratch (2G). In phases as
     bnlstm_step: the column sums of each BN's backward by units (nc chunks), the rest by whole rows. */
static void SUF(bnlstm_bwd_step)(int64_t nc, int64_t train, int64_t B, int64_t H, REAL invM,
                                 const REAL *ah, const REAL *ax, REAL *s, const REAL *c, const REAL *c_prev,
                                 const REAL *tc, const REAL *st_h, const REAL *st_x, const REAL *st_c,
                                 const REAL *wh, const REAL *wx, const REAL *wc, const REAL *dh, REAL *dc,
                                 REAL *dah, REAL *dax, REAL *dwh, REAL *dwx, REAL *dbx, REAL *dwc, REAL *dbc,
                                 REAL *gc, REAL *s1, REAL *s2)
{
    const int64_t G = 4 * H;
    /* h_t = so tanh(BN(c_t)): dL/dBN(c) = dh so (1 - tc^2), into gc */
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *dhb = dh + b * H, *tcb = tc + b * H, *so = s + b * G + 3 * H;
        REAL *gb = gc + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) gb[j] = dhb[j] * so[j] * ((REAL)1 - tcb[j] * tcb[j]);
    }
#pragma omp for schedule(static, 1)
    for (int64_t k = 0; k < nc; ++k) {
        const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
        SUF(bn_bwd_sums)(B, c + j0, H, gc + j0, H, n, st_c + j0, st_c + H + j0, wc + j0, dwc + j0, dbc + j0,
                         s1 + j0, s2 + j0, invM);
    }
    /* BN(c)'s backward in place in gc, then the gates' pre-activations' gradient into s */
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *dhb = dh + b * H, *tcb = tc + b * H, *cp = c_prev + b * H;
        REAL *gb = gc + b * H, *sb = s + b * G, *dcb = dc + b * H;
        SUF(bn_bwd_row)(c + b * H, gb, gb, H, st_c, st_c + H, wc, s1, s2, train);
        SUF(lstm_gates_bwd)(H, gb, sb, dcb, cp, dhb, tcb);
    }
    /* both gate-side BNs: the sums (s1, s2 of W_h h's BN in [0, G), of W_x x's in [G, 2G)), then the rows */
#pragma omp for schedule(static, 1)
    for (int64_t k = 0; k < nc; ++k) {
        const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
        for (int64_t q = 0; q < 4; ++q) {
            const int64_t o = q * H + j0;
            SUF(bn_bwd_sums)(B, ah + o, G, s + o, G, n, st_h + o, st_h + G + o, wh + o, dwh + o, 0, s1 + o, s2 + o,
                             invM);
            SUF(bn_bwd_sums)(B, ax + o, G, s + o, G, n, st_x + o, st_x + G + o, wx + o, dwx + o, dbx + o,
                             s1 + G + o, s2 + G + o, invM);
        }
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        SUF(bn_bwd_row)(ah + b * G, s + b * G, dah + b * G, G, st_h, st_h + G, wh, s1, s2, train);
        SUF(bn_bwd_row)(ax + b * G, s + b * G, dax + b * G, G, st_x, st_x + G, wx, s1 + G, s2 + G, train);
    }
}

/* BN-LSTM backward over the whole sequence, as lnlstm_bwd: per step bnlstm_bwd_step, then
   dh = dah_t W_h + dout_{t-1}; the forward's kept buffers are overwritten in place as there. */
void SUF(bnlstm_bwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, int64_t train, double invM_,
                     const REAL *Whp, const REAL *c0, const REAL *dout, REAL *ah, REAL *ax, REAL *s, const REAL *c,
                     const REAL *tc, const REAL *st_h, const REAL *st_x, const REAL *st_c, const REAL *wh,
                     const REAL *wx, const REAL *wc, REAL *dh, REAL *dc, REAL *dwh, REAL *dwx, REAL *dbx,
                     REAL *dwc, REAL *dbc, REAL *gc, REAL *s1, REAL *s2)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
    const REAL invM = (REAL)invM_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        REAL *aht = ah + t * BG, *axt = ax + t * BG;
        SUF(bnlstm_bwd_step)(nc, train, B, H, invM, aht, axt, s + t * BG, c + t * BH, t ? c + (t - 1) * BH : c0,
                             tc + t * BH, st_h + t * 3 * G, st_x + t * 3 * G, st_c + t * 3 * H, wh, wx, wc, dh, dc,
                             aht, axt, dwh, dwx, dbx, dwc, dbc, gc, s1, s2);
        SUF(gemm_panels)(B, G, H, aht, Whp, t ? dout + (t - 1) * BH : 0, 0, dh);
    }
}

/* BN-GRU forward, one step, ah = [W_h; U] h_{t-1} (B, 3H), w/bn per column of ah (gains of BN_rz then BN_n):
     [r, z] = sigmoid(xp_rz + BN_t(ah[:2H])); n = tanh(xp_n + r BN_t(ah[2H:])); h = h_prev + z (n - h_prev)
   st: mean, rstd, varu of ah's 3H columns (3 x 3H). In phases as bnlstm_step: the statistics by units
   (nc chunks), the rest by whole rows, shared out over the threads of the caller's parallel region. */
static void SUF(bngru_step)(int64_t nc, int64_t train, int64_t B, int64_t H, REAL eps, REAL invM,
                            const REAL *ah, const REAL *xrz, const REAL *xn, const REAL *w, const REAL *h_prev,
                            REAL *srz, REAL *n_out, REAL *h, REAL *st)
{
    const int64_t G = 3 * H;
    if (train) {
#pragma omp for schedule(static, 1)
        for (int64_t k = 0; k < nc; ++k) {
            const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
            for (int64_t q = 0; q < 3; ++q) {
                const int64_t o = q * H + j0;
                SUF(bn_stats)(B, ah + o, G, n, eps, invM, st + o, st + G + o, st + 2 * G + o);
            }
        }
    }
    const REAL *m = st, *r = st + G;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *xrzb = xrz + b * 2 * H, *xnb = xn + b * H, *hp = h_prev + b * H;
        REAL *sb = srz + b * 2 * H, *nb = n_out + b * H, *hb = h + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const int64_t jz = H + j, jn = 2 * H + j;
            const REAL yr = (ahb[j] - m[j]) * r[j] * w[j];
            const REAL yz = (ahb[jz] - m[jz]) * r[jz] * w[jz];
            const REAL yn = (ahb[jn] - m[jn]) * r[jn] * w[jn];
            const REAL sr = SUF(sigm)(xrzb[j] + yr), sz = SUF(sigm)(xrzb[jz] + yz);
            const REAL v = SUF(tanh_)(xnb[j] + sr * yn);
            sb[j] = sr;
            sb[jz] = sz;
            nb[j] = v;
            hb[j] = hp[j] + sz * (v - hp[j]);
        }
    }
}

/* BN-GRU forward over the whole sequence, as bnlstm_fwd; st: (T, 3, 3H), one per step whatever keep. */
void SUF(bngru_fwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, int64_t keep, int64_t train,
                    double eps_, double invM_, const REAL *Whp, const REAL *h0, const REAL *xrz, const REAL *xn,
                    const REAL *w, REAL *ah, REAL *srz, REAL *n, REAL *out, REAL *st)
{
    const int64_t G = 3 * H, BH = B * H;
    const REAL eps = (REAL)eps_, invM = (REAL)invM_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0;
        SUF(gemm_panels)(B, H, G, h_prev, Whp, 0, 0, ah + k * B * G);
        SUF(bngru_step)(nc, train, B, H, eps, invM, ah + k * B * G, xrz + t * 2 * BH, xn + t * BH, w, h_prev,
                        srz + k * 2 * BH, n + k * BH, out + t * BH, st + t * 3 * G);
    }
}

/* BN-GRU backward, one step:
     in/out: dh = dL/dh_t on entry; on exit dh (1 - z) + dout_prev (dout_prev may be NULL); the caller adds dah [W_h; U]
     out:    dxrz (B, 2H) may alias srz; dxn (B, H) may alias n; dah (B, 3H) may alias ah
     accumulates dw (3H). gn: scratch (B, H); s1, s2: scratch (3H). In phases as bnlstm_bwd_step: the BN
     sums by units (nc chunks), the rest by whole rows. */
static void SUF(bngru_bwd_step)(int64_t nc, int64_t train, int64_t B, int64_t H, REAL invM,
                                const REAL *ah, const REAL *srz, const REAL *n_in, const REAL *h_prev,
                                const REAL *st, const REAL *w, REAL *dh, const REAL *dout_prev,
                                REAL *dxrz, REAL *dxn, REAL *dah, REAL *dw, REAL *gn, REAL *s1, REAL *s2)
{
    const int64_t G = 3 * H;
    const REAL *m = st, *r = st + G;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *sb = srz + b * 2 * H, *nb = n_in + b * H, *hp = h_prev + b * H;
        const REAL *dop = dout_prev ? dout_prev + b * H : 0;
        REAL *dhb = dh + b * H, *drz = dxrz + b * 2 * H, *dnb = dxn + b * H, *gb = gn + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const int64_t jn = 2 * H + j;
            const REAL d = dhb[j], rj = sb[j], zj = sb[H + j], nj = nb[j];
            const REAL yn = (ahb[jn] - m[jn]) * r[jn] * w[jn];
            const REAL dn = d * zj * ((REAL)1 - nj * nj);
            dnb[j] = dn;
            drz[j] = dn * yn * rj * ((REAL)1 - rj);
            drz[H + j] = d * (nj - hp[j]) * zj * ((REAL)1 - zj);
            gb[j] = dn * rj;
            dhb[j] = d - d * zj + (dop ? dop[j] : (REAL)0);
        }
    }
#pragma omp for schedule(static, 1)
    for (int64_t k = 0; k < nc; ++k) {
        const int64_t j0 = H * k / nc, n = H * (k + 1) / nc - j0;
        for (int64_t q = 0; q < 2; ++q) {
            const int64_t o = q * H + j0;
            SUF(bn_bwd_sums)(B, ah + o, G, dxrz + o, 2 * H, n, m + o, r + o, w + o, dw + o, 0, s1 + o, s2 + o, invM);
        }
        const int64_t o = 2 * H + j0;
        SUF(bn_bwd_sums)(B, ah + o, G, gn + j0, H, n, m + o, r + o, w + o, dw + o, 0, s1 + o, s2 + o, invM);
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        SUF(bn_bwd_row)(ah + b * G, dxrz + b * 2 * H, dah + b * G, 2 * H, m, r, w, s1, s2, train);
        SUF(bn_bwd_row)(ah + b * G + 2 * H, gn + b * H, dah + b * G + 2 * H, H, m + 2 * H, r + 2 * H, w + 2 * H,
                        s1 + 2 * H, s2 + 2 * H, train);
    }
}

/* BN-GRU backward over the whole sequence, as lngru_bwd (in place the same way). */
void SUF(bngru_bwd)(int64_t nt, int64_t nc, int64_t T, int64_t B, int64_t H, int64_t train, double invM_,
                    const REAL *Whp, const REAL *h0, const REAL *out, const REAL *dout, REAL *ah, REAL *srz,
                    REAL *n, const REAL *st, const REAL *w, REAL *dh, REAL *dw, REAL *gn, REAL *s1, REAL *s2)
{
    const int64_t G = 3 * H, BH = B * H;
    const REAL invM = (REAL)invM_;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        REAL *aht = ah + t * B * G, *srzt = srz + t * 2 * BH, *n_t = n + t * BH;
        SUF(bngru_bwd_step)(nc, train, B, H, invM, aht, srzt, n_t, t ? out + (t - 1) * BH : h0, st + t * 3 * G, w,
                            dh, t ? dout + (t - 1) * BH : 0, srzt, n_t, aht, dw, gn, s1, s2);
        SUF(gemm_panels)(B, G, H, aht, Whp, dh, 0, dh);
    }
}

/* ---- Un-normalized LSTM / GRU (torch's equations; `lnbench.nn.fused` uses these where they beat
   torch's fused kernel). Rows split over the threads, as for LN. ---------------------------------- */

/* LSTM forward, one step: a = xp + ah (xp = W_x x_t + b_x + b_h, ah = W_h h_{t-1}); s = [sigmoid i,
   sigmoid f, tanh g, sigmoid o]; c = sf c_prev + si sg; tc = tanh(c); h = so tc. c may alias c_prev. */
static void SUF(lstm_step)(int64_t B, int64_t H, const REAL *ah, const REAL *xp, const REAL *c_prev,
                           REAL *s, REAL *c, REAL *tc, REAL *h)
{
    const int64_t G = 4 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *xb = xp + b * G, *cp = c_prev + b * H;
        REAL *sb = s + b * G, *cb = c + b * H, *tcb = tc + b * H, *hb = h + b * H;
#pragma omp simd
        for (int64_t j = 0; j < 2 * H; ++j) sb[j] = SUF(sigm)(xb[j] + ahb[j]);
#pragma omp simd
        for (int64_t j = 2 * H; j < 3 * H; ++j) sb[j] = SUF(tanh_)(xb[j] + ahb[j]);
#pragma omp simd
        for (int64_t j = 3 * H; j < G; ++j) sb[j] = SUF(sigm)(xb[j] + ahb[j]);
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL cv = sb[H + j] * cp[j] + sb[j] * sb[2 * H + j], t = SUF(tanh_)(cv);
            cb[j] = cv;
            tcb[j] = t;
            hb[j] = sb[3 * H + j] * t;
        }
    }
}

/* LSTM forward over the whole sequence, as lnlstm_fwd; ah: one (B, 4H) scratch (the backward needs only s). */
void SUF(lstm_fwd)(int64_t nt, int64_t T, int64_t B, int64_t H, int64_t keep, const REAL *Whp, const REAL *h0,
                   const REAL *c0, const REAL *xp, REAL *ah, REAL *s, REAL *c, REAL *tc, REAL *out)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0, *c_prev = t ? c + (keep ? t - 1 : 0) * BH : c0;
        SUF(gemm_panels)(B, H, G, h_prev, Whp, 0, 0, ah);
        SUF(lstm_step)(B, H, ah, xp + t * BG, c_prev, s + k * BG, c + k * BH, tc + k * BH, out + t * BH);
    }
}

/* LSTM backward, one step: dh in; dc in/out (dL/dc_t in, dL/dc_{t-1} out); s: the gate activations in,
   dL/d(gate pre-activations) out (= dL/dxp_t = dL/d(W_h h_{t-1})). */
static void SUF(lstm_bwd_step)(int64_t B, int64_t H, REAL *s, const REAL *c_prev, const REAL *tc,
                               const REAL *dh, REAL *dc)
{
    const int64_t G = 4 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        REAL *sb = s + b * G, *dcb = dc + b * H;
        const REAL *cp = c_prev + b * H, *tcb = tc + b * H, *dhb = dh + b * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL si = sb[j], sf = sb[H + j], sg = sb[2 * H + j], so = sb[3 * H + j], t = tcb[j];
            const REAL d = dhb[j] * so * ((REAL)1 - t * t) + dcb[j];
            sb[j] = d * sg * si * ((REAL)1 - si);
            sb[H + j] = d * cp[j] * sf * ((REAL)1 - sf);
            sb[2 * H + j] = d * si * ((REAL)1 - sg * sg);
            sb[3 * H + j] = dhb[j] * t * so * ((REAL)1 - so);
            dcb[j] = d * sf;
        }
    }
}

/* LSTM backward over the whole sequence: lstm_bwd_step, then dh = dA_t W_h + dout_{t-1}; s becomes dA in
   place. dh, dc: dL/dh_{T-1}, dL/dc_{T-1} on entry, dL/dh0, dL/dc0 on exit. */
void SUF(lstm_bwd)(int64_t nt, int64_t T, int64_t B, int64_t H, const REAL *Whp, const REAL *c0, const REAL *dout,
                   REAL *s, const REAL *c, const REAL *tc, REAL *dh, REAL *dc)
{
    const int64_t G = 4 * H, BG = B * G, BH = B * H;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        SUF(lstm_bwd_step)(B, H, s + t * BG, t ? c + (t - 1) * BH : c0, tc + t * BH, dh, dc);
        SUF(gemm_panels)(B, G, H, s + t * BG, Whp, t ? dout + (t - 1) * BH : 0, 0, dh);
    }
}

/* GRU forward, one step (torch's variant; z as the paper's: h = h_prev + z (n - h_prev)):
     [r, z] = sigmoid(xp_rz + ah[:2H]); n = tanh(xp_n + r ah[2H:])    ah = W_h h_{t-1} + b_h (B, 3H)
   srz = [sigmoid r, sigmoid z] (B, 2H), n, h (B, H). */
static void SUF(gru_step)(int64_t B, int64_t H, const REAL *ah, const REAL *xrz, const REAL *xn,
                          const REAL *h_prev, REAL *srz, REAL *n, REAL *h)
{
    const int64_t G = 3 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *xrzb = xrz + b * 2 * H, *xnb = xn + b * H, *hp = h_prev + b * H;
        REAL *sb = srz + b * 2 * H, *nb = n + b * H, *hb = h + b * H;
#pragma omp simd
        for (int64_t j = 0; j < 2 * H; ++j) sb[j] = SUF(sigm)(xrzb[j] + ahb[j]);
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL v = SUF(tanh_)(xnb[j] + sb[j] * ahb[2 * H + j]);
            nb[j] = v;
            hb[j] = hp[j] + sb[H + j] * (v - hp[j]);
        }
    }
}

/* GRU forward over the whole sequence: ah_t = W_h h_{t-1} + bh, then gru_step. */
void SUF(gru_fwd)(int64_t nt, int64_t T, int64_t B, int64_t H, int64_t keep, const REAL *Whp, const REAL *bh,
                  const REAL *h0, const REAL *xrz, const REAL *xn, REAL *ah, REAL *srz, REAL *n, REAL *out)
{
    const int64_t G = 3 * H, BH = B * H;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = keep ? t : 0;
        const REAL *h_prev = t ? out + (t - 1) * BH : h0;
        SUF(gemm_panels)(B, H, G, h_prev, Whp, 0, bh, ah + k * B * G);
        SUF(gru_step)(B, H, ah + k * B * G, xrz + t * 2 * BH, xn + t * BH, h_prev, srz + k * 2 * BH, n + k * BH,
                      out + t * BH);
    }
}

/* GRU backward, one step: dh in/out (on exit dh (1 - z) + dout_prev, dout_prev may be NULL; the caller
   adds dah W_h); dxrz (B, 2H) may alias srz, dxn (B, H) may alias n; dah = dL/dah (B, 3H). */
static void SUF(gru_bwd_step)(int64_t B, int64_t H, const REAL *ah, const REAL *srz, const REAL *n,
                              const REAL *h_prev, REAL *dh, const REAL *dout_prev, REAL *dxrz, REAL *dxn, REAL *dah)
{
    const int64_t G = 3 * H;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const REAL *ahb = ah + b * G, *sb = srz + b * 2 * H, *nb = n + b * H, *hp = h_prev + b * H;
        const REAL *dop = dout_prev ? dout_prev + b * H : 0;
        REAL *dhb = dh + b * H, *drz = dxrz + b * 2 * H, *dnb = dxn + b * H, *dahb = dah + b * G;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
            const REAL d = dhb[j], rj = sb[j], zj = sb[H + j], nj = nb[j], an = ahb[2 * H + j];
            const REAL dn = d * zj * ((REAL)1 - nj * nj);
            const REAL dr = dn * an * rj * ((REAL)1 - rj), dz = d * (nj - hp[j]) * zj * ((REAL)1 - zj);
            dnb[j] = dn;
            drz[j] = dr;
            drz[H + j] = dz;
            dahb[j] = dr;
            dahb[H + j] = dz;
            dahb[2 * H + j] = dn * rj;
            dhb[j] = d - d * zj + (dop ? dop[j] : (REAL)0);
        }
    }
}

/* GRU backward over the whole sequence: gru_bwd_step, then dh += dah_t W_h. In place: the gradients of
   xp_rz over srz, of xp_n over n; dah (T, B, 3H) is its own buffer (ah is read while it is written). */
void SUF(gru_bwd)(int64_t nt, int64_t T, int64_t B, int64_t H, const REAL *Whp, const REAL *h0, const REAL *out,
                  const REAL *dout, const REAL *ah, REAL *srz, REAL *n, REAL *dh, REAL *dah)
{
    const int64_t G = 3 * H, BH = B * H;
#pragma omp parallel num_threads(nt) if(nt > 1)
    for (int64_t t = T - 1; t >= 0; --t) {
        SUF(gru_bwd_step)(B, H, ah + t * B * G, srz + t * 2 * BH, n + t * BH, t ? out + (t - 1) * BH : h0, dh,
                          t ? dout + (t - 1) * BH : 0, srz + t * 2 * BH, n + t * BH, dah + t * B * G);
        SUF(gemm_panels)(B, G, H, dah + t * B * G, Whp, dh, 0, dh);
    }
}
"""

_TYPES = [  # (REAL, suffix, exp, sqrt, PANEL: gemm_panels' columns, two 512-bit vectors)
    ("float", "f32", "expf", "sqrtf", 32),
    ("double", "f64", "exp", "sqrt", 16),
]
PANEL = {suf: panel for _, suf, _, _, panel in _TYPES}
GEMM_KB, GEMM_MC = 256, 128  # gemm_tn's blocks: rows of A and B (K) per pass, columns of A (rows of C) per thread


def gemm_tn_work(nt: int, N: int, suf: str) -> int:
    """Elements of gemm_tn's scratch (packed panels of B, one packed block of A per thread)."""
    return -(-N // PANEL[suf]) * PANEL[suf] * GEMM_KB + nt * GEMM_MC * GEMM_KB


def _source() -> str:
    parts = [_PRELUDE]
    for real, suf, exp, sqrt, panel in _TYPES:
        parts.append(
            f"#define REAL {real}\n#define SUF(name) name##_{suf}\n#define EXP {exp}\n#define SQRT {sqrt}\n"
            f"#define PANEL {panel}\n#define KB {GEMM_KB}\n#define MC {GEMM_MC}\n{_BODY}\n#undef REAL\n#undef SUF\n#undef EXP\n#undef SQRT\n#undef PANEL\n"
            "#undef MROWS\n#undef KB\n#undef MC\n"
        )
    return "".join(parts)


SOURCE = _source()
# Tried in order: vectorized exp through libmvec (512-bit vectors on x86-64, which gcc otherwise
# avoids), then plain scalar libm (portable).
_X86 = platform.machine().lower() in ("x86_64", "amd64")
FLAG_SETS = [
    ["-O3", "-march=native", *(["-mprefer-vector-width=512"] if _X86 else []), "-fno-math-errno", "-fopenmp",
     "-DLNB_VECMATH", "-shared", "-fPIC", "-lmvec", "-lm"],
    ["-O3", "-fno-math-errno", "-fopenmp-simd", "-shared", "-fPIC", "-lm"],
]

# ctypes signatures, read off the C prototypes: P = pointer (a Python int from data_ptr()), I = int64,
# D = double.
_EXPORTS = ("pack_panels", "gemm_tn", "lnlstm_fwd", "lnlstm_bwd", "lngru_fwd", "lngru_bwd", "bnlstm_fwd", "bnlstm_bwd",
            "bngru_fwd", "bngru_bwd", "lstm_fwd", "lstm_bwd", "gru_fwd", "gru_bwd")


def _signature(name: str) -> str:
    m = re.search(r"void SUF\(" + name + r"\)\((.*?)\)\s*\{", _BODY, re.S)
    params = [p.strip() for p in m.group(1).split(",")]
    return "".join("P" if "*" in p else "D" if p.startswith("double") else "I" for p in params)


_SIGS = {name: _signature(name) for name in _EXPORTS}
_CT = {"P": ctypes.c_void_p, "I": ctypes.c_int64, "D": ctypes.c_double}


class Kernels:
    """The loaded library: `k.fn("lnlstm_fwd", torch.float32)` -> the ctypes function."""

    def __init__(self, lib: ctypes.CDLL, path: Path, vectorized: bool = True):
        self.lib, self.path = lib, path
        self.vectorized = vectorized  # built with the first flag set (libmvec, OpenMP), not the portable one
        self._fns = {}
        for name, sig in _SIGS.items():
            for suf in ("f32", "f64"):
                f = getattr(lib, f"{name}_{suf}")
                f.argtypes = [_CT[ch] for ch in sig]
                f.restype = None
                self._fns[(name, suf)] = f

    def fn(self, name: str, dtype) -> ctypes._CFuncPtr:
        return self._fns[(name, "f64" if str(dtype) == "torch.float64" else "f32")]


def cache_dir() -> Path:
    return Path(os.environ.get("LNBENCH_CACHE") or Path.home() / ".cache" / "lnbench")


def _compiler() -> Optional[str]:
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


def _machine_key() -> str:
    """Arch plus CPU flags: the library is built with -march=native, so it must not move between CPUs."""
    key = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    key += line
                    break
    except OSError:
        key += platform.processor()
    return key


def lib_path(cc: str, flags: list[str]) -> Path:
    h = hashlib.sha256("\0".join([SOURCE, cc, " ".join(flags), _machine_key()]).encode()).hexdigest()[:16]
    return cache_dir() / f"ckernel-{h}.so"


class _Builder:
    """Compiles (in a background process) and loads the library; remembers failure."""

    def __init__(self):
        self.kernels: Optional[Kernels] = None
        self.failed = False
        self.proc: Optional[subprocess.Popen] = None
        self.attempt = 0
        self.tmp: Optional[Path] = None
        self.dest: Optional[Path] = None
        self.errors: list[str] = []

    def _fail(self, why: str) -> None:
        self.failed = True
        warnings.warn(f"lnbench: C kernels unavailable ({why}); using the eager torch path", RuntimeWarning, stacklevel=3)

    def _start(self) -> None:
        """Load the cached library for the next flag set if present, else start compiling it."""
        cc = _compiler()
        if cc is None:
            self._fail("no C compiler found ($CC, cc, gcc)")
            return
        while self.attempt < len(FLAG_SETS):
            flags = FLAG_SETS[self.attempt]
            self.dest = lib_path(cc, flags)
            if self.dest.exists():
                if self._load():
                    return
                self.attempt += 1
                continue
            try:
                d = cache_dir()
                d.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(prefix=".ckernel-", suffix=".c", dir=d)
                with os.fdopen(fd, "w") as f:
                    f.write(SOURCE)
                src = Path(name)
                self.tmp = src.with_suffix(".so")
                self.proc = subprocess.Popen(
                    [cc, str(src), "-o", str(self.tmp), *flags],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                self.src = src
                return
            except OSError as e:
                self._fail(f"cannot compile into {cache_dir()}: {e}")
                return
        self._fail("; ".join(self.errors) or "every build failed")

    def _load(self) -> bool:
        try:
            self.kernels = Kernels(ctypes.CDLL(str(self.dest)), self.dest, vectorized=self.attempt == 0)
            return True
        except (OSError, AttributeError) as e:
            self.errors.append(f"load {self.dest.name}: {e}")
            return False

    def _finish(self) -> None:
        """The compiler exited: rename its output into place and load it, or try the next flag set."""
        proc, self.proc = self.proc, None
        out = proc.stdout.read() if proc.stdout else ""
        if proc.stdout:
            proc.stdout.close()
        self.src.unlink(missing_ok=True)
        if proc.returncode == 0:
            os.replace(self.tmp, self.dest)
            if self._load():
                return
        else:
            self.tmp.unlink(missing_ok=True)
            self.errors.append(f"compile failed: {out.strip()[-300:]}")
        self.attempt += 1
        self._start()

    def get(self, wait: float) -> Optional[Kernels]:
        if self.kernels is not None or self.failed:
            return self.kernels
        if self.proc is None:
            self._start()
        deadline = time.monotonic() + wait
        while self.proc is not None:
            try:
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return None  # still compiling: the eager path for now
            self._finish()
        return self.kernels


_builder = _Builder()
_waited = False


def kernel(wait: Optional[float] = None) -> Optional[Kernels]:
    """The C kernels, or None: disabled (LNBENCH_NO_CKERNEL=1), unavailable, or still compiling.

    wait: seconds to wait for a compile in progress; by default WAIT_S on the first call, then 0."""
    global _waited
    if os.environ.get("LNBENCH_NO_CKERNEL", "") not in ("", "0"):
        return None
    if wait is None:
        wait = 0.0 if _waited else WAIT_S  # only the first call waits for the compiler
    _waited = True
    return _builder.get(wait)


def reset() -> None:
    """Forget the loaded/failed state (tests)."""
    global _builder, _waited
    _builder, _waited = _Builder(), False
