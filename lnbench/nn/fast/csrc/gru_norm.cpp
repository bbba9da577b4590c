// The GRU's recurrence (GRUCell of lnbench/nn/rnn.py: the paper's eqs. 26-28) with layer norm, batch norm
// with per-step statistics, or no normalizer, one call per direction: lnbench::gru_norm_fwd runs all T
// steps, lnbench::gru_norm_bwd the backward through time.
//
//   X_t = W_x x_t, AH_t = W_h h_{t-1}          (3H each: the slices rz and n; both products in here)
//   [r, z] = sigmoid(N_xrz(X_rz) + N_hrz(AH_rz) + b_rz)
//   n = tanh(N_xn(X_n) + b_n + r N_hn(AH_n))
//   h_t = h_{t-1} + z (n - h_{t-1})            (the paper's z: PyTorch's is 1 - z)
//
// b is BN's gate and candidate bias (GRUCell.bias; LN's biases are its normalizers'). Without a normalizer
// (mode kNone) each N is the identity plus a Linear bias: N_x's the slices of W_x's bias, N_h's of W_h's, so
// that r multiplies U h + b_U as in torch's GRU.
//
// The design is lstm_norm.cpp's: every row (batch element) is its own recurrence, so with layer norm or
// none each thread runs the whole sequence on its share of the rows, both products included (Gemm), with
// no synchronisation between steps; BN's statistics couple the rows, so its threads meet before and
// after each step's column statistics (2 barriers per step each way). The weight gradients dW_x and dW_h
// are one outer_sum each over all steps.
//
// The same numbers on any thread count and any ISA build with FMA (AVX2, AVX-512): every row (LN, none) or
// column (BN) is computed whole by one thread, every sum over a row adds LANES partial sums in a fixed order,
// every sum over rows adds them in row order, the product tiles sum each output over k in order with FMA,
// and everything else is built with -ffp-contract=off so that no build fuses a multiply-add that another
// does not (kernel_common.h).
#include <torch/library.h>

#include "kernel_common.h"

namespace {

using namespace lnbench_kernels;

// ---- the cell's pointwise steps on one row (restrict: no aliasing, so every loop vectorizes) -----------
// s = [r, z, n] pre-activations (n's holding N_xn(X_n) + b_n) in place: r, z = sigmoid, n = tanh(. + r nn);
// h_t = h_{t-1} + z (n - h_{t-1})
template <typename T>
void gru_cell(T* __restrict s, const T* __restrict nn, const T* __restrict hp, T* __restrict h, int64_t H) {
  for (int64_t j = 0; j < 2 * H; ++j) s[j] = sigmoid_(s[j]);
  for (int64_t j = 0; j < H; ++j) {
    const T n = tanh_(s[2 * H + j] + s[j] * nn[j]);
    s[2 * H + j] = n;
    h[j] = hp[j] + s[H + j] * (n - hp[j]);
  }
}

// From dh_t's carried part (in dh), dout_t and rec = dAH_{t+1} W_h: the gradients of the pre-activations,
// dax = [dr, dz, dn] (the N_x side, and every bias on it) and dah = [dr, dz, r dn] (the N_h side); dh becomes
// the part of dh_{t-1} through h_t = (1 - z) h_{t-1} + z n. sum_ax, sum_nn add up dax and r dn (the bias
// gradients).
template <typename T>
void gru_cell_backward(T* __restrict dh, const T* __restrict dout, const T* __restrict rec, const T* __restrict s,
                       const T* __restrict nn, const T* __restrict hp, T* __restrict dax, T* __restrict dah,
                       T* __restrict sum_ax, T* __restrict sum_nn, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T d = dh[j] + dout[j] + rec[j];
    const T r = s[j], z = s[H + j], n = s[2 * H + j];
    const T dn = d * z * (T(1) - n * n);
    const T dr = dn * nn[j] * r * (T(1) - r);
    const T dz = d * (n - hp[j]) * z * (T(1) - z);
    const T dnn = dn * r;
    dax[j] = dr, dax[H + j] = dz, dax[2 * H + j] = dn;
    dah[j] = dr, dah[H + j] = dz, dah[2 * H + j] = dnn;
    dh[j] = d * (T(1) - z);
    sum_nn[j] += dnn;
  }
  for (int64_t j = 0; j < 3 * H; ++j) sum_ax[j] += dax[j];
}

// The four normalizers of the cell (x_rz, x_n, h_rz, h_n), each on its slice of a 3H-wide row, with their
// statistics tensors: allocated here, or the given running averages (fixed: mean and rstd per step) for BN at
// evaluation. Without a normalizer, gains are absent and the biases are the Linears'.
template <typename T> struct GRUNorms {
  Norm<T> n[4];

  GRUNorms(int64_t mode, int64_t T_, int64_t B, int64_t H, const std::vector<std::optional<at::Tensor>>& gains,
           const std::vector<std::optional<at::Tensor>>& biases, double eps, bool unbiased,
           std::vector<at::Tensor>& stats, const at::TensorOptions& opt) {
    const int64_t widths[4] = {2 * H, H, 2 * H, H};
    for (int k = 0; k < 4; ++k) {
      at::Tensor& mean = stats[3 * k];
      at::Tensor& rstd = stats[3 * k + 1];
      at::Tensor& var_b = stats[3 * k + 2];
      if (!mean.defined()) {
        const int64_t per = mode == kNone ? 0 : mode == kLayer ? B : widths[k];
        mean = at::empty({T_, per}, opt);
        rstd = at::empty({T_, per}, opt);
      }
      if (!var_b.defined()) var_b = at::empty({mode == kBatch ? T_ * widths[k] : 0}, opt);
      const at::Tensor* w = gains.empty() ? nullptr : maybe(gains[k]);
      const at::Tensor* b = biases.empty() ? nullptr : maybe(biases[k]);
      TORCH_CHECK(mode == kNone || w, "a normalized GRU needs its normalizers' gains");
      n[k] = Norm<T>{static_cast<Mode>(mode), widths[k], B, w ? w->data_ptr<T>() : nullptr,
                     b ? b->data_ptr<T>() : nullptr, static_cast<T>(eps), unbiased, mean.data_ptr<T>(),
                     rstd.data_ptr<T>(), mode == kBatch ? var_b.data_ptr<T>() : nullptr, 3 * H};
    }
  }
};

std::vector<std::optional<at::Tensor>> contiguous_opt(const std::vector<std::optional<at::Tensor>>& ts) {
  std::vector<std::optional<at::Tensor>> out;
  for (const auto& t : ts) out.push_back(maybe(t) ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt);
  return out;
}

// Returns out, h_T, then what the backward needs: X (W_x x_t), AH (W_h h_{t-1}) (one step's only, without a
// normalizer), S ([r, z, n]), NN (N_hn(AH_n)), and the statistics mean, rstd, var_b of N_xrz, N_xn, N_hrz, N_hn.
std::vector<at::Tensor> gru_norm_fwd(const at::Tensor& x_, const at::Tensor& h0_, const at::Tensor& w_x,
                                     const at::Tensor& w_h, const std::optional<at::Tensor>& gate_bias_,
                                     const std::vector<std::optional<at::Tensor>>& gains_,
                                     const std::vector<std::optional<at::Tensor>>& biases_, int64_t mode, double eps,
                                     bool unbiased, at::TensorList fixed, bool keep) {
  TORCH_CHECK(x_.dim() == 3 && x_.device().is_cpu(), "x must be a (T, B, F) CPU tensor");
  TORCH_CHECK(gains_.size() == 4 && biases_.size() == 4, "four normalizers: x_rz, x_n, h_rz, h_n");
  TORCH_CHECK(mode != kFixed || fixed.size() == 8, "fixed statistics: mean and rstd of x_rz, x_n, h_rz, h_n");
  const at::Tensor x = x_.contiguous(), h0 = h0_.contiguous();
  const auto gains = contiguous_opt(gains_), biases = contiguous_opt(biases_);
  const at::Tensor gate_bias = maybe(gate_bias_) ? gate_bias_->contiguous() : at::Tensor();
  const int64_t T_ = x.size(0), B = x.size(1), F = x.size(2), G = w_h.size(0), H = G / 3;
  const int64_t L = keep ? T_ : 1;  // steps whose intermediates are kept (all of them for the backward)
  // the products themselves only where the backward normalizes them again (not without a normalizer)
  const bool keep_products = keep && mode != kNone;
  const int64_t LP = keep_products ? T_ : 1;
  const auto opt = x.options();
  at::Tensor out = at::empty({T_, B, H}, opt);
  at::Tensor X = at::empty({LP, B, G}, opt), AH = at::empty({LP, B, G}, opt), S = at::empty({L, B, G}, opt);
  at::Tensor NN = at::empty({L, B, H}, opt);
  std::vector<at::Tensor> stats(12);
  if (mode == kFixed)
    for (int k = 0; k < 4; ++k) stats[3 * k] = fixed[2 * k].contiguous(), stats[3 * k + 1] = fixed[2 * k + 1].contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gru_norm_fwd", [&] {
    using T = scalar_t;
    const GRUNorms<T> norms(mode, T_, B, H, gains, biases, eps, unbiased, stats, opt);
    const Norm<T>&nxr = norms.n[0], &nxn = norms.n[1], &nhr = norms.n[2], &nhn = norms.n[3];
    const Gemm<T> input(w_x), recurrent(w_h);
    const T* gb = gate_bias.defined() ? gate_bias.data_ptr<T>() : nullptr;
    const T* xp = x.data_ptr<T>();
    T *Xp = X.data_ptr<T>(), *AHp = AH.data_ptr<T>(), *Sp = S.data_ptr<T>(), *NNp = NN.data_ptr<T>();
    T* Op = out.data_ptr<T>();
    auto slot = [&](int64_t t) { return keep ? t : 0; };
    auto pslot = [&](int64_t t) { return keep_products ? t : 0; };
    auto products = [&](int64_t t, int64_t r0, int64_t r1) {  // X_t = x_t W_x^T, AH_t = h_{t-1} W_h^T
      const int64_t k = pslot(t) * B + r0;
      input.rows(xp + (t * B + r0) * F, F, r1 - r0, Xp + k * G);
      const T* hp = t ? Op + ((t - 1) * B + r0) * H : h0.data_ptr<T>() + r0 * H;
      recurrent.rows(hp, H, r1 - r0, AHp + k * G);
    };
    auto cells = [&](int64_t t, int64_t r0, int64_t r1) {  // the gates, n and h_t
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = slot(t) * B + b, p = pslot(t) * B + b;
        T* s = Sp + i * G;
        const T *xr = Xp + p * G, *ah = AHp + p * G;
        nhr.apply(ah, s, t, b, false);
        nxr.apply(xr, s, t, b, true);
        nxn.apply(xr + 2 * H, s + 2 * H, t, b, false);
        nhn.apply(ah + 2 * H, NNp + i * H, t, b, false);
        if (gb)
          for (int64_t j = 0; j < G; ++j) s[j] += gb[j];
        const T* hp = t ? Op + ((t - 1) * B + b) * H : h0.data_ptr<T>() + b * H;
        gru_cell(s, NNp + i * H, hp, Op + (t * B + b) * H, H);
      }
    };
    const bool bn = mode == kBatch;
    run_sequence(bn, B, [&](const Team& team, int64_t r0, int64_t r1) {
      for (int64_t t = 0; t < T_; ++t) {
        products(t, r0, r1);
        if (bn) {
          team.sync();
          const int64_t k = pslot(t) * B * G;
          nxr.step_stats(Xp + k, t, team);
          nxn.step_stats(Xp + k + 2 * H, t, team);
          nhr.step_stats(AHp + k, t, team);
          nhn.step_stats(AHp + k + 2 * H, t, team);
          team.sync();
        }
        cells(t, r0, r1);
      }
    });
  });
  std::vector<at::Tensor> result = {out, out[T_ - 1].clone(), X, AH, S, NN};
  result.insert(result.end(), stats.begin(), stats.end());
  return result;
}

// Returns dx (empty unless need_dx), dh_0, dW_x, dW_h, the gains' gradients (x_rz, x_n, h_rz, h_n; zeros
// without a normalizer), the gradient of every bias on the x side's pre-activations [r, z, n] (N_x's biases,
// b, W_x's bias; N_hrz's is its first 2H) and of N_hn's bias (W_h's n slice without a normalizer).
std::vector<at::Tensor> gru_norm_bwd(const at::Tensor& dout_, const at::Tensor& dhT, const at::Tensor& x_,
                                     const at::Tensor& h0, const at::Tensor& w_x, const at::Tensor& w_h,
                                     const at::Tensor& out, const at::Tensor& X, const at::Tensor& AH,
                                     const at::Tensor& S, const at::Tensor& NN, at::TensorList stats_,
                                     const std::vector<std::optional<at::Tensor>>& gains_, int64_t mode, bool unbiased,
                                     bool need_dx) {
  const at::Tensor dout = dout_.contiguous(), x = x_.contiguous();
  const auto gains = contiguous_opt(gains_);
  std::vector<at::Tensor> stats(stats_.begin(), stats_.end());
  const int64_t T_ = S.size(0), B = S.size(1), G = S.size(2), H = G / 3, F = x.size(2);
  const auto opt = S.options();
  const bool none = mode == kNone;
  at::Tensor dX = at::empty_like(S);   // W_x x_t's gradient, all steps (for dW_x)
  at::Tensor dAH = at::empty_like(S);  // W_h h_{t-1}'s (for dW_h and the recurrence)
  // the pre-activations' gradients of one step, x side and h side (without a normalizer: dX_t and dAH_t)
  at::Tensor dAx = at::empty({none ? 0 : B, G}, opt), dAh = at::empty({none ? 0 : B, G}, opt);
  at::Tensor dx = need_dx ? at::empty_like(x) : at::empty({0}, opt);
  at::Tensor dh = dhT.contiguous().clone(), rec = at::zeros({B, H}, opt);
  at::Tensor sums = at::empty({12 * H}, opt);  // BN's per-column sums s1, s2 for N_xrz, N_xn, N_hrz, N_hn
  // each row's sums over the steps of the parameters' gradients: the gains of N_xrz, N_xn, N_hrz, N_hn, then
  // the biases on the x side's [r, z, n] and N_hn's bias
  const int64_t W = 10 * H;
  at::Tensor per_row = at::zeros({B, W}, opt);
  AT_DISPATCH_FLOATING_TYPES(S.scalar_type(), "gru_norm_bwd", [&] {
    using T = scalar_t;
    const GRUNorms<T> norms(mode, T_, B, H, gains, {}, 0.0, unbiased, stats, opt);
    const Norm<T>&nxr = norms.n[0], &nxn = norms.n[1], &nhr = norms.n[2], &nhn = norms.n[3];
    const Gemm<T> recurrent(w_h.t());  // dAH W_h = dAH (W_h^T)^T
    const std::optional<Gemm<T>> input = need_dx ? std::optional<Gemm<T>>(Gemm<T>(w_x.t())) : std::nullopt;
    T* const s1xr = sums.data_ptr<T>();
    T* const s2xr = s1xr + 2 * H;
    T* const s1xn = s2xr + 2 * H;
    T* const s2xn = s1xn + H;
    T* const s1hr = s2xn + H;
    T* const s2hr = s1hr + 2 * H;
    T* const s1hn = s2hr + 2 * H;
    T* const s2hn = s1hn + H;
    const T *Sp = S.data_ptr<T>(), *AHp = AH.data_ptr<T>(), *Xp = X.data_ptr<T>(), *NNp = NN.data_ptr<T>();
    const T *doutp = dout.data_ptr<T>(), *outp = out.data_ptr<T>();
    T *dhp = dh.data_ptr<T>(), *recp = rec.data_ptr<T>(), *acc = per_row.data_ptr<T>();
    T *dXp = dX.data_ptr<T>(), *dAHp = dAH.data_ptr<T>();
    auto dax_of = [&](int64_t t, int64_t b) { return none ? dXp + (t * B + b) * G : dAx.data_ptr<T>() + b * G; };
    auto dah_of = [&](int64_t t, int64_t b) { return none ? dAHp + (t * B + b) * G : dAh.data_ptr<T>() + b * G; };
    // dh_t = its carried part + dout_t + dAH_{t+1} W_h (dh_T given), then the pre-activations' gradients
    auto cell_rows = [&](int64_t t, int64_t r0, int64_t r1) {
      if (t < T_ - 1) recurrent.rows(dAHp + ((t + 1) * B + r0) * G, G, r1 - r0, recp + r0 * H);
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = t * B + b;
        const T* hp = t ? outp + (i - B) * H : h0.data_ptr<T>() + b * H;
        gru_cell_backward(dhp + b * H, doutp + i * H, recp + b * H, Sp + i * G, NNp + i * H, hp, dax_of(t, b),
                          dah_of(t, b), acc + b * W + 6 * H, acc + b * W + 9 * H, H);
      }
    };
    auto input_rows = [&](int64_t t, int64_t r0, int64_t r1) {  // through the normalizers, then W_x
      if (!none)
        for (int64_t b = r0; b < r1; ++b) {
          const int64_t i = t * B + b;
          const T *dax = dax_of(t, b), *dah = dah_of(t, b), *xr = Xp + i * G, *ah = AHp + i * G;
          T *dxr = dXp + i * G, *dah_out = dAHp + i * G, *a = acc + b * W;
          nxr.backward(dax, xr, dxr, t, b, s1xr, s2xr, a);
          nxn.backward(dax + 2 * H, xr + 2 * H, dxr + 2 * H, t, b, s1xn, s2xn, a + 2 * H);
          nhr.backward(dah, ah, dah_out, t, b, s1hr, s2hr, a + 3 * H);
          nhn.backward(dah + 2 * H, ah + 2 * H, dah_out + 2 * H, t, b, s1hn, s2hn, a + 5 * H);
        }
      if (input) input->rows(dXp + (t * B + r0) * G, G, r1 - r0, dx.data_ptr<T>() + (t * B + r0) * F);
    };
    const bool bn = mode == kBatch;
    run_sequence(bn, B, [&](const Team& team, int64_t r0, int64_t r1) {
      for (int64_t t = T_ - 1; t >= 0; --t) {
        cell_rows(t, r0, r1);
        if (bn) {
          team.sync();
          const int64_t k = t * B * G;
          nxr.grad_sums(dAx.data_ptr<T>(), Xp + k, t, s1xr, s2xr, team);
          nxn.grad_sums(dAx.data_ptr<T>() + 2 * H, Xp + k + 2 * H, t, s1xn, s2xn, team);
          nhr.grad_sums(dAh.data_ptr<T>(), AHp + k, t, s1hr, s2hr, team);
          nhn.grad_sums(dAh.data_ptr<T>() + 2 * H, AHp + k + 2 * H, t, s1hn, s2hn, team);
          team.sync();
        }
        input_rows(t, r0, r1);
      }
      recurrent.rows(dAHp + r0 * G, G, r1 - r0, recp + r0 * H);  // dL/dh_0: the carried part + dAH_0 W_h
      for (int64_t b = r0; b < r1; ++b)
        for (int64_t j = 0; j < H; ++j) dhp[b * H + j] += recp[b * H + j];
    });
  });
  at::Tensor grads = at::empty({W}, opt), dWx, dWh;
  const at::Tensor h_prev = at::cat({h0.unsqueeze(0), out.narrow(0, 0, T_ - 1)}).reshape({-1, H});
  AT_DISPATCH_FLOATING_TYPES(S.scalar_type(), "gru_norm_bwd_sums", [&] {
    column_sum(per_row.data_ptr<scalar_t>(), B, W, grads.data_ptr<scalar_t>());
    dWx = outer_sum<scalar_t>(dX.reshape({-1, G}), x.reshape({-1, F}));  // sum_t dX_t^T x_t
    dWh = outer_sum<scalar_t>(dAH.reshape({-1, G}), h_prev);           // sum_t dAH_t^T h_{t-1}
  });
  return {dx,
          dh,
          dWx,
          dWh,
          grads.narrow(0, 0, 2 * H),
          grads.narrow(0, 2 * H, H),
          grads.narrow(0, 3 * H, 2 * H),
          grads.narrow(0, 5 * H, H),
          grads.narrow(0, 6 * H, 3 * H),
          grads.narrow(0, 9 * H, H)};
}

}  // namespace

// Autograd is lnbench.nn.fast.recurrence's (NativeGRURecurrence), around both calls.
TORCH_LIBRARY_FRAGMENT(lnbench, m) {
  m.def("gru_norm_fwd(Tensor x, Tensor h0, Tensor w_x, Tensor w_h, Tensor? gate_bias, Tensor?[] gains, "
        "Tensor?[] biases, int mode, float eps, bool unbiased, Tensor[] fixed, bool keep) -> Tensor[]");
  m.def("gru_norm_bwd(Tensor dout, Tensor dhT, Tensor x, Tensor h0, Tensor w_x, Tensor w_h, Tensor out, Tensor X, "
        "Tensor AH, Tensor S, Tensor NN, Tensor[] stats, Tensor?[] gains, int mode, bool unbiased, bool need_dx) "
        "-> Tensor[]");
}

TORCH_LIBRARY_IMPL(lnbench, CPU, m) {
  m.impl("gru_norm_fwd", &gru_norm_fwd);
  m.impl("gru_norm_bwd", &gru_norm_bwd);
}
