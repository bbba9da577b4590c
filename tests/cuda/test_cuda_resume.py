"""On a GPU: the same seed gives the same bits, and a run stopped between checkpoints resumes to exactly the
uninterrupted run's numbers, for the paths whose every sum has a fixed order on CUDA:

- lnbench's Triton LN-LSTM (no atomics; its loops replayed as CUDA graphs) and torch-op loops, cuBLAS's products
  (deterministic for one GPU and one library version, on one stream), cuDNN's RNNs (not among cuDNN's
  non-deterministic routines), convolutions with cuDNN's deterministic algorithms
  (lnbench.training.device.cuda_settings), fused Adam, and DRAW's noise (the CUDA generator's state is in the
  checkpoint).
- Not asserted here: the Transformer, whose attention runs torch's efficient-attention kernel on float32, and its
  backward may sum with atomics (scripts/gpu/determinism.py measures it). Across GPUs, drivers or library versions
  no bit-exactness is claimed anywhere.
"""

import pytest
from conftest import after_log, metrics_without_time, results_of, summary_of
from cuda_support import REQUIRES_CUDA, fake_data, tiny_cuda

from lnbench.training.recipe import train

pytestmark = REQUIRES_CUDA
RESUMABLE = ["steps=10", "log_every=2", "eval_every=4", "checkpoint_every=3", "dataset.batch_size=4"]
CASES = [
    ("ln_lstm", "sequence", []),  # Triton, its training loops replayed as CUDA graphs
    ("ln_lstm", "sequence", ["model.impl=torch"]),  # torch ops
    ("lstm", "sequence", []),  # cuDNN (the GRU's: scripts/gpu/determinism.py)
    ("bn_lstm", "sequence", []),
    ("bn_mlp", "flat", []),
    ("cnn", "flat", []),
    ("ln_draw", "binary", []),
]


class HardStop(Exception):
    """Stands in for SIGKILL: the run dies between two checkpoints."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return fake_data(tmp_path_factory)


@pytest.mark.parametrize("model,kind,extra", CASES, ids=[f"{m}{'-torch' if e else ''}" for m, _, e in CASES])
def test_rerun_and_resume_on_cuda_give_the_uninterrupted_runs_bits(model, kind, extra, data_dir, tmp_path, monkeypatch):
    cfg = tiny_cuda(model, kind, data_dir, *RESUMABLE, *extra)
    train(cfg, tmp_path / "reference")
    train(cfg, tmp_path / "again")
    assert metrics_without_time(tmp_path / "again") == metrics_without_time(tmp_path / "reference")

    def stop():
        raise HardStop()

    with monkeypatch.context() as m:
        after_log(m, lambda split, step, _: split == "train" and step == 4, stop)
        with pytest.raises(HardStop):
            train(cfg, tmp_path / "resumed")
    summary = train(cfg, tmp_path / "resumed")  # from its checkpoint at step 3
    assert summary["resumed_at"] == [3]
    assert metrics_without_time(tmp_path / "resumed") == metrics_without_time(tmp_path / "reference")
    assert results_of(summary) == results_of(summary_of(tmp_path / "reference"))
