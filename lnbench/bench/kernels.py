"""`lnbench bench`'s timing of layers and optimizer steps (the rnn and mlp rows; lnbench.bench.cli describes them);
how each candidate is timed is lnbench.bench.timing's."""

from __future__ import annotations

import functools
import statistics
from typing import Callable

import torch
from omegaconf import OmegaConf
from torch import nn

from lnbench.bench.timing import Candidate, summarize, time_interleaved
from lnbench.config.presets import read_preset
from lnbench.config.schema import SequenceModelConfig, model_presets
from lnbench.data.base import DataSpec
from lnbench.models import MLP
from lnbench.nn.fast.layers import NativeGRULayer, TorchKernelLayer, fast_layer
from lnbench.nn.norm import as_norm_config
from lnbench.nn.rnn import CELLS, RecurrentLayer


def _saved_mb(fn: Callable[[], torch.Tensor]) -> float:
    """MB of distinct storages saved for backward while running fn (which returns the loss)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        except Exception:  # noqa: BLE001 - a tensor without storage (e.g. sparse): count its elements
            seen[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    loss.backward()
    return sum(seen.values()) / 2**20


def _mem_mb(fn: Callable[[], torch.Tensor], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn().backward()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    return _saved_mb(fn)


# --------------------------------------------------------------------------------------------------
# Recurrent models
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def rnn_presets() -> dict[str, tuple[str, dict]]:
    """{preset: (cell, norm)} for every recurrent model preset of conf/model, read from its YAML over the
    schema's defaults, so the bench times the cells the presets train (issue 11: no second list)."""

    found = {}
    for name in model_presets("base_sequence"):
        own = read_preset("model", name)
        own.pop("defaults", None)
        cfg = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(SequenceModelConfig), own), enum_to_str=True)
        found[name] = (cfg["cell"], cfg["norm"])
    return found


def _preset_cell(model: str, F: int, H: int, T: int) -> nn.Module:
    cell, norm = rnn_presets()[model]
    return CELLS[cell](F, H, as_norm_config(dict(norm)), time_steps=T)


def fast_rnn_models() -> list[str]:
    """The recurrent presets a model runs on a fused or fast layer (the default rows); the others run the
    reference loop (`impl=ref`), timed only when named with --models."""
    return [m for m in rnn_presets() if _impls_for(m, False) != ["ref"]]


def _rnn_layer(model: str, impl: str, F: int, H: int, T: int, device, dtype) -> nn.Module:
    cell = _preset_cell(model, F, H, T).to(device=device, dtype=dtype)
    layer = RecurrentLayer(cell) if impl == "ref" else fast_layer(cell, use_native=impl not in ("ops", "torch"))
    if layer is None:
        raise ValueError(f"{model}: no {impl} implementation")
    return layer


def _impls_for(model: str, with_ref: bool) -> list[str]:
    """How a model runs the preset's cell, first as SequenceModel picks it: "torch" (torch's fused kernel),
    "native" (lnbench's C++ kernels, then beside it "ops", the same layer on torch's ops only, or for the
    un-normalized GRU "torch", torch's GRU) or "ops"; and "ref" with --ref or when that is the only way."""

    layer = fast_layer(_preset_cell(model, 4, 4, 2))
    if layer is None:
        impls = []
    elif isinstance(layer, NativeGRULayer):
        impls = ["native", "torch"] if layer.native(torch.zeros(1)) else ["torch"]
    elif isinstance(layer, TorchKernelLayer):
        impls = ["torch"]
    else:
        impls = ["native", "ops"] if layer.native(torch.zeros(1)) else ["ops"]
    return impls + (["ref"] if with_ref or not impls else [])


def _rnn_candidate(name: str, impl: str, layer: nn.Module, x: torch.Tensor, device, baseline=False) -> Candidate:
    def loss():
        out, _ = layer(x)
        return out.sum()

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        loss().backward()

    return Candidate(name, impl, step, lambda: _mem_mb(loss, device), baseline)


def bench_rnn(
    models: list[str], shapes, reps: int, warmup: int, F: int, device, dtype, with_ref: bool, log
) -> list[dict]:
    rows: list[dict] = []
    for B, T, H in shapes:
        for family in ("lstm", "gru"):
            fam_models = [m for m in models if rnn_presets()[m][0] == family]
            if not fam_models:
                continue
            torch.manual_seed(0)
            x = torch.randn(T, B, F, device=device, dtype=dtype, requires_grad=True)
            base_mod = (nn.LSTM if family == "lstm" else nn.GRU)(F, H).to(device=device, dtype=dtype)
            base_name = f"nn.{family.upper()}"
            cands = [_rnn_candidate(base_name, "torch", base_mod, x, device, baseline=True)]
            for m in fam_models:
                for impl in _impls_for(m, with_ref):
                    if rnn_presets()[m][1]["kind"] == "batch" and B < 2:
                        continue  # BN cannot train at batch 1
                    cands.append(_rnn_candidate(m, impl, _rnn_layer(m, impl, F, H, T, device, dtype), x, device))
            log(f"  B={B} T={T} H={H}: {', '.join(c.name + '/' + c.impl for c in cands)}")
            times = time_interleaved(cands, reps, warmup, device)
            base_ts = times[base_name + "/torch"]
            for c in cands:
                ts = times[c.name + "/" + c.impl]
                st = summarize(ts)
                rows.append(
                    {
                        "section": "rnn",
                        "model": c.name,
                        "impl": c.impl,
                        "batch": B,
                        "seq_len": T,
                        "hidden": H,
                        "input_size": F,
                        "reps": reps,
                        **st,
                        "samples_per_s": B / (st["ms_median"] / 1e3),
                        "mem_mb": c.mem(),
                        "baseline": base_name,
                        "baseline_ms_median": statistics.median(base_ts),
                        "ratio": statistics.median(a / b for a, b in zip(ts, base_ts)),
                    }
                )
    return rows


# --------------------------------------------------------------------------------------------------
# MLP (section 6.6): fused vs foreach Adam
# --------------------------------------------------------------------------------------------------
def mlp_model(norm: str, device, dtype) -> nn.Module:
    """The MLP presets' model (784-1000-1000-10) with normalizer `norm`, built by lnbench's own class."""

    spec = DataSpec(kind="flat", task="classify", num_outputs=10, input_size=784)
    return MLP(spec, [1000, 1000], {"kind": norm}).to(device=device, dtype=dtype)


def bench_mlp(reps: int, warmup: int, device, dtype, batches, log) -> list[dict]:
    rows: list[dict] = []
    for B in batches:
        for norm in ("none", "batch", "layer"):
            torch.manual_seed(0)
            x = torch.randn(B, 784, device=device, dtype=dtype)
            y = torch.randint(0, 10, (B,), device=device)
            cands = []
            for impl in ("foreach", "fused"):
                model = mlp_model(norm, device, dtype)
                try:
                    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **{impl: True})
                except (RuntimeError, TypeError, ValueError) as e:  # fused Adam missing on this device/torch
                    log(f"  mlp {norm} B={B}: no {impl} Adam here ({e})")
                    continue

                def loss(model=model):
                    return nn.functional.cross_entropy(model(x), y)

                def step(model=model, opt=opt, loss=loss):
                    opt.zero_grad(set_to_none=True)
                    loss().backward()
                    opt.step()

                name = {"none": "mlp", "batch": "bn_mlp", "layer": "ln_mlp"}[norm]
                cands.append(
                    Candidate(name, f"adam_{impl}", step, lambda loss=loss: _mem_mb(loss, device), impl == "foreach")
                )
            if not cands:
                continue
            log(f"  B={B} {cands[0].name}: {', '.join(c.impl for c in cands)}")
            times = time_interleaved(cands, reps, warmup, device)
            base = cands[0]
            base_ts = times[base.name + "/" + base.impl]
            for c in cands:
                ts = times[c.name + "/" + c.impl]
                st = summarize(ts)
                rows.append(
                    {
                        "section": "mlp",
                        "model": c.name,
                        "impl": c.impl,
                        "batch": B,
                        "seq_len": None,
                        "hidden": 1000,
                        "input_size": 784,
                        "reps": reps,
                        **st,
                        "samples_per_s": B / (st["ms_median"] / 1e3),
                        "mem_mb": c.mem(),
                        "baseline": f"{base.name}/{base.impl}",
                        "baseline_ms_median": statistics.median(base_ts),
                        "ratio": statistics.median(a / b for a, b in zip(ts, base_ts)),
                    }
                )
    return rows
