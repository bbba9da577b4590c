"""Loss and metrics per task: ignored targets, bits per character, evaluation weighting."""

import math

import torch

from lnbench.data.base import IGNORE_INDEX, DataSpec
from lnbench.training.recipe import evaluate
from lnbench.training.tasks import loss_and_metrics, metric_names, primary_metric

CLASSIFY = DataSpec(kind="flat", task="classify", num_outputs=3, input_size=2)
LM = DataSpec(kind="sequence", task="tagging", num_outputs=4, vocab_size=4, bits=True, seq_len=3)
REGRESS = DataSpec(kind="sequence", task="regress", num_outputs=1, input_size=2, seq_len=3)


def test_classification_error_counts_wrong_argmax():
    out = torch.tensor([[2.0, 0, 0], [0, 2.0, 0], [0, 0, 2.0], [2.0, 0, 0]])
    y = torch.tensor([0, 1, 0, 1])
    loss, values, n = loss_and_metrics(CLASSIFY, out, y)
    assert metric_names(CLASSIFY) == ["loss", "error"] and int(n) == 4
    assert values[1].item() == 0.5
    torch.testing.assert_close(values[0], torch.nn.functional.cross_entropy(out, y))


def test_tagging_ignores_unasked_steps_and_reports_bits():
    out = torch.zeros(1, 3, 4)
    out[0, 0, 2] = 5.0  # a confident wrong answer at a step nobody asked about
    y = torch.tensor([[IGNORE_INDEX, 1, 1]])
    loss, values, n = loss_and_metrics(LM, out, y)
    assert int(n) == 2
    torch.testing.assert_close(loss, torch.tensor(math.log(4)))  # uniform over 4 classes on asked steps
    names = metric_names(LM)
    assert names == ["loss", "error", "bpc"] and primary_metric(LM) == "bpc"
    torch.testing.assert_close(values[names.index("bpc")], torch.tensor(2.0))  # log2(4)


def test_regression_reports_mse():
    _, values, _ = loss_and_metrics(REGRESS, torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]))
    assert metric_names(REGRESS) == ["loss", "mse"] and primary_metric(REGRESS) == "mse"
    assert values.tolist() == [2.5, 2.5]


class _TwoBatches:
    """An uneven split: one batch of 3 right answers, one batch of 1 wrong one."""

    spec = CLASSIFY

    def eval_batches(self, split):
        yield torch.tensor([[1.0, 0, 0]] * 3), torch.tensor([0, 0, 0])
        yield torch.tensor([[1.0, 0, 0]]), torch.tensor([2])


def test_evaluation_weights_every_case_equally_across_uneven_batches():
    model = torch.nn.Identity()
    metrics = evaluate(model, _TwoBatches(), "val", torch.device("cpu"))
    assert metrics["error"] == 0.25  # not the mean of the batch means (0.5)


BOUND = DataSpec(kind="flat", task="bound", num_outputs=784, input_size=784)


def test_a_running_run_is_ranked_by_the_metric_its_task_ranks_by(tmp_path):
    """A run read from its files before it wrote summary.json (still running, or killed) has only its logged
    names to go by; it must rank by what the task says, bound included (a DRAW run once ranked by loss)."""
    from lnbench.runs import Run

    for spec in (CLASSIFY, LM, REGRESS, BOUND):
        names = metric_names(spec)
        records = [{"step": 10, "split": split, **dict.fromkeys(names, 1.0), "time": 0.1} for split in ("train", "val")]
        assert Run(tmp_path, ".", records=records).primary == primary_metric(spec), spec.task
    assert primary_metric(BOUND) == "bound"
