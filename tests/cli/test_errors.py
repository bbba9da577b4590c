"""Bad input gets one clear message before any training: no traceback (unless HYDRA_FULL_ERROR=1), a
non-zero exit, nothing trained. Each case runs the real `lnbench train` in a subprocess."""

import struct

import pytest
import torch
from conftest import TINY_CLI, run_cli, summary_of

# What every case adds: small, quiet; the dataset keys are the preset's (the cases change the dataset).
BASE = ["model.hidden_size=8", "threads=1", "progress=false", "logger.wandb.mode=disabled", "steps=2"]


def idx_files(folder, images: bytes, labels: bytes):
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-images-idx3-ubyte").write_bytes(images)
    (raw / "t10k-labels-idx1-ubyte").write_bytes(labels)
    return folder


LABELS = struct.pack(">II", 0x801, 10) + bytes(10)


def corrupt_idx(tmp):  # wrong magic number: not an images file
    return idx_files(tmp / "data", struct.pack(">IIII", 0x1234, 10, 28, 28) + bytes(7840), LABELS)


def truncated_idx(tmp):  # a header for 10 images, bytes for 2 of them
    return idx_files(tmp / "data", struct.pack(">IIII", 0x803, 10, 28, 28) + bytes(2 * 784), LABELS)


def empty_dir(tmp):
    (tmp / "data").mkdir()
    return tmp / "data"


def a_file(tmp):
    (tmp / "file").write_text("")
    return tmp / "file"


# (id, overrides (a callable gets tmp_path), what stderr must say)
CASES = [
    (
        "unknown-preset",
        ["model=ln_lstmm"],
        "model=ln_lstmm is not allowed: there is no model preset 'ln_lstmm'. Did you mean ln_lstm or wn_lstm? "
        "The model presets are bn_cnn, bn_gru,",
    ),
    (
        "unknown-key",
        ["stepz=10"],
        "stepz=10 is not allowed: TrainConfig has no key 'stepz'. Did you mean steps? Its keys are checkpoint_every,",
    ),
    (
        "unknown-nested-key",
        ["optim.lrr=0.1"],
        "optim.lrr=0.1 is not allowed: AdamConfig has no key 'lrr'. Did you mean lr? Its keys are betas,",
    ),
    ("wrong-type", ["steps=ten"], "Value 'ten' of type 'str' could not be converted to Integer"),
    ("batch-size-0", ["dataset.batch_size=0"], "dataset.batch_size=0 is not allowed: it must be an integer >= 1"),
    (
        "bn-batch-size-1",
        ["model=bn_lstm", "dataset.batch_size=1"],
        "dataset.batch_size=1 is not allowed with batch normalization",
    ),
    ("seq-len-0", ["dataset=seq_mnist", "dataset.seq_len=0"], "dataset.seq_len=0 is not allowed"),
    (
        "seq-len-not-dividing-784",
        lambda t: ["dataset=seq_mnist", "dataset.seq_len=100", f"dataset.data_dir={empty_dir(t)}"],
        "dataset.seq_len=100 is not allowed for seq_mnist: it must divide 784",
    ),
    (
        "data-dir-without-files",
        lambda t: ["dataset=mnist", f"dataset.data_dir={empty_dir(t)}"],
        "no MNIST IDX files under",
    ),
    (
        "corrupt-idx",
        lambda t: ["dataset=mnist", f"dataset.data_dir={corrupt_idx(t)}"],
        "has magic number 0x00001234, expected 0x00000803",
    ),
    ("truncated-idx", lambda t: ["dataset=mnist", f"dataset.data_dir={truncated_idx(t)}"], "is truncated"),
    ("unwritable-output-dir", lambda t: [f"hydra.run.dir={a_file(t)}/run"], "the output directory cannot be written"),
    ("unwritable-sweep-dir", lambda t: ["-m", "seed=0,1", f"hydra.sweep.dir={a_file(t)}/sweep"], "hydra.sweep.dir="),
    ("cuda-without-cuda", ["device=cuda"], "device=cuda is not allowed here: torch sees no CUDA device"),
    ("unknown-device", ["device=tpu"], "device='tpu' is not allowed: use auto, cpu, cuda or cuda:N"),
    ("lr-0", ["optim.lr=0"], "optim.lr=0.0 is not allowed"),
    ("checkpoint-every-0", ["checkpoint_every=0"], "checkpoint_every=0 is not allowed"),
    ("wandb-timeout-0", ["logger.wandb.init_timeout=0"], "logger.wandb.init_timeout=0.0 is not allowed"),
    ("resume-missing-dir", lambda t: [f"resume={t}/nope"], "it does not exist"),
    ("resume-not-a-run-dir", lambda t: [f"resume={empty_dir(t)}"], "holds no .hydra/overrides.yaml"),
    ("resume-in-a-sweep", lambda t: ["-m", f"resume={t}", "seed=0,1"], "cannot be swept"),
]


@pytest.mark.parametrize("overrides,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error_before_training(overrides, message, tmp_path):
    overrides = overrides(tmp_path) if callable(overrides) else overrides
    if "device=cuda" in overrides and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run_dir = tmp_path / "run"
    where = [] if any(o.startswith(("hydra.", "-m")) for o in overrides) else [f"hydra.run.dir={run_dir}"]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    flags = [o for o in overrides if o == "-m"]  # Hydra's flags go first
    r = run_cli("train", *flags, *BASE, *where, *[o for o in overrides if o != "-m"])
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        ln for ln in r.stderr.splitlines() if ln.startswith("lnbench: error: ")
    ]
    assert "Traceback" not in r.stderr + r.stdout
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # no run or sweep directory, no lock


def test_our_errors_are_one_paragraph_in_hydras_style(tmp_path):
    r = run_cli("train", *TINY_CLI, "dataset.batch_size=0", f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "lnbench: error: dataset.batch_size=0 is not allowed: it must be an integer >= 1."
    ]
    assert not (tmp_path / "run").exists()  # a refused run leaves no directory for a report to draw


def test_hydra_full_error_shows_the_traceback(tmp_path):
    r = run_cli("train", *TINY_CLI, "dataset.batch_size=0", f"hydra.run.dir={tmp_path}", env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr and "ConfigError" in r.stderr


def test_a_bad_job_in_a_sweep_fails_alone_without_traceback(tmp_path):
    r = run_cli("train", "-m", *TINY_CLI, "steps=2", "dataset.batch_size=0,4", f"hydra.sweep.dir={tmp_path}")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    assert "job 0" in r.stderr and "dataset.batch_size=0 is not allowed" in r.stderr
    assert summary_of(tmp_path / "0")["status"] == "failed"
    assert summary_of(tmp_path / "1")["status"] == "completed"
