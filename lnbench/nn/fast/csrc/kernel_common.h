// What lnbench's recurrent kernels share (lstm_norm.cpp, gru_norm.cpp): the vectorizable scalar math, the
// thread team that runs a whole sequence, one normalizer of the recurrence (LN per row, BN per column, BN's
// fixed statistics at evaluation, or none), and the products: the register tile of the per-step products
// (Gemm) and of the weight gradients over all steps (outer_sum).
//
// The same numbers on any thread count and any ISA build (AVX2, AVX-512): every row (LN) or column (BN)
// is computed whole by one thread, every sum over a row adds LANES partial sums in a fixed order, every
// sum over rows adds them in row order; the product tiles sum each output over k in order and fuse their
// multiply-adds (FMA) in every build that has FMA, and every other line is built with -ffp-contract=off
// (lnbench/nn/fast/native.py), so that no build fuses a multiply-add that another does not.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef LNB_VECTOR_BYTES
#define LNB_VECTOR_BYTES 16
#endif
// Output rows of a product tile: AVX-512's 32 vector registers hold 8 rows x 2 vectors of accumulators besides
// the weights and the broadcast value (19 registers); AVX2's and SSE's 16 hold 4 rows (11).
#define LNB_TILE_ROWS (LNB_VECTOR_BYTES >= 64 ? 8 : 4)

namespace lnbench_kernels {

// per-row statistics (LN); per-column over the batch (BN); given per column (BN at evaluation); none at all
// (the identity plus the bias: an un-normalized cell's Linear bias)
enum Mode : int64_t { kLayer = 0, kBatch = 1, kFixed = 2, kNone = 3 };
constexpr int64_t LANES = 16;         // partial sums of every sum over a row, whatever the vector width
constexpr int64_t WORK_GRAIN = 8192;  // elements of a pass worth a parallel region (fewer: one thread)

// ---- scalar math that vectorizes -------------------------------------------------------------------
// float: Cephes' expf (range reduction by ln 2, degree-6 polynomial, about 1 ulp), branch-free so that
// gcc and clang vectorize the loops calling it; double (the exactness tests) uses libm.
inline float exp_(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float big = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = x * 1.44269504088896341f + big;
  n = n - big;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r;
  p = p + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double exp_(double x) { return std::exp(x); }

template <typename T> inline T sigmoid_(T x) { return T(1) / (T(1) + exp_(-x)); }

// tanh: Cephes' odd polynomial near 0 (where 1 - 2/(e^2x + 1) loses the relative precision), that
// formula elsewhere; both computed and one selected, so the loop stays branch-free.
inline float tanh_(float x) {
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = 1.0f - 2.0f / (exp_(2.0f * x) + 1.0f);
  return std::fabs(x) < 0.625f ? small : large;
}
inline double tanh_(double x) { return std::tanh(x); }

// sum of f(j) over j < n as LANES partial sums added in a fixed tree
template <typename T, typename F> inline T lane_sum(int64_t n, F f) {
  T acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int64_t k = 0; k < LANES; ++k) acc[k] += f(j + k);
  for (int64_t k = 0; j + k < n; ++k) acc[k] += f(j + k);
  for (int64_t w = LANES / 2; w >= 1; w /= 2)
    for (int64_t k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// One thread of the team that runs a whole sequence (lnbench's own OpenMP region, on the pool torch uses):
// its share of the batch's rows and of a step's columns, and the barrier between the phases of a step.
// Which thread computes a row or a column never changes its arithmetic, so neither does the team's size.
struct Team {
  int64_t id = 0, size = 1;

  static std::pair<int64_t, int64_t> share(int64_t n, int64_t id, int64_t size) {
    const int64_t q = n / size, r = n % size;
    const int64_t begin = id * q + std::min(id, r);
    return {begin, begin + q + (id < r ? 1 : 0)};
  }
  std::pair<int64_t, int64_t> rows(int64_t B) const { return share(B, id, size); }
  // f(c0, c1) on this thread's blocks of 64 of n columns
  template <typename F> void columns(int64_t n, const F& f) const {
    const auto [b0, b1] = share((n + 63) / 64, id, size);
    if (b0 < b1) f(b0 * 64, std::min(n, b1 * 64));
  }
  void sync() const {
#ifdef _OPENMP
    if (size > 1) {
#pragma omp barrier
    }
#endif
  }
};

// f(team) on each of up to `threads` threads (torch's thread count, at most one per row)
template <typename F> void run_team(int64_t threads, const F& f) {
#ifdef _OPENMP
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(threads, at::get_num_threads()));
  if (n > 1) {
#pragma omp parallel num_threads(n)
    f(Team{omp_get_thread_num(), omp_get_num_threads()});
    return;
  }
#endif
  f(Team{});
}

// f(r0, r1) over the rows [0, B) where every row is its own recurrence (no batch statistics): the team takes
// chunks of rows from a shared counter, each chunk through all the steps, so a thread that a busy neighbour
// slows takes fewer chunks instead of keeping the others waiting at the end. Which thread runs a row, and
// with which others, never changes the row's arithmetic (the products' sums run over k in order whatever
// the tile), so the bits stay those of one thread. Chunks are at least the products' tile where the batch
// allows it, and at most a quarter of a thread's share.
template <typename F> void run_rows(int64_t B, const F& f) {
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(B, at::get_num_threads()));
#ifdef _OPENMP
  if (n > 1) {
    const int64_t chunk = std::max<int64_t>(std::min<int64_t>(LNB_TILE_ROWS, (B + n - 1) / n), B / (4 * n));
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(n)
    for (int64_t r0 = next.fetch_add(chunk); r0 < B; r0 = next.fetch_add(chunk)) f(r0, std::min(B, r0 + chunk));
    return;
  }
#endif
  f(0, B);
}

// f(team, r0, r1) runs a whole sequence on the rows [r0, r1): with batch statistics (BN) each thread of the
// team keeps its even share of the rows and meets the others at the team's barriers; without them, every row
// its own recurrence, the rows go out in chunks (run_rows) to teams of one, whose barriers are no-ops.
template <typename F> void run_sequence(bool batch_stats, int64_t B, const F& f) {
  if (!batch_stats) {
    run_rows(B, [&](int64_t r0, int64_t r1) { f(Team{}, r0, r1); });
    return;
  }
  run_team(B, [&](const Team& team) {
    const auto [r0, r1] = team.rows(B);
    f(team, r0, r1);
  });
}

// column blocks [c0, c1) of a G-wide matrix of `rows` rows, in parallel (blocks of 64 columns)
template <typename F> inline void for_columns(int64_t G, int64_t rows, const F& f) {
  const int64_t blocks = (G + 63) / 64;
  const int64_t grain = std::max<int64_t>(1, WORK_GRAIN / std::max<int64_t>(64 * rows, 1));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) { f(b0 * 64, std::min(G, b1 * 64)); });
}

// ---- one normalizer of the recurrence ------------------------------------------------------------
// Its statistics over T steps of B rows live in mean/rstd: (T, B) per row for LN, (T, G) per column for
// BN. var_b (BN in training) keeps each step's biased batch variance for the caller's running averages.
// Its input is G columns of a matrix whose rows are ld apart (0: G), like its dy in the backward: the GRU's
// normalizers each take a slice of a 3H-wide row.
template <typename T> struct Norm {
  Mode mode;
  int64_t G, B;
  const T* w;
  const T* b;  // nullptr: no bias
  T eps;
  bool unbiased;
  T* mean;
  T* rstd;
  T* var_b;
  int64_t ld = 0;

  bool per_row() const { return mode == kLayer; }
  int64_t stride() const { return ld ? ld : G; }

  // BN's statistics of step t over the B rows of X (B, G) for columns [c0, c1) of `team`'s share:
  // each column summed in row order
  void step_stats(const T* X, int64_t t, const Team& team) const {
    if (mode != kBatch) return;
    T* m = mean + t * G;
    T* r = rstd + t * G;
    T* vb = var_b + t * G;
    const int64_t S = stride();
    team.columns(G, [&](int64_t c0, int64_t c1) {
      for (int64_t j0 = c0; j0 < c1; j0 += 64) {  // sums in local arrays: no aliasing keeps them scalar
        const int64_t n = std::min<int64_t>(64, c1 - j0);
        T s[64] = {}, q[64] = {};
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < n; ++j) s[j] += X[b * S + j0 + j];
        for (int64_t j = 0; j < n; ++j) s[j] /= T(B);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < n; ++j) {
            const T d = X[b * S + j0 + j] - s[j];
            q[j] += d * d;
          }
        for (int64_t j = 0; j < n; ++j) {
          m[j0 + j] = s[j];
          vb[j0 + j] = q[j] / T(B);
          r[j0 + j] = T(1) / std::sqrt((unbiased ? q[j] / T(B - 1) : q[j] / T(B)) + eps);
        }
      }
    });
  }

  // y (+)= N(x) for row `row` of step t; LN takes the row's statistics here
  void apply(const T* __restrict x, T* __restrict y, int64_t t, int64_t row, bool accumulate) const {
    if (mode == kNone) {
      for (int64_t j = 0; j < G; ++j) {
        const T v_ = x[j] + (b ? b[j] : T(0));
        y[j] = accumulate ? y[j] + v_ : v_;
      }
      return;
    }
    const int64_t i = t * B + row;
    if (per_row()) {
      const T m = lane_sum<T>(G, [&](int64_t j) { return x[j]; }) / T(G);
      const T v = lane_sum<T>(G, [&](int64_t j) { const T d = x[j] - m; return d * d; }) / T(G);
      mean[i] = m;
      rstd[i] = T(1) / std::sqrt(v + eps);
      const T r = rstd[i];
      for (int64_t j = 0; j < G; ++j) {
        const T v_ = (x[j] - m) * r * w[j] + (b ? b[j] : T(0));
        y[j] = accumulate ? y[j] + v_ : v_;
      }
      return;
    }
    const T* m = mean + t * G;
    const T* r = rstd + t * G;
    for (int64_t j = 0; j < G; ++j) {
      const T v_ = (x[j] - m[j]) * r[j] * w[j] + (b ? b[j] : T(0));
      y[j] = accumulate ? y[j] + v_ : v_;
    }
  }

  // BN's backward needs, per column, the sums over the batch of g = dy w and of g xhat: into s1, s2
  void grad_sums(const T* DY, const T* X, int64_t t, T* s1, T* s2, const Team& team) const {
    if (mode != kBatch) return;
    const T* m = mean + t * G;
    const T* r = rstd + t * G;
    const int64_t S = stride();
    team.columns(G, [&](int64_t c0, int64_t c1) {
      for (int64_t j0 = c0; j0 < c1; j0 += 64) {
        const int64_t n = std::min<int64_t>(64, c1 - j0);
        T a[64] = {}, c[64] = {}, mj[64], rj[64], wj[64];
        for (int64_t j = 0; j < n; ++j) mj[j] = m[j0 + j], rj[j] = r[j0 + j], wj[j] = w[j0 + j];
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < n; ++j) {
            const T g = DY[b * S + j0 + j] * wj[j];
            a[j] += g;
            c[j] += g * ((X[b * S + j0 + j] - mj[j]) * rj[j]);
          }
        for (int64_t j = 0; j < n; ++j) s1[j0 + j] = a[j], s2[j0 + j] = c[j];
      }
    });
  }

  // dx of row `row` of step t from its dy: LN from the row's own sums, BN from grad_sums' s1, s2, fixed
  // statistics (BN at evaluation) as a per-column scale. The row's share of the gain's gradient, dy xhat,
  // is added to dw (this row's sum over the steps, which the caller sums over the rows in row order).
  void backward(const T* __restrict dy, const T* __restrict x, T* __restrict dx, int64_t t, int64_t row,
                const T* __restrict s1, const T* __restrict s2, T* __restrict dw) const {
    if (mode == kNone) {
      for (int64_t j = 0; j < G; ++j) dx[j] = dy[j];
      return;
    }
    if (per_row()) {
      const int64_t i = t * B + row;
      const T m = mean[i], r = rstd[i];
      const T a = lane_sum<T>(G, [&](int64_t j) { return dy[j] * w[j]; }) / T(G);
      const T c = lane_sum<T>(G, [&](int64_t j) { return dy[j] * w[j] * ((x[j] - m) * r); }) / T(G);
      for (int64_t j = 0; j < G; ++j) {
        const T xh = (x[j] - m) * r, d = dy[j];
        dw[j] += d * xh;
        dx[j] = r * (d * w[j] - a - xh * c);
      }
      return;
    }
    const T* __restrict m = mean + t * G;
    const T* __restrict r = rstd + t * G;
    const T* __restrict wr = w;
    const T n = T(B), nv = unbiased ? T(B - 1) : T(B);  // the unbiased variance divides by B - 1
    if (mode == kFixed) {
      for (int64_t j = 0; j < G; ++j) {
        dw[j] += dy[j] * ((x[j] - m[j]) * r[j]);
        dx[j] = dy[j] * wr[j] * r[j];
      }
      return;
    }
    for (int64_t j = 0; j < G; ++j) {
      const T xh = (x[j] - m[j]) * r[j], d = dy[j];
      dw[j] += d * xh;
      dx[j] = r[j] * (d * wr[j] - s1[j] / n - xh * (s2[j] / nv));
    }
  }
};

// column sums of X (rows, G) in row order: the per-row sums of the parameters' gradients, summed
template <typename T> void column_sum(const T* X, int64_t rows, int64_t G, T* out) {
  for_columns(G, rows, [&](int64_t c0, int64_t c1) {
    for (int64_t j = c0; j < c1; ++j) out[j] = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = c0; j < c1; ++j) out[j] += X[r * G + j];
  });
}

// ---- the recurrent products ------------------------------------------------------------------------
// out = x W^T for a few rows of x, W (N, K) packed once per call into panels of PANEL columns (K rows of
// PANEL values each, zero-padded): a tile of up to LNB_TILE_ROWS rows x 2 vectors of the ISA's width is
// accumulated over k in registers, so each weight vector loaded serves that many rows. Each output is a sum over k in order,
// whatever the tile, the rows a thread was given or the ISA: the row split between threads cannot change
// it. The tile multiplies-and-adds with FMA where the build has it (the AVX2 and AVX512 builds agree; the
// baseline build, without FMA, rounds the products differently).
#if defined(__clang__)
#define LNB_FMA_TILE
#define LNB_FMA_BODY _Pragma("clang fp contract(fast)")
#elif defined(__GNUC__)
#define LNB_FMA_TILE __attribute__((optimize("fp-contract=fast")))
#define LNB_FMA_BODY
#else
#define LNB_FMA_TILE
#define LNB_FMA_BODY
#endif

template <typename T> struct Tiles {
  typedef T vec __attribute__((vector_size(LNB_VECTOR_BYTES)));
  typedef T uvec __attribute__((vector_size(LNB_VECTOR_BYTES), aligned(alignof(T))));  // unaligned access
  static constexpr int64_t LANES_ = LNB_VECTOR_BYTES / sizeof(T);
  static constexpr int64_t NV = 2;
  static constexpr int64_t PANEL = NV * LANES_;  // output columns of a tile
  static constexpr int64_t ROWS = LNB_TILE_ROWS;  // output rows of a tile

  // out[r][0..cols) (+)= sum_k x[r * xr + k * xk] w[k * wk + 0..PANEL) for r < R: w's PANEL values per k
  // are readable (zero-padded past cols)
  template <int R>
  LNB_FMA_TILE static void tile(const T* x, int64_t xr, int64_t xk, const T* w, int64_t wk, int64_t K, T* out,
                                int64_t ldo, int64_t cols, bool accumulate) {
    LNB_FMA_BODY
    vec acc[R][NV] = {};
    if (accumulate)  // continues the sum where it stopped: the same additions as one pass over all k
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v)
          for (int64_t l = 0; l < LANES_ && v * LANES_ + l < cols; ++l) acc[r][v][l] = out[r * ldo + v * LANES_ + l];
    for (int64_t k = 0; k < K; ++k) {
      vec wv[NV];
      for (int v = 0; v < NV; ++v) wv[v] = *reinterpret_cast<const uvec*>(w + k * wk + v * LANES_);
      for (int r = 0; r < R; ++r) {
        const T xv = x[r * xr + k * xk];
        for (int v = 0; v < NV; ++v) acc[r][v] += xv * wv[v];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = out + r * ldo + v * LANES_;
        if ((v + 1) * LANES_ <= cols) {
          *reinterpret_cast<uvec*>(o) = acc[r][v];
        } else {
          for (int64_t l = 0; v * LANES_ + l < cols; ++l) o[l] = acc[r][v][l];
        }
      }
  }

  // tile<R> for R = rows (1..ROWS)
  static void tile_n(int64_t rows, const T* x, int64_t xr, int64_t xk, const T* w, int64_t wk, int64_t K, T* out,
                     int64_t ldo, int64_t cols, bool accumulate) {
    switch (rows) {
#if LNB_TILE_ROWS > 4
      case 8: tile<8>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      case 7: tile<7>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      case 6: tile<6>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      case 5: tile<5>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
#endif
      case 4: tile<4>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      case 3: tile<3>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      case 2: tile<2>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate); break;
      default: tile<1>(x, xr, xk, w, wk, K, out, ldo, cols, accumulate);
    }
  }
};

// x W^T for a few rows x at a time: W (N, K) packed once into panels of PANEL columns (K rows of PANEL
// values each, zero-padded)
template <typename T> struct Gemm : Tiles<T> {
  using Tiles<T>::PANEL;
  using Tiles<T>::ROWS;
  at::Tensor panels;  // (ceil(N / PANEL), K, PANEL)
  int64_t N, K;

  explicit Gemm(const at::Tensor& w) : N(w.size(0)), K(w.size(1)) {
    const int64_t P = (N + PANEL - 1) / PANEL;
    panels = N % PANEL ? at::zeros({P, K, PANEL}, w.options()) : at::empty({P, K, PANEL}, w.options());
    const at::Tensor src = w.contiguous();
    const T* W = src.data_ptr<T>();
    T* out = panels.data_ptr<T>();
    at::parallel_for(0, P, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t l = 0; l < PANEL && p * PANEL + l < N; ++l)
          for (int64_t k = 0; k < K; ++k) out[(p * K + k) * PANEL + l] = W[(p * PANEL + l) * K + k];
    });
  }

  // out[r] = x[r] W^T for rows r < rows (x: ldx apart, out: N apart)
  void rows(const T* x, int64_t ldx, int64_t rows, T* out) const {
    const T* pan = panels.data_ptr<T>();
    for (int64_t r = 0; r < rows; r += ROWS) {
      const int64_t n = std::min<int64_t>(ROWS, rows - r);
      for (int64_t p = 0; p * PANEL < N; ++p)
        this->tile_n(n, x + r * ldx, ldx, 1, pan + p * K * PANEL, PANEL, K, out + r * N + p * PANEL, N,
                     std::min<int64_t>(PANEL, N - p * PANEL), false);
    }
  }
};

// out (M, N) = sum over rows r of A[r]^T Bm[r] (A: R x M, Bm: R x N, both contiguous), a weight's
// gradient over all steps and cases. Each output is summed over r in order by one thread, in blocks of
// CHUNK rows that stay in the cache across the output's tiles; the tiles run along the longer of M, N.
template <typename T> at::Tensor outer_sum(const at::Tensor& A_, const at::Tensor& B_) {
  using TL = Tiles<T>;
  constexpr int64_t CHUNK = 192;
  const bool flip = B_.size(1) < A_.size(1);  // out^T = sum Bm^T A: the same products, summed in the same order
  const at::Tensor A = (flip ? B_ : A_).contiguous(), Bm = (flip ? A_ : B_).contiguous();
  const int64_t R = A.size(0), M = A.size(1), N = Bm.size(1);
  const int64_t Np = (N + TL::PANEL - 1) / TL::PANEL * TL::PANEL;
  // Bm as panels of PANEL columns over all R rows, zero-padded: a tile reads its panel contiguously
  const int64_t P = Np / TL::PANEL;
  at::Tensor Bp = at::empty({P, R, TL::PANEL}, A.options());
  {
    const T* src = Bm.data_ptr<T>();
    T* dst = Bp.data_ptr<T>();
    at::parallel_for(0, R, 256, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t p = 0; p < P; ++p) {
          const int64_t cols = std::min(TL::PANEL, N - p * TL::PANEL);
          T* d = dst + (p * R + r) * TL::PANEL;
          std::memcpy(d, src + r * N + p * TL::PANEL, cols * sizeof(T));
          std::fill(d + cols, d + TL::PANEL, T(0));
        }
    });
  }
  at::Tensor out = at::empty({M, Np}, A.options());
  const T *a = A.data_ptr<T>(), *b = Bp.data_ptr<T>();
  T* o = out.data_ptr<T>();
  const int64_t blocks = (M + TL::ROWS - 1) / TL::ROWS;
  at::parallel_for(0, blocks, 1, [&](int64_t m0, int64_t m1) {
    // this thread's columns of A for one chunk, as one slab of CHUNK x ROWS values per block of ROWS
    // columns: the tile then reads x contiguously (A's own rows, M values apart, would put every load of
    // a 4 KB-wide A into the same few L1 sets)
    std::vector<T> slab((m1 - m0) * CHUNK * TL::ROWS, T(0));
    for (int64_t r0 = 0; r0 < R; r0 += CHUNK) {
      const int64_t rc = std::min(CHUNK, R - r0);
      for (int64_t k = 0; k < rc; ++k) {
        const T* row = a + (r0 + k) * M;
        for (int64_t mb = m0; mb < m1; ++mb)
          for (int64_t i = 0; i < TL::ROWS && mb * TL::ROWS + i < M; ++i)
            slab[((mb - m0) * CHUNK + k) * TL::ROWS + i] = row[mb * TL::ROWS + i];
      }
      for (int64_t p = 0; p < Np; p += TL::PANEL)
        for (int64_t mb = m0; mb < m1; ++mb) {
          const int64_t m = mb * TL::ROWS, rows = std::min(TL::ROWS, M - m);
          const T* x = slab.data() + (mb - m0) * CHUNK * TL::ROWS;
          TL::tile_n(rows, x, 1, TL::ROWS, b + (p / TL::PANEL * R + r0) * TL::PANEL, TL::PANEL, rc, o + m * Np + p, Np,
                     TL::PANEL, r0 > 0);
        }
    }
  });
  at::Tensor res = out.narrow(1, 0, N);
  return flip ? res.t().contiguous() : res.contiguous();
}

inline const at::Tensor* maybe(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined() ? &*t : nullptr; }

inline std::vector<at::Tensor> contiguous(at::TensorList ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.contiguous());
  return out;
}

}  // namespace lnbench_kernels
