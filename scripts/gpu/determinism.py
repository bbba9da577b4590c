"""Which presets give the same bits twice on this GPU: each runs twice from the same seed (the recipe, in this
process) and its metrics are compared, with torch's default algorithms and, in a second process, with
`torch.use_deterministic_algorithms(True)` and CUBLAS_WORKSPACE_CONFIG=:4096:8. tests/cuda/test_cuda_resume.py
asserts the presets whose sums have a fixed order; this measures the others (the Transformer's attention) beside
a few of those. Writes one JSON (--json); prints a table."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from lnbench.config.schema import register_configs
from lnbench.launch.entry import CONF_DIR
from lnbench.training.recipe import train

CASES = [
    ("transformer", "adding"),
    ("preln_transformer", "copy"),
    ("ln_lstm", "copy"),  # the embedding's backward beside the Triton recurrence
    ("lstm", "adding"),
    ("gru", "copy"),
]
TINY = {
    "adding": ["dataset.seq_len=12", "dataset.val_size=32", "dataset.test_size=32", "dataset.batch_size=8"],
    "copy": ["dataset.seq_len=12", "dataset.copy_len=3", "dataset.val_size=32", "dataset.test_size=32"],
}


def config(model: str, dataset: str, device: str):
    register_configs()
    overrides = [f"model={model}", f"dataset={dataset}", *TINY[dataset], "model.hidden_size=16", "steps=8"]
    overrides += ["log_every=1", "eval_every=4", f"device={device}", "logger=none", "progress=false"]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("train", overrides=overrides)


def metrics(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines]


def twice(cases, device: str) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, dataset in cases:
            det = torch.are_deterministic_algorithms_enabled()
            row = {"model": model, "dataset": dataset, "deterministic_algorithms": det}
            try:
                runs = []
                for i in range(2):
                    run_dir = Path(tmp) / f"{model}-{dataset}-{i}"
                    train(config(model, dataset, device), run_dir)
                    runs.append(metrics(run_dir))
                row["same_bits"] = runs[0] == runs[1]
                row["first_difference"] = next(
                    (f"step {a['step']} {a['split']}" for a, b in zip(*runs) if a != b), None
                )
            except Exception as e:  # noqa: BLE001 - a failure is this case's result
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rows.append(row)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default="determinism.json", help="where the rows go ('-': the last line of stdout)")
    p.add_argument("--deterministic", action="store_true", help="(the second process) deterministic algorithms on")
    args = p.parse_args()
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
        rows = twice([c for c in CASES if "transformer" in c[0]], args.device)
    else:
        rows = twice(CASES, args.device)
        env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        cmd = [sys.executable, __file__, "--deterministic", "--device", args.device, "--json", "-"]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            rows += (
                json.loads(done.stdout.strip().splitlines()[-1])
                if done.returncode == 0
                else [{"model": "transformers", "deterministic_algorithms": True, "error": done.stderr[-300:]}]
            )
        except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
            rows.append({"model": "transformers", "deterministic_algorithms": True, "error": repr(e)[:300]})
    if args.json == "-":
        print(json.dumps(rows))
        return 0
    Path(args.json).write_text(json.dumps(rows, indent=1))
    for r in rows:
        same = r.get("same_bits")
        mode = "on " if r["deterministic_algorithms"] else "off"
        what = r.get("error") or ("same bits" if same else f"differ from {r['first_difference']}")
        print(f"{r['model']:18} {r.get('dataset', ''):8} deterministic algorithms {mode}: {what}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    raise SystemExit(main())
