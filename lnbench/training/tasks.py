"""Loss and metrics for each kind of task a dataset declares (lnbench.data.base.Task)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from lnbench.data.base import IGNORE_INDEX, DataSpec
from lnbench.runs import primary_of


def metric_names(spec: DataSpec) -> list[str]:
    """Names of the values `loss_and_metrics` returns, loss first."""
    if spec.task == "regress":
        return ["loss", "mse"]
    if spec.task == "bound":
        return ["loss", "bound", "recon", "kl"]
    return ["loss", "error"] + (["bpc"] if spec.bits else [])


def primary_metric(spec: DataSpec) -> str:
    """The metric a report ranks runs by (lower is better): lnbench.runs.primary_of, the one rule."""
    return primary_of(metric_names(spec))


def loss_and_metrics(spec: DataSpec, out: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(loss to back-propagate, every metric of `metric_names` as one 1-D tensor, targets counted).

    Metrics stay on the device as a tensor so the train loop syncs with the host only when it logs.
    """
    if spec.task == "regress":
        loss = F.mse_loss(out.float(), y.float())
        return loss, torch.stack([loss, loss]).detach(), torch.tensor(y.numel(), device=y.device)
    if spec.task == "bound":
        return variational_bound(out, y)
    logits = out.reshape(-1, out.shape[-1])
    target = y.reshape(-1)
    loss = F.cross_entropy(logits.float(), target, ignore_index=IGNORE_INDEX)
    asked = target != IGNORE_INDEX
    n = asked.sum()
    wrong = ((logits.argmax(-1) != target) & asked).sum() / n.clamp_min(1)
    values = [loss.detach(), wrong.float()]
    if spec.bits:
        values.append(loss.detach() / math.log(2))
    return loss, torch.stack(values), n


def variational_bound(out: tuple[Tensor, Tensor], y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """A generative model's negative variational bound in nats per image (lnbench.models.draw): `out` is (the
    Bernoulli logits of each image's pixels (B, P), the KL term per image (B,)), y the binary images (B, P).
    The loss is the bound itself; its two terms are logged apart."""
    logits, kl = out
    recon = F.binary_cross_entropy_with_logits(logits.float(), y.float(), reduction="none").sum(-1)
    bound = (recon + kl.float()).mean()
    values = torch.stack([bound, bound, recon.mean(), kl.float().mean()]).detach()
    return bound, values, torch.tensor(len(y), device=y.device)
