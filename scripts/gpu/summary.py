"""scripts/gpu/run.sh's last step: every section's results in one $OUT/results.json, and a short table printed
last (the device tool returns the end of the output). argv: the work folder, $OUT, the seconds so far."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def sections(work: Path) -> list[dict]:
    rows = []
    for line in (work / "sections.jsonl").read_text().splitlines() if (work / "sections.jsonl").exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


def pytest_line(out: Path) -> str:
    """pytest's own last line ("80 passed, 1 failed in 71.2s") and the failed tests' ids."""
    try:
        text = (out / "pytest.log").read_text()
    except OSError:
        return "no log"
    last = [ln.strip("= ") for ln in text.splitlines() if re.search(r"\b(passed|failed|error|skipped)\b", ln)]
    failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)))
    return (last[-1] if last else "no result line") + "".join(f"\n    {f}" for f in failed[:20])


def bench_lines(bench) -> list[str]:
    if not bench:
        return ["  (no bench results)"]
    lines = [f"  {'model':9} {'impl':7} {'B':>3} {'T':>4} {'H':>4} {'ms':>8} {'x base':>7}  baseline"]
    for r in bench.get("rows", []):
        if r.get("section") == "rnn":
            lines.append(
                f"  {r['model']:9} {r['impl']:7} {r['batch']:>3} {r['seq_len']:>4} {r['hidden']:>4} "
                f"{r['ms_median']:8.2f} {r['ratio']:7.2f}  {r['baseline']}"
            )
    return lines


def option_lines(rows) -> list[str]:
    if not rows:
        return ["  (no results)"]
    lines = []
    for r in rows:
        ms = f"{r['ms_median']:8.2f}" if "ms_median" in r else "       -"
        ratio = f"{r['ratio_to_cudnn']:6.2f}" if "ratio_to_cudnn" in r else "     -"
        err = f"{r['grad_rel_error']:.1e}" if "grad_rel_error" in r else "-"
        note = r.get("error") or (f"compiled in {r['compile_s']} s" if "compile_s" in r else "")
        lines.append(f"  {r['option']:13} B={r['batch']:<3} {ms} ms {ratio}x cuDNN  grad err {err:7}  {note}"[:160])
    return lines


def main() -> int:
    work, out, seconds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    results = {
        "env": load(work / "env.json"),
        "sections": sections(work),
        "pytest": pytest_line(out),
        "bench": load(work / "bench.json"),
        "ln_lstm_options": load(work / "options.json"),
        "determinism": load(work / "determinism.json"),
        "packed": load(work / "packed.json"),
        "seconds": seconds,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    env = results["env"] or {}
    print("\n" + "=" * 100)
    print(
        f"lnbench GPU run ({seconds} s): {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
        f"CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, triton {env.get('triton')}"
    )
    print("sections: " + " | ".join(f"{s['section']} {s['status']} {s['seconds']}s" for s in results["sections"]))
    print("pytest -m cuda: " + results["pytest"])
    print("bench (fwd+bwd per sequence, median ms; x base: median ratio to nn.LSTM / nn.GRU in the same round):")
    print("\n".join(bench_lines(results["bench"])))
    print("ln_lstm, each way (fwd+bwd, median ms, ratio to nn.LSTM; grad err: relative to eager):")
    print("\n".join(option_lines(results["ln_lstm_options"])))
    print("same bits twice (determinism):")
    for r in results["determinism"] or []:
        what = r.get("error") or ("same" if r.get("same_bits") else f"differ ({r.get('first_difference')})")
        mode = "on " if r["deterministic_algorithms"] else "off"
        print(f"  {r['model']:18} {r.get('dataset', ''):8} deterministic algorithms {mode}: {what}"[:160])
    if results["packed"] is not None:
        print("packed replicas:")
        rows = results["packed"] if isinstance(results["packed"], list) else [results["packed"]]
        for r in rows[:20]:
            print("  " + json.dumps(r)[:200])
    print(f"files in {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
