"""Batch normalization as the paper and recurrent BN use it (lnbench.nn.norm's factory builds it)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lnbench.errors import ConfigError


class BatchNorm(nn.Module):
    """Batch normalization (paper eq. 2) of inputs (B, H), or (T, B, H) with per-time-step statistics.

    Training normalizes with the mini-batch's mean and variance of each unit (the unbiased variance if
    `unbiased`), and updates running averages (of the unbiased variance, as torch does); evaluation
    uses the running averages. With `time_steps` > 0 every time step t keeps its own statistics
    (Cooijmans et al.; the paper's section 3.1); a step beyond the last stored one uses the last.
    """

    def __init__(
        self,
        num_features: int,
        *,
        gain_init: float = 1.0,
        bias: bool = True,
        eps: float = 1e-5,
        momentum: float = 0.1,
        unbiased: bool = False,
        time_steps: int = 0,
    ):
        super().__init__()
        self.eps, self.momentum, self.unbiased, self.time_steps = eps, momentum, unbiased, time_steps
        self.weight = nn.Parameter(torch.full((num_features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(num_features)) if bias else None
        shape = (time_steps, num_features) if time_steps else (num_features,)
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))

    def forward(self, a: Tensor, t: int | None = None) -> Tensor:
        """a: (B, H) at time step t (None for a feed-forward layer), or (T, B, H) for steps 0..T-1."""
        per_step = a.dim() == 3
        if self.training:
            if a.shape[-2] < 2:
                raise ConfigError(
                    "batch normalization cannot train at batch size 1: the batch variance of one case "
                    "is undefined. Use dataset.batch_size >= 2, or a normalizer that works per case "
                    "(model=ln_* or rms)."
                )
            mean = a.mean(dim=-2)
            var = a.var(dim=-2, unbiased=self.unbiased)
            self._update_running(mean.detach(), a.var(dim=-2, unbiased=True).detach(), per_step, t)
        else:
            mean, var = self.running_stats(a.shape[0] if per_step else None, t)
        y = (a - mean.unsqueeze(-2)) * torch.rsqrt(var + self.eps).unsqueeze(-2) * self.weight
        return y + self.bias if self.bias is not None else y

    def running_stats(self, steps: int | None, t: int | None) -> tuple[Tensor, Tensor]:
        """(mean, var) of time step t, or of steps 0..steps-1 (the last slot serves the steps past it)."""
        if not self.time_steps:
            return self.running_mean, self.running_var
        last = self.time_steps - 1
        if steps is None:
            i = min(t or 0, last)
            return self.running_mean[i], self.running_var[i]
        idx = torch.arange(steps, device=self.running_mean.device).clamp_(max=last)
        return self.running_mean[idx], self.running_var[idx]

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, per_step: bool, t: int | None) -> None:
        m = self.momentum
        if not self.time_steps:  # one set of statistics: a sequence updates it at each step in turn
            for mean_t, var_t in zip(mean.reshape(-1, mean.shape[-1]), var.reshape(-1, var.shape[-1])):
                self.running_mean.lerp_(mean_t, m)
                self.running_var.lerp_(var_t, m)
            return
        if per_step:
            n = min(mean.shape[0], self.time_steps)  # steps past the last slot do not update it
            self.running_mean[:n].lerp_(mean[:n], m)
            self.running_var[:n].lerp_(var[:n], m)
        elif (t or 0) < self.time_steps:
            self.running_mean[t or 0].lerp_(mean, m)
            self.running_var[t or 0].lerp_(var, m)

    def extra_repr(self) -> str:
        return (
            f"{self.weight.shape[0]}, eps={self.eps}, momentum={self.momentum}, "
            f"unbiased={self.unbiased}, time_steps={self.time_steps}, bias={self.bias is not None}"
        )
