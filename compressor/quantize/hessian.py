"""Q-BERT's own sensitivity: the Hessian of the task loss per unit (Shen et al., 2020).

Where ``sensitivity.py`` *measures* each unit's cost (quantise it alone, score the graph),
Q-BERT predicts it from second-order information: a unit whose loss surface is sharp (a large
top Hessian eigenvalue) is hurt more by the same weight perturbation. Per unit (the weight
matrices ``export.int8.quantizable_units`` names, one matrix or one encoder layer), on a
seeded sample of rows split into batches:

- the top eigenvalue of the unit's Hessian block, by power iteration on Hessian-vector
  products (``torch.autograd`` double backward), at most ``iterations`` products and
  stopped when the Rayleigh quotient moves by less than ``tol`` (relative);
- its trace, by Hutchinson's estimator (``E[v^T H v]`` over ``trace_samples`` Rademacher ``v``
  a batch).

Scores (larger: keep FP32 first):
``eigenvalue``: Q-BERT's ``|mean(lambda)| + std(lambda)`` over the batches (their eq. 4);
``trace``: the mean trace per weight (HAWQ-V2's average trace);
``weighted_trace``: that times ``||Q(W) - W||^2``, the squared error INT8 makes in the unit's
weights under the preset (HAWQ-V2's second-order loss estimate), which also counts how
large the unit is and how well its weights round.
"""
from __future__ import annotations

import math
import os
import re
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from compressor.core.errors import CompressorError
from compressor.quantize.configs import HESSIAN_SCORES
_IN_LAYER = re.compile(r"^[A-Za-z_]+\.(\d+)(?:\.(.+))?$")   # layer.3, layer.3.output.dense


# -- units -> parameters -------------------------------------------------------------

def unit_parameters(model: nn.Module, units: Sequence[str]) -> Dict[str, List[nn.Parameter]]:
    """The weight matrices (2-D parameters ONNX Runtime quantises) behind each unit name of
    ``quantizable_units``: ``layer.N`` (every projection of encoder layer N), ``layer.N.<path>``
    (the Linear at ``path`` in layer N; ``attention.qkv``: its query, key and value),
    ``embeddings`` (the embedding tables), or another module's path (``pooler.dense``)."""
    from compressor.core.arch import arch_of

    spec = arch_of(model)
    layers = spec.get_layers(model)
    found: Dict[str, List[nn.Parameter]] = {}
    for name in units:
        match = _IN_LAYER.match(name)
        if name == "embeddings":
            modules = [m for m in spec.get_embeddings(model).modules() if isinstance(m, nn.Embedding)]
        elif match and int(match.group(1)) < len(layers):
            layer, path = layers[int(match.group(1))], match.group(2)
            if path is None:
                modules = list(spec.attention(layer).values()) + list(spec.ffn(layer).values())
            elif path == "attention.qkv":
                modules = [linear for linear, _ in spec.qkv_projections(layer)]
            else:
                modules = [_submodule(layer, path)]
        else:
            modules = [_submodule(model, name) or _submodule(spec.base_model(model), name)]
        params = [m.weight for m in modules if m is not None and getattr(m, "weight", None) is not None
                  and m.weight.dim() == 2]
        if not params:
            raise CompressorError(f"no weight matrix of {type(model).__name__} matches the unit '{name}' "
                                  "of the ONNX graph: is the checkpoint the graph's source?")
        found[name] = params
    return found


def _submodule(module: nn.Module, path: str) -> Optional[nn.Module]:
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


# -- Hessian-vector products ----------------------------------------------------------

def hvp(grads: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
        vector: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """``H v`` for the block of ``params``: the gradient of ``grads . v`` (``grads`` made with
    ``create_graph=True``); the graph is kept for the next product."""
    out = torch.autograd.grad(grads, params, grad_outputs=list(vector), retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if o is None else o.detach() for o, p in zip(out, params)]


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return float(sum((x * y).sum() for x, y in zip(a, b)))


def top_eigenvalue(grads, params, iterations: int = 20, tol: float = 1e-3,
                   generator: Optional[torch.Generator] = None) -> dict:
    """The eigenvalue of largest magnitude of the block's Hessian by power iteration: ``v`` starts
    Gaussian (seeded), each step ``v <- Hv / |Hv|``; the estimate is the Rayleigh quotient
    ``v^T H v``, stopped when it moves by less than ``tol`` of itself or after ``iterations``."""
    v = [torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device) for p in params]
    norm = math.sqrt(_dot(v, v))
    v = [x / norm for x in v]
    value, steps, converged = None, 0, False
    for steps in range(1, iterations + 1):
        hv = hvp(grads, params, v)
        new = _dot(v, hv)
        norm = math.sqrt(_dot(hv, hv))
        if norm == 0:
            value, converged = 0.0, True
            break
        v = [x / norm for x in hv]
        if value is not None and abs(new - value) <= tol * (abs(value) + 1e-12):
            value, converged = new, True
            break
        value = new
    return {"eigenvalue": float(value), "iterations": steps, "converged": converged}


def hutchinson_trace(grads, params, samples: int = 8, generator: Optional[torch.Generator] = None) -> float:
    """The trace of the block's Hessian by Hutchinson: the mean of ``v^T H v`` over ``samples``
    Rademacher vectors ``v`` (entries +-1), one product each. (One product with the whole model's
    Hessian would estimate every block at once, but the cross-block terms add their variance to
    each: a small block beside a sharp one comes out wrong, so each block gets its own vectors.)"""
    total = 0.0
    for _ in range(samples):
        v = [(torch.randint(0, 2, p.shape, generator=generator) * 2 - 1).to(p) for p in params]
        total += _dot(v, hvp(grads, params, v))
    return total / max(samples, 1)


# -- INT8 weight error ----------------------------------------------------------------

def quantisation_error(weight: torch.Tensor, preset, per_row: Optional[bool] = None) -> float:
    """``||Q(W) - W||^2`` of ONNX Runtime's dynamic INT8 of one weight matrix under ``preset``:
    symmetric (int8) or asymmetric (uint8) with 7 bits where ``reduce_range``, per output
    feature (a row of a Linear's weight) where ``per_channel``, else per tensor."""
    w = weight.detach().float()
    per_row = preset.per_channel if per_row is None else per_row
    w2 = w if per_row else w.reshape(1, -1)
    bits = 7 if preset.reduce_range else 8
    if preset.symmetric_weights:
        qmax = 2 ** (bits - 1) - 1
        scale = (w2.abs().amax(dim=1, keepdim=True) / qmax).clamp_min(1e-12)
        q = torch.clamp(torch.round(w2 / scale), -qmax, qmax) * scale
    else:
        qmax = 2 ** bits - 1
        lo = w2.amin(dim=1, keepdim=True).clamp_max(0)
        hi = w2.amax(dim=1, keepdim=True).clamp_min(0)
        scale = ((hi - lo) / qmax).clamp_min(1e-12)
        zero = torch.round(-lo / scale)
        q = (torch.clamp(torch.round(w2 / scale) + zero, 0, qmax) - zero) * scale
    return float((q - w2).pow(2).sum())


# -- the measure ------------------------------------------------------------------------

def hessian_sensitivity(model: nn.Module, tokenizer, rows_set, units: Sequence[str], preset=None,
                        rows: int = 64, batch_size: int = 16, iterations: int = 20, tol: float = 1e-3,
                        trace_samples: int = 8, seed: int = 42, max_length: int = 128,
                        score: str = "eigenvalue", granularity: str = "matrix") -> dict:
    """Each unit's top Hessian eigenvalue (per batch, then Q-BERT's score) and Hutchinson trace of
    the task loss on ``rows`` rows of ``rows_set`` drawn with ``seed``, in batches of
    ``batch_size``; units sorted by ``score``, largest first (the order mixed precision keeps
    units FP32 in). ``model`` is put in eval mode (no dropout: every product sees one function)."""
    import time

    from compressor.core.batches import encode, iter_batches, to_device
    from compressor.core.progress import progress
    from compressor.engine.train import task_loss

    if score not in HESSIAN_SCORES:
        raise CompressorError(f"hessian score must be one of {', '.join(HESSIAN_SCORES)}, got {score!r}")
    if score == "weighted_trace" and preset is None:
        raise CompressorError("the weighted_trace score needs the hardware preset (how weights round)")
    if not rows_set.labelled:
        raise CompressorError(f"the Hessian of the task loss needs labelled rows; {rows_set.split} has rows "
                              "without a label")
    start = time.perf_counter()
    sample = rows_set.sample(min(rows, len(rows_set)), seed)
    model.eval()
    device = next(model.parameters()).device
    by_unit = unit_parameters(model, units)
    every = [p for ps in by_unit.values() for p in ps]
    wanted = {id(p) for p in every}
    saved = {}
    for p in model.parameters():   # only the units' weights need gradients
        saved[p] = p.requires_grad
        p.requires_grad_(id(p) in wanted)
    items = encode(tokenizer, sample.examples, max_length, model.config)
    generator = torch.Generator().manual_seed(seed)
    batches = list(iter_batches(items, batch_size, tokenizer.pad_token_id or 0,
                                rows_set.task.is_regression, generator=generator))
    eigen: Dict[str, List[dict]] = {n: [] for n in by_unit}
    traces: Dict[str, List[float]] = {n: [] for n in by_unit}
    losses = []
    try:
        for batch in progress(batches, total=len(batches), desc="hessian", unit="batch"):
            batch = to_device(batch, device)
            loss = task_loss(model, batch)
            losses.append(float(loss.detach()))
            grads = torch.autograd.grad(loss, every, create_graph=True)
            at, grads_by_unit = 0, {}
            for n, ps in by_unit.items():
                grads_by_unit[n] = grads[at:at + len(ps)]
                at += len(ps)
            for n, ps in by_unit.items():
                eigen[n].append(top_eigenvalue(grads_by_unit[n], ps, iterations, tol, generator))
                if trace_samples:
                    traces[n].append(hutchinson_trace(grads_by_unit[n], ps, trace_samples, generator))
            del grads, grads_by_unit, loss
    finally:
        for p, flag in saved.items():
            p.requires_grad_(flag)
    report_units = []
    for position, (n, ps) in enumerate(by_unit.items()):
        values = torch.tensor([e["eigenvalue"] for e in eigen[n]], dtype=torch.float64)
        mean = float(values.mean())
        std = float(values.std(unbiased=False)) if len(values) > 1 else 0.0
        count = sum(p.numel() for p in ps)
        trace = float(sum(traces[n]) / len(traces[n])) if traces[n] else None
        error = sum(quantisation_error(p, preset, per_row=preset.per_channel and p.dim() == 2
                                       and not isinstance(_owner(model, p), nn.Embedding))
                    for p in ps) if preset is not None else None
        entry = {"unit": n, "position": position, "parameters": count,
                 "eigenvalues": [round(e["eigenvalue"], 6) for e in eigen[n]],
                 "iterations": [e["iterations"] for e in eigen[n]],
                 "converged": all(e["converged"] for e in eigen[n]),
                 "eigenvalue_mean": mean, "eigenvalue_std": std, "qbert": abs(mean) + std,
                 "trace": trace, "trace_per_weight": trace / count if trace is not None else None,
                 "int8_error": error,
                 "weighted_trace": trace / count * error if trace is not None and error is not None else None}
        entry["score"] = entry[{"eigenvalue": "qbert", "trace": "trace_per_weight"}.get(score, score)]
        if entry["score"] is None:
            raise CompressorError(f"the {score} score needs trace_samples > 0")
        report_units.append(entry)
    order = sorted(report_units, key=lambda r: (-r["score"], r["unit"]))
    return {"measure": "hessian", "score": score, "granularity": granularity, "units": order,
            "examples": len(sample), "split": rows_set.split, "batches": len(batches),
            "batch_size": batch_size, "iterations": iterations, "tol": tol, "trace_samples": trace_samples,
            "seed": seed, "mean_loss": sum(losses) / max(len(losses), 1),
            "wall_time_s": round(time.perf_counter() - start, 2)}


def _owner(model: nn.Module, param: torch.Tensor) -> Optional[nn.Module]:
    for module in model.modules():
        if any(p is param for p in module.parameters(recurse=False)):
            return module
    return None


def hessian_report(model_dir: str, src_folder: str, rows_set, preset, granularity: str, config,
                   max_length: int = 128) -> dict:
    """The Hessian measure for the units of ``src_folder``'s graph, from ``model_dir``'s checkpoint
    (eager attention: double backward through it), as ``config`` (a mixed/auto config) says."""
    from compressor.core.models import load_for_task
    from compressor.export.int8 import onnx_file, quantizable_units

    units = quantizable_units(onnx_file(src_folder), granularity)
    from compressor.export.onnx import checkpoint_behind

    net, tokenizer = load_for_task(checkpoint_behind(model_dir, "sensitivity: hessian"), rows_set.task,
                                   attn_implementation="eager")
    report = hessian_sensitivity(net, tokenizer, rows_set, list(units), preset, rows=config.hessian_rows,
                                 batch_size=config.hessian_batch_size, iterations=config.hessian_iterations,
                                 tol=config.hessian_tol, trace_samples=config.hessian_trace_samples,
                                 seed=config.seed, max_length=max_length, score=config.hessian_score,
                                 granularity=granularity)
    for entry in report["units"]:
        entry["nodes"] = units[entry["unit"]]
    return report


def table(report: dict) -> str:
    """The Hessian report as a Markdown table (the order units are kept FP32 in)."""
    lines = [f"Hessian of the task loss per unit ({report['examples']} {report['split']} rows, "
             f"{report['batches']} batches of {report['batch_size']}; power iteration <= {report['iterations']} "
             f"products, tol {report['tol']}; Hutchinson {report['trace_samples']} samples); ordered by "
             f"{report['score']}", "",
             "| unit | eigenvalue mean | std | Q-BERT: abs(mean) + std | trace / weight | INT8 error | weighted trace |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def f(x):
        return "" if x is None else f"{x:.4g}"
    for r in report["units"]:
        lines.append(f"| {r['unit']} | {f(r['eigenvalue_mean'])} | {f(r['eigenvalue_std'])} | {f(r['qbert'])} | "
                     f"{f(r['trace_per_weight'])} | {f(r['int8_error'])} | {f(r['weighted_trace'])} |")
    return "\n".join(lines) + "\n"


def write_report(report: dict, folder: str) -> Dict[str, str]:
    """``sensitivity.md`` (the Hessian table) and ``sensitivity.png`` (each unit's score) in ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compressor.core.io import save_figure, write_text

    md = os.path.join(folder, "sensitivity.md")
    write_text(md, table(report))
    units = sorted(report["units"], key=lambda r: r["position"])
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(units) + 2), 4))
    ax.bar(range(len(units)), [r["score"] for r in units], color="#c55a11")
    ax.set_xticks(range(len(units)))
    ax.set_xticklabels([r["unit"] for r in units], rotation=75, ha="right", fontsize=7)
    ax.set_yscale("log" if all(r["score"] > 0 for r in units) else "linear")
    ax.set_ylabel(f"Hessian {report['score']}")
    ax.set_title(f"Hessian sensitivity per unit ({report['examples']} {report['split']} rows)")
    fig.tight_layout()
    return {"table": md, "plot": save_figure(fig, os.path.join(folder, "sensitivity.png"), dpi=120)}
