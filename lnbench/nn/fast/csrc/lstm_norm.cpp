// The normalized LSTM's recurrence (layer norm, or batch norm with per-step statistics), one call per
// direction: lnbench::lstm_norm_fwd runs all T steps, lnbench::lstm_norm_bwd the backward through time.
//
//   a_t = N_x(X_t) + N_h(W_h h_{t-1}) + b       X_t = W_x x_t, projected by the caller for all steps
//   [i, f, g, o] = sigmoid, sigmoid, tanh, sigmoid of a_t's four slices (torch's gate order)
//   c_t = f c_{t-1} + i g;   h_t = o tanh(N_c(c_t))
//
// Every row (batch element) is its own recurrence, so with layer norm each thread runs the whole sequence
// on the chunks of rows it takes (run_sequence), recurrent products included (Gemm below), with no
// synchronisation between steps; batch norm's statistics couple the rows, so each of its steps is a few
// parallel passes. The loops are plain C++ that the compiler vectorizes for the ISA the file is built for
// (lnbench/nn/fast/native.py builds one variant per torch CPU capability, LNB_VECTOR_BYTES its vector width).
// The weight gradients dW_x and dW_h are one outer_sum each over all steps.
//
// The same numbers on any thread count and any ISA build: every row (LN) or column (BN) is computed whole
// by one thread, every sum over a row adds LANES partial sums in a fixed order, every sum over rows adds
// them in row order, and the file is built with -ffp-contract=off so that no build fuses a multiply-add
// that another does not.
// (kernel_common.h: the parts shared with the GRU's kernels, gru_norm.cpp.)
#include <torch/library.h>

#include "kernel_common.h"

namespace {

using namespace lnbench_kernels;

// ---- the cell's pointwise steps on one row (restrict: no aliasing, so every loop vectorizes) -----------
// a_t's four slices in place: sigmoid on i, f, o; tanh on g
template <typename T> void activate_gates(T* __restrict s, int64_t H) {
  for (int64_t j = 0; j < 2 * H; ++j) s[j] = sigmoid_(s[j]);
  for (int64_t j = 2 * H; j < 3 * H; ++j) s[j] = tanh_(s[j]);
  for (int64_t j = 3 * H; j < 4 * H; ++j) s[j] = sigmoid_(s[j]);
}

// c_t = f c_{t-1} + i g
template <typename T> void update_cell(const T* __restrict s, const T* __restrict cp, T* __restrict c, int64_t H) {
  for (int64_t j = 0; j < H; ++j) c[j] = s[H + j] * cp[j] + s[j] * s[2 * H + j];
}

// tc = tanh(N_c(c_t)) in place, h_t = o tc
template <typename T> void emit_hidden(T* __restrict tc, const T* __restrict o, T* __restrict h, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    tc[j] = tanh_(tc[j]);
    h[j] = o[j] * tc[j];
  }
}

// dh_t = dout_t + its recurrent part; dy = dL/dN_c(c_t) = dh o (1 - tc^2), added to N_c's bias gradient
template <typename T>
void hidden_backward(const T* __restrict dout, const T* __restrict rec, const T* __restrict o, const T* __restrict tc,
                     T* __restrict dh, T* __restrict dy, T* __restrict dbias, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    dh[j] = dout[j] + rec[j];
    dy[j] = dh[j] * o[j] * (T(1) - tc[j] * tc[j]);
    dbias[j] += dy[j];
  }
}

// from dc_t (N_c's part dcn plus the carried dc), the gates' pre-activation gradients da (added to the
// bias gradient of a_t) and the carried dc_{t-1} = dc_t f, in place in dc
template <typename T>
void gates_backward(const T* __restrict dcn, T* __restrict dc, const T* __restrict s, const T* __restrict cp,
                    const T* __restrict tc, const T* __restrict dh, T* __restrict da, T* __restrict dbias, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const T dct = dcn[j] + dc[j];
    const T si = s[j], sf = s[H + j], sg = s[2 * H + j], so = s[3 * H + j];
    da[j] = dct * sg * si * (T(1) - si);
    da[H + j] = dct * cp[j] * sf * (T(1) - sf);
    da[2 * H + j] = dct * si * (T(1) - sg * sg);
    da[3 * H + j] = dh[j] * tc[j] * so * (T(1) - so);
    dc[j] = dct * sf;
  }
  for (int64_t j = 0; j < 4 * H; ++j) dbias[j] += da[j];
}

// The three normalizers of the cell (x, h, c) with their statistics tensors: allocated here, or the given
// running averages (fixed: mean and rstd per step) for BN at evaluation
template <typename T> struct Norms {
  Norm<T> n[3];

  Norms(int64_t mode, int64_t T_, int64_t B, int64_t G, int64_t H, const std::vector<at::Tensor>& gains,
        const std::vector<std::optional<at::Tensor>>& biases, double eps, bool unbiased,
        std::vector<at::Tensor>& stats) {
    const int64_t widths[3] = {G, G, H};
    for (int k = 0; k < 3; ++k) {
      at::Tensor& mean = stats[3 * k];
      at::Tensor& rstd = stats[3 * k + 1];
      at::Tensor& var_b = stats[3 * k + 2];
      if (!mean.defined()) {
        const int64_t per = mode == kLayer ? B : widths[k];
        mean = at::empty({T_, per}, gains[k].options());
        rstd = at::empty({T_, per}, gains[k].options());
      }
      if (!var_b.defined()) var_b = at::empty({mode == kBatch ? T_ * widths[k] : 0}, gains[k].options());
      const at::Tensor* b = biases.empty() ? nullptr : maybe(biases[k]);
      n[k] = Norm<T>{static_cast<Mode>(mode), widths[k], B, gains[k].data_ptr<T>(), b ? b->data_ptr<T>() : nullptr,
                     static_cast<T>(eps), unbiased, mean.data_ptr<T>(), rstd.data_ptr<T>(),
                     mode == kBatch ? var_b.data_ptr<T>() : nullptr};
    }
  }
};

// Returns out, h_T, c_T, then what the backward needs: X (W_x x_t), AH (W_h h_{t-1}), S (the gates), C,
// TC (tanh(N_c(c))), and the statistics mean, rstd, var_b of N_x, N_h, N_c.
std::vector<at::Tensor> lstm_norm_fwd(const at::Tensor& x_, const at::Tensor& h0_, const at::Tensor& c0_,
                                      const at::Tensor& w_x, const at::Tensor& w_h,
                                      const std::optional<at::Tensor>& gate_bias_, at::TensorList gains_,
                                      const std::vector<std::optional<at::Tensor>>& biases_, int64_t mode,
                                      double eps, bool unbiased, at::TensorList fixed, bool keep) {
  TORCH_CHECK(x_.dim() == 3 && x_.device().is_cpu(), "x must be a (T, B, F) CPU tensor");
  TORCH_CHECK(gains_.size() == 3 && biases_.size() == 3, "three normalizers: x, h, c");
  TORCH_CHECK(mode != kFixed || fixed.size() == 6, "fixed statistics: mean and rstd of x, h, c");
  const at::Tensor x = x_.contiguous(), h0 = h0_.contiguous(), c0 = c0_.contiguous();
  const std::vector<at::Tensor> gains = contiguous(gains_);
  std::vector<std::optional<at::Tensor>> biases;
  for (const auto& b : biases_) biases.push_back(maybe(b) ? std::optional<at::Tensor>(b->contiguous()) : std::nullopt);
  const at::Tensor gate_bias = maybe(gate_bias_) ? gate_bias_->contiguous() : at::Tensor();
  const int64_t T_ = x.size(0), B = x.size(1), F = x.size(2), G = w_h.size(0), H = G / 4;
  const int64_t L = keep ? T_ : 1;  // steps whose intermediates are kept (all of them for the backward)
  const auto opt = x.options();
  at::Tensor out = at::empty({T_, B, H}, opt);
  at::Tensor X = at::empty({L, B, G}, opt), AH = at::empty({L, B, G}, opt), S = at::empty({L, B, G}, opt);
  at::Tensor C = at::empty({keep ? T_ : 2, B, H}, opt), TC = at::empty({L, B, H}, opt);
  std::vector<at::Tensor> stats(9);
  if (mode == kFixed)
    for (int k = 0; k < 3; ++k) stats[3 * k] = fixed[2 * k].contiguous(), stats[3 * k + 1] = fixed[2 * k + 1].contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "lstm_norm_fwd", [&] {
    using T = scalar_t;
    const Norms<T> norms(mode, T_, B, G, H, gains, biases, eps, unbiased, stats);
    const Norm<T>&nx = norms.n[0], &nh = norms.n[1], &nc = norms.n[2];
    const Gemm<T> input(w_x), recurrent(w_h);
    const T* gb = gate_bias.defined() ? gate_bias.data_ptr<T>() : nullptr;
    const T* xp = x.data_ptr<T>();
    T *Xp = X.data_ptr<T>(), *AHp = AH.data_ptr<T>(), *Sp = S.data_ptr<T>(), *Cp = C.data_ptr<T>();
    T *TCp = TC.data_ptr<T>(), *Op = out.data_ptr<T>();
    auto slot = [&](int64_t t) { return keep ? t : 0; };
    auto cslot = [&](int64_t t) { return keep ? t : t % 2; };  // without keep, c_{t-1} and c_t take turns
    auto products = [&](int64_t t, int64_t r0, int64_t r1) {  // X_t = x_t W_x^T, AH_t = h_{t-1} W_h^T
      const int64_t k = slot(t) * B + r0;
      input.rows(xp + (t * B + r0) * F, F, r1 - r0, Xp + k * G);
      const T* hp = t ? Op + ((t - 1) * B + r0) * H : h0.data_ptr<T>() + r0 * H;
      recurrent.rows(hp, H, r1 - r0, AHp + k * G);
    };
    auto gates = [&](int64_t t, int64_t r0, int64_t r1) {  // a_t, the gates and c_t
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = slot(t) * B + b;
        T* s = Sp + i * G;
        nh.apply(AHp + i * G, s, t, b, false);
        nx.apply(Xp + i * G, s, t, b, true);
        if (gb)
          for (int64_t j = 0; j < G; ++j) s[j] += gb[j];
        activate_gates(s, H);
        const T* cp = t ? Cp + (cslot(t - 1) * B + b) * H : c0.data_ptr<T>() + b * H;
        update_cell(s, cp, Cp + (cslot(t) * B + b) * H, H);
      }
    };
    auto outputs = [&](int64_t t, int64_t r0, int64_t r1) {  // tanh(N_c(c_t)) and h_t
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = slot(t) * B + b;
        T* tc = TCp + i * H;
        nc.apply(Cp + (cslot(t) * B + b) * H, tc, t, b, false);
        emit_hidden(tc, Sp + i * G + 3 * H, Op + (t * B + b) * H, H);
      }
    };
    // Every row is its own recurrence, so each thread runs all the steps on its rows (run_sequence); BN's
    // statistics need every row of a step, so there the threads meet before and after them.
    const bool bn = mode == kBatch;
    run_sequence(bn, B, [&](const Team& team, int64_t r0, int64_t r1) {
      for (int64_t t = 0; t < T_; ++t) {
        products(t, r0, r1);
        if (bn) {
          team.sync();
          nx.step_stats(Xp + slot(t) * B * G, t, team);
          nh.step_stats(AHp + slot(t) * B * G, t, team);
          team.sync();
        }
        gates(t, r0, r1);
        if (bn) {
          team.sync();
          nc.step_stats(Cp + cslot(t) * B * H, t, team);
          team.sync();
        }
        outputs(t, r0, r1);
      }
    });
  });
  std::vector<at::Tensor> result = {out, out[T_ - 1].clone(), C[keep ? T_ - 1 : (T_ - 1) % 2].clone(), X, AH, S, C, TC};
  result.insert(result.end(), stats.begin(), stats.end());
  return result;
}

// Returns dx (empty unless need_dx), dh_0, dc_0, dW_x, dW_h, the gains' gradients (x, h, c), the gradient
// of a bias on a_t (the same for N_x's and N_h's bias and the gate bias b: each adds to a_t) and of N_c's.
std::vector<at::Tensor> lstm_norm_bwd(const at::Tensor& dout_, const at::Tensor& dhT_, const at::Tensor& dcT,
                                      const at::Tensor& x_, const at::Tensor& h0, const at::Tensor& c0,
                                      const at::Tensor& w_x, const at::Tensor& w_h, const at::Tensor& out,
                                      const at::Tensor& X, const at::Tensor& AH, const at::Tensor& S,
                                      const at::Tensor& C, const at::Tensor& TC, at::TensorList stats_,
                                      at::TensorList gains_, int64_t mode, bool unbiased, bool need_dx) {
  const at::Tensor dout = dout_.contiguous(), dhT = dhT_.contiguous(), x = x_.contiguous();
  const std::vector<at::Tensor> gains = contiguous(gains_);
  std::vector<at::Tensor> stats(stats_.begin(), stats_.end());
  const int64_t T_ = AH.size(0), B = AH.size(1), G = AH.size(2), H = G / 4, F = x.size(2);
  const auto opt = AH.options();
  at::Tensor dAH = at::empty_like(AH);  // W_h h_{t-1}'s gradient, all steps (for dW_h)
  at::Tensor dX = at::empty_like(AH);   // W_x x_t's (for dW_x)
  at::Tensor dx = need_dx ? at::empty_like(x) : at::empty({0}, opt);
  at::Tensor dA = at::empty({B, G}, opt), DYC = at::empty({B, H}, opt);  // a_t's and N_c(c_t)'s, one step
  at::Tensor dCN = at::empty({B, H}, opt);                                // N_c's part of dc_t, one step
  at::Tensor dh = at::empty({B, H}, opt), rec = at::empty({B, H}, opt), dc = dcT.contiguous().clone();
  at::Tensor sums = at::empty({2 * G + 2 * G + 2 * H}, opt);  // BN's per-column sums for N_h, N_x, N_c
  // each row's sums over the steps of the parameters' gradients: gains of N_x, N_h, N_c, then the bias on
  // a_t (N_x's and N_h's bias and the gate bias b: each adds to a_t) and N_c's bias
  const int64_t W = 3 * G + 2 * H;
  at::Tensor per_row = at::zeros({B, W}, opt);
  AT_DISPATCH_FLOATING_TYPES(AH.scalar_type(), "lstm_norm_bwd", [&] {
    using T = scalar_t;
    const Norms<T> norms(mode, T_, B, G, H, gains, {}, 0.0, unbiased, stats);
    const Norm<T>&nx = norms.n[0], &nh = norms.n[1], &nc = norms.n[2];
    const Gemm<T> recurrent(w_h.t());  // dAH W_h = dAH (W_h^T)^T
    const std::optional<Gemm<T>> input = need_dx ? std::optional<Gemm<T>>(Gemm<T>(w_x.t())) : std::nullopt;
    T* const s1h = sums.data_ptr<T>();
    T* const s2h = s1h + G;
    T* const s1x = s2h + G;
    T* const s2x = s1x + G;
    T* const s1c = s2x + G;
    T* const s2c = s1c + H;
    const T *Sp = S.data_ptr<T>(), *AHp = AH.data_ptr<T>(), *Xp = X.data_ptr<T>(), *Cp = C.data_ptr<T>();
    const T *TCp = TC.data_ptr<T>(), *doutp = dout.data_ptr<T>();
    T *dcp = dc.data_ptr<T>(), *dhp = dh.data_ptr<T>(), *recp = rec.data_ptr<T>(), *dyc = DYC.data_ptr<T>();
    T *dAp = dA.data_ptr<T>(), *dAHp = dAH.data_ptr<T>(), *dXp = dX.data_ptr<T>(), *acc = per_row.data_ptr<T>();
    T* dcnp = dCN.data_ptr<T>();
    // dh_t = dout_t + dAH_{t+1} W_h (dh_T given), and dL/dN_c(c_t) = dh o (1 - tanh^2)
    auto dyc_rows = [&](int64_t t, int64_t r0, int64_t r1) {
      if (t < T_ - 1) recurrent.rows(dAHp + ((t + 1) * B + r0) * G, G, r1 - r0, recp + r0 * H);
      const T* rp = t < T_ - 1 ? recp : dhT.data_ptr<T>();
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = t * B + b;
        hidden_backward(doutp + i * H, rp + b * H, Sp + i * G + 3 * H, TCp + i * H, dhp + b * H, dyc + b * H,
                        acc + b * W + 3 * G + H, H);
      }
    };
    // dc_t, the gates' pre-activation gradients, dc_{t-1} = dc_t f
    auto gates_rows = [&](int64_t t, int64_t r0, int64_t r1) {
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = t * B + b;
        T* dcn = dcnp + b * H;  // N_c's part of dc_t
        nc.backward(dyc + b * H, Cp + i * H, dcn, t, b, s1c, s2c, acc + b * W + 2 * G);
        const T* cp = t ? Cp + (i - B) * H : c0.data_ptr<T>() + b * H;
        gates_backward(dcn, dcp + b * H, Sp + i * G, cp, TCp + i * H, dhp + b * H, dAp + b * G, acc + b * W + 2 * G + H, H);
      }
    };
    auto inputs_rows = [&](int64_t t, int64_t r0, int64_t r1) {  // through N_h and N_x, then W_x
      for (int64_t b = r0; b < r1; ++b) {
        const int64_t i = t * B + b;
        nh.backward(dAp + b * G, AHp + i * G, dAHp + i * G, t, b, s1h, s2h, acc + b * W + G);
        nx.backward(dAp + b * G, Xp + i * G, dXp + i * G, t, b, s1x, s2x, acc + b * W);
      }
      if (input) input->rows(dXp + (t * B + r0) * G, G, r1 - r0, dx.data_ptr<T>() + (t * B + r0) * F);
    };
    const bool bn = mode == kBatch;
    run_sequence(bn, B, [&](const Team& team, int64_t r0, int64_t r1) {
      for (int64_t t = T_ - 1; t >= 0; --t) {
        dyc_rows(t, r0, r1);
        if (bn) {
          team.sync();
          nc.grad_sums(dyc, Cp + t * B * H, t, s1c, s2c, team);
          team.sync();
        }
        gates_rows(t, r0, r1);
        if (bn) {
          team.sync();
          nh.grad_sums(dAp, AHp + t * B * G, t, s1h, s2h, team);
          nx.grad_sums(dAp, Xp + t * B * G, t, s1x, s2x, team);
          team.sync();
        }
        inputs_rows(t, r0, r1);
      }
      recurrent.rows(dAHp + r0 * G, G, r1 - r0, recp + r0 * H);  // dL/dh_0
    });
  });
  at::Tensor grads = at::empty({W}, opt), dWx, dWh;
  const at::Tensor h_prev = at::cat({h0.unsqueeze(0), out.narrow(0, 0, T_ - 1)}).reshape({-1, H});
  AT_DISPATCH_FLOATING_TYPES(AH.scalar_type(), "lstm_norm_bwd_sums", [&] {
    column_sum(per_row.data_ptr<scalar_t>(), B, W, grads.data_ptr<scalar_t>());
    dWx = outer_sum<scalar_t>(dX.reshape({-1, G}), x.reshape({-1, F}));  // sum_t dX_t^T x_t
    dWh = outer_sum<scalar_t>(dAH.reshape({-1, G}), h_prev);           // sum_t dAH_t^T h_{t-1}
  });
  return {dx, rec, dc, dWx, dWh, grads.narrow(0, 0, G), grads.narrow(0, G, G), grads.narrow(0, 2 * G, H),
          grads.narrow(0, 2 * G + H, G), grads.narrow(0, 3 * G + H, H)};
}

}  // namespace

// Autograd is lnbench.nn.fast.recurrence's (NativeLSTMRecurrence), around both calls.
TORCH_LIBRARY(lnbench, m) {
  m.def("lstm_norm_fwd(Tensor x, Tensor h0, Tensor c0, Tensor w_x, Tensor w_h, Tensor? gate_bias, Tensor[] gains, "
        "Tensor?[] biases, int mode, float eps, bool unbiased, Tensor[] fixed, bool keep) -> Tensor[]");
  m.def("lstm_norm_bwd(Tensor dout, Tensor dhT, Tensor dcT, Tensor x, Tensor h0, Tensor c0, Tensor w_x, Tensor w_h, "
        "Tensor out, Tensor X, Tensor AH, Tensor S, Tensor C, Tensor TC, Tensor[] stats, Tensor[] gains, int mode, "
        "bool unbiased, bool need_dx) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(lnbench, CPU, m) {
  m.impl("lstm_norm_fwd", &lstm_norm_fwd);
  m.impl("lstm_norm_bwd", &lstm_norm_bwd);
}
