import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from lnbench.cli import CONF_DIR
from lnbench.config import register_configs

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("LNBENCH_DATA_DIR", REPO.parent / "shared" / "data")).resolve()
HAVE_DATA = (DATA_DIR / "MNIST" / "raw").is_dir() and (DATA_DIR / "tinyshakespeare" / "input.txt").is_file()
needs_data = pytest.mark.skipif(not HAVE_DATA, reason=f"real data not found under {DATA_DIR}")

MODELS_FLAT = ["mlp", "bn_mlp", "ln_mlp", "wn_mlp", "rms_mlp"]
MODELS_SEQ = [f"{n}{c}" for c in ("lstm", "gru") for n in ("", "bn_", "ln_", "wn_", "rms_")]
# Overrides that shrink each dataset so a run of a few steps (with its evaluations) takes a moment.
TINY = {
    "mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=32", "dataset.eval_batch_size=64"],
    "seq_mnist": ["dataset.carve=[256,64,64]", "dataset.batch_size=16", "dataset.eval_batch_size=64"],
    "adding": ["dataset.seq_len=12", "dataset.val_size=32", "dataset.test_size=32", "dataset.batch_size=8"],
    "copy": ["dataset.seq_len=12", "dataset.copy_len=3", "dataset.val_size=32", "dataset.test_size=32", "dataset.batch_size=8"],
    "shakespeare": ["dataset.seq_len=16", "dataset.max_eval_windows=4", "dataset.batch_size=8"],
}
REAL_DATA = {"mnist", "seq_mnist", "shakespeare"}


def compose_train(overrides=()):
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("train", overrides=[f"dataset.data_dir={DATA_DIR}", "logger.mode=disabled", "progress=false", *overrides]
                       if any(o.startswith("dataset=") and o.split("=")[1] in REAL_DATA for o in overrides)
                       else ["logger.mode=disabled", "progress=false", *overrides])


def tiny(model, dataset, *extra):
    return compose_train([f"model={model}", f"dataset={dataset}", *TINY[dataset], "steps=2", "eval_every=2", "log_every=1", "model.hidden_size=16" if model not in MODELS_FLAT else "model.hidden_sizes=[32,32]", *extra])
