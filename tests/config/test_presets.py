"""Every preset composes and takes training steps on every compatible dataset; the run's files."""

import json

import pytest
from omegaconf import OmegaConf

from lnbench.errors import ConfigError
from lnbench.training.recipe import train
from tests.conftest import MODELS_FLAT, MODELS_SEQ, REAL_DATA, compose_train, needs_data, tiny

COMBOS = [(m, "mnist") for m in MODELS_FLAT] + [
    (m, d) for m in MODELS_SEQ for d in ("seq_mnist", "adding", "copy", "shakespeare")
]


@pytest.mark.parametrize(
    "model,dataset", [pytest.param(m, d, marks=needs_data) if d in REAL_DATA else (m, d) for m, d in COMBOS]
)
def test_preset_trains_on_dataset(model, dataset, tmp_path):
    summary = train(tiny(model, dataset), tmp_path)
    assert summary["status"] == "completed" and summary["steps"] == 2
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["split"] for r in records] == ["train", "train", "val", "test"]
    assert all(r["loss"] == r["loss"] for r in records)  # finite, not NaN
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "completed" and set(on_disk["test"]) >= {"loss"}


@pytest.mark.parametrize("model,dataset", [("ln_mlp", "adding"), pytest.param("ln_lstm", "mnist", marks=needs_data)])
def test_incompatible_model_and_dataset_is_a_clear_error(model, dataset, tmp_path):
    cfg = compose_train([f"model={model}", f"dataset={dataset}", "steps=1"])
    with pytest.raises(ConfigError, match="takes (flat|sequence) inputs but the dataset gives"):
        train(cfg, tmp_path)


def test_bn_at_batch_size_one_is_a_config_error_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"dataset.batch_size=1 is not allowed with batch normalization"):
        train(tiny("bn_lstm", "adding", "dataset.batch_size=1"), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    "model,dataset",
    [("ln_lstm", "adding"), ("ln_gru", "copy"), ("lstm", "adding"), pytest.param("ln_mlp", "mnist", marks=needs_data)],
)
def test_per_case_models_train_at_batch_size_one(model, dataset, tmp_path):
    assert train(tiny(model, dataset, "dataset.batch_size=1"), tmp_path)["status"] == "completed"


def test_model_presets_carry_the_papers_settings():
    cfg = tiny("bn_lstm", "adding")
    assert cfg.model.norm.kind == "batch" and cfg.model.norm.gain_init == 0.1
    cfg = tiny("ln_lstm", "adding")
    assert cfg.model.norm.kind == "layer" and cfg.model.norm.gain_init == 1.0
    assert OmegaConf.select(tiny("ln_mlp", "mnist"), "model.norm.kind") == "layer"


def test_test_seq_lens_tests_the_trained_model_at_each_length(tmp_path):
    summary = train(tiny("bn_lstm", "adding", "test_seq_lens=[12,24]"), tmp_path)
    assert set(summary["test_at_len"]) == {"12", "24"}
    assert summary["test_at_len"]["12"] == summary["test"]  # same model, same length, same test set
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("eval_seq_len") for r in lines if r["split"] == "test"] == [None, 12, 24]


@needs_data
def test_a_run_whose_test_at_another_length_fails_is_not_completed(tmp_path, monkeypatch):
    from lnbench.training import recipe

    real = recipe.setup_data

    def failing(cfg, **kw):
        if "eval_seq_len" in kw:
            raise MemoryError("no room for the long test")
        return real(cfg, **kw)

    monkeypatch.setattr(recipe, "setup_data", failing)
    with pytest.raises(MemoryError):
        train(tiny("ln_lstm", "adding", "test_seq_lens=[12]"), tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"  # so a re-run trains it again


def test_test_seq_lens_on_a_fixed_length_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"test_seq_lens=\[40\] is not allowed with this dataset"):
        train(tiny("ln_mlp", "mnist", "test_seq_lens=[40]"), tmp_path)


def test_gradient_clipping_applies_only_when_set_and_the_norm_is_logged(tmp_path):
    def train_records(*extra):
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        train(tiny("ln_lstm", "adding", "optim.lr=0.1", *extra), d)
        return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if '"train"' in line]

    free, clipped = train_records(), train_records("clip_grad_norm=1e-4")
    assert all(r["grad_norm"] > 0 for r in free + clipped)
    assert free[0]["grad_norm"] == clipped[0]["grad_norm"]  # step 1: the same gradient, logged before clipping
    assert free[1]["loss"] != clipped[1]["loss"]  # step 2 follows a (tiny) clipped update


def test_bn_of_all_layers_normalizes_the_logits_and_hidden_only_bn_does_not():
    import torch

    from lnbench.data.base import DataSpec
    from lnbench.models.mlp import MLP

    spec = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=20)
    torch.manual_seed(0)
    x = torch.randn(64, 20) * 5 + 3
    for norm_logits in (True, False):
        model = MLP(spec, [32], {"kind": "batch", "norm_logits": norm_logits}).train()
        logits = model(x)
        normalized = torch.allclose(logits.mean(0), torch.zeros(10), atol=1e-4) and torch.allclose(
            logits.std(0, unbiased=False), torch.ones(10), atol=1e-2
        )
        assert normalized is norm_logits


def test_a_model_given_the_wrong_kind_of_data_names_every_preset_that_fits():
    from lnbench.data.base import DataSpec
    from lnbench.models import MLP

    seq = DataSpec(kind="sequence", task="regress", num_outputs=1, input_size=2, seq_len=3)
    with pytest.raises(ConfigError) as e:
        MLP(seq, [4])
    assert all(name in str(e.value) for name in MODELS_SEQ) and "bn_mlp" not in str(e.value)
    assert "preln_transformer" in MODELS_SEQ and "bn_mlp_all" in MODELS_FLAT  # read from conf/model
