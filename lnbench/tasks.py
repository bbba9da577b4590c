"""Loss and metrics for each kind of task a dataset declares (lnbench.data.base.Task)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from lnbench.data.base import IGNORE_INDEX, DataSpec


def metric_names(spec: DataSpec) -> list[str]:
    """Names of the values `loss_and_metrics` returns, loss first."""
    if spec.task == "regress":
        return ["loss", "mse"]
    return ["loss", "error"] + (["bpc"] if spec.bits else [])


def primary_metric(spec: DataSpec) -> str:
    """The metric a report ranks runs by (lower is better)."""
    return {"regress": "mse"}.get(spec.task, "bpc" if spec.bits else "error")


def loss_and_metrics(spec: DataSpec, out: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(loss to back-propagate, every metric of `metric_names` as one 1-D tensor, targets counted).

    Metrics stay on the device as a tensor so the train loop syncs with the host only when it logs.
    """
    if spec.task == "regress":
        loss = F.mse_loss(out.float(), y.float())
        return loss, torch.stack([loss, loss]).detach(), torch.tensor(y.numel())
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
