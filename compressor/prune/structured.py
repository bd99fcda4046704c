"""Attention heads and FFN neurons: score each, remove the least important for real.

Importance
- heads, ``gradient`` (Michel et al. 2019): a mask of ones multiplies each head's output
  (the input of the attention output projection); the importance of a head is the
  absolute gradient of the task loss with respect to its mask entry, summed over the
  batches of a training sample, then normalised per layer (L2) so layers compare.
- heads, ``magnitude``: the L2 norm of the head's query, key and value rows and
  attention-output columns.
- FFN neurons, ``taylor`` (first-order Taylor, Molchanov et al.): the same mask trick on
  the FFN activations, |sum over tokens of a * dL/da| per batch, summed; normalised per
  layer. ``magnitude``: norm of the neuron's input row times that of its output column.

Selection ranks units over the whole model (``scope: global``) or removes the same share
from each layer (``layer``), and always leaves ``min_heads`` heads and ``min_ffn`` neurons
in a layer; ``ffn_multiple`` then rounds each layer's FFN width to a multiple of it (the
best-scored neurons kept), for kernels that prefer such widths. ``iterations`` > 1 removes
the share in equal steps, scoring again and recovering after each. Removal goes through
:func:`compressor.core.shapes.resize_layers`: the projections shrink per layer and the attention
runs on the heads left (MPNet's shared relative-position bias is sliced per layer there).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from compressor.core import distributed
from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.io import save_figure
from compressor.core.progress import progress
from compressor.core.shapes import resize_layers, shape_of
from compressor.prune.configs import StructuredPruneConfig, register_pruner


class UnitMasks:
    """Multiplicative masks on each layer's heads and FFN neurons, through forward pre-hooks
    on the attention output and FFN output projections (whose inputs are the heads side by
    side and the neurons' activations). ``with UnitMasks(model) as masks:`` removes the hooks
    on exit. Masks of zeros give the outputs that removing those units gives."""

    def __init__(self, model: nn.Module, requires_grad: bool = False):
        spec = arch_of(model)
        self.model = model
        self.head_size = spec.hidden_size(model.config) // spec.num_heads(model.config)
        shape = shape_of(model)
        device = next(model.parameters()).device
        self.heads = [torch.ones(n, device=device, requires_grad=requires_grad) for n in shape["heads"]]
        self.ffn = [torch.ones(n, device=device, requires_grad=requires_grad) for n in shape["ffn"]]
        self._hooks = []
        for i, layer in enumerate(spec.get_layers(model)):
            out = spec.attention(layer)["attention_output"]
            self._hooks.append(out.register_forward_pre_hook(self._scale(self.heads, i, self.head_size)))
            self._hooks.append(spec.ffn(layer)["ffn_out"].register_forward_pre_hook(
                self._scale(self.ffn, i, 1)))

    @staticmethod
    def _scale(masks: List[torch.Tensor], i: int, repeat: int):
        def hook(module, args):
            x = args[0]
            mask = masks[i] if repeat == 1 else masks[i].repeat_interleave(repeat)
            return (x * mask.to(x.dtype),) + tuple(args[1:])
        return hook

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# -- importance ------------------------------------------------------------

def gradient_importance(job, model: nn.Module) -> Dict[str, List[np.ndarray]]:
    """Per layer, |dL/dmask| of each head and FFN neuron summed over the job's sample batches."""
    was_training = model.training
    model.eval()   # no dropout: the scores should not depend on its draws
    wanted = [p for p in model.parameters() if p.requires_grad]
    for p in wanted:
        p.requires_grad_(False)   # only the masks need gradients
    heads = ffn = None
    try:
        with UnitMasks(model, requires_grad=True) as masks:
            heads = [torch.zeros_like(m) for m in masks.heads]
            ffn = [torch.zeros_like(m) for m in masks.ffn]
            batches = list(job.batches())
            for batch in progress(batches, desc="importance", unit="batch"):
                loss = job.loss(model, batch)
                grads = torch.autograd.grad(loss, masks.heads + masks.ffn)
                for acc, g in zip(heads + ffn, grads):
                    acc += g.detach().abs()
    finally:
        for p in wanted:
            p.requires_grad_(True)
        model.train(was_training)
    return {"heads": [h.cpu().numpy() for h in heads], "ffn": [f.cpu().numpy() for f in ffn]}


def magnitude_importance(model: nn.Module) -> Dict[str, List[np.ndarray]]:
    """Per layer, weight norms of each head (q, k, v rows and output columns) and FFN neuron
    (input row, and gate row, times output column)."""
    spec = arch_of(model)
    size = spec.hidden_size(model.config) // spec.num_heads(model.config)
    heads, ffn = [], []
    with torch.no_grad():
        for layer in spec.get_layers(model):
            qkv = spec.qkv_weights(layer)
            out = spec.attention(layer)["attention_output"].weight
            n = out.shape[1] // size
            sq = sum(w.float().reshape(n, size, -1).pow(2).sum(dim=(1, 2)) for w, _ in qkv.values())
            sq = sq + out.float().reshape(out.shape[0], n, size).pow(2).sum(dim=(0, 2))
            heads.append(sq.sqrt().cpu().numpy())
            w = spec.ffn_weights(layer)
            rows = w["in"].float().pow(2).sum(1)
            if w["gate"] is not None:
                rows = rows + w["gate"].float().pow(2).sum(1)
            ffn.append((rows.sqrt() * w["out"].float().pow(2).sum(0).sqrt()).cpu().numpy())
    return {"heads": heads, "ffn": ffn}


def importance(job, model: nn.Module, config: StructuredPruneConfig) -> Dict[str, List[np.ndarray]]:
    """Head and FFN importance as the config asks (gradient scores share one pass)."""
    grads = None
    if "gradient" == config.head_importance or "taylor" == config.ffn_importance:
        grads = gradient_importance(job, model)
    mags = magnitude_importance(model) if "magnitude" in (config.head_importance,
                                                          config.ffn_importance) else None
    # every process of a data-parallel run prunes by rank 0's scores, so all keep one shape
    return distributed.broadcast({"heads": (grads if config.head_importance == "gradient" else mags)["heads"],
                                  "ffn": (grads if config.ffn_importance == "taylor" else mags)["ffn"]})


def normalise(scores: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Each layer's scores over their L2 norm (Michel et al.), so layers can be ranked together."""
    return [s / (np.linalg.norm(s) + 1e-20) for s in scores]


# -- selection -------------------------------------------------------------

def select(scores: Sequence[np.ndarray], remove: int, scope: str, minimum: int,
           per_layer_remove: Optional[Sequence[int]] = None) -> List[List[int]]:
    """The units each layer keeps (current indices, ascending) after removing ``remove`` in all.

    ``global``: the lowest normalised scores over the model go first, a layer never going
    below ``minimum``. ``layer``: ``per_layer_remove[i]`` go from layer ``i``.
    """
    keep = [list(range(len(s))) for s in scores]
    if scope == "layer":
        out = []
        for s, n in zip(scores, per_layer_remove):
            n = max(0, min(n, len(s) - minimum))
            drop = set(np.argsort(s, kind="stable")[:n].tolist())
            out.append([j for j in range(len(s)) if j not in drop])
        return out
    ranked = sorted(((float(v), i, j) for i, s in enumerate(normalise(scores))
                     for j, v in enumerate(s)), key=lambda t: (t[0], t[1], t[2]))
    left = [len(s) for s in scores]
    dropped = [set() for _ in scores]
    for _, i, j in ranked:
        if remove <= 0:
            break
        if left[i] > minimum:
            dropped[i].add(j)
            left[i] -= 1
            remove -= 1
    return [[j for j in k if j not in d] for k, d in zip(keep, dropped)]


def align(keep: List[List[int]], scores: Sequence[np.ndarray], multiple: int, minimum: int) -> List[List[int]]:
    """Each layer's kept units rounded to the nearest multiple of ``multiple`` (at least the smallest
    multiple not below ``minimum``, at most the layer's current width): the lowest-scored kept
    units go, or the highest-scored dropped ones come back. Selection alone gives any width; GPU
    tensor-core kernels favour multiples of 8 to 64 (on the CPU's INT8 kernels no consistent
    difference was measured: bench/experiments/ffn_multiple_cpu.sh)."""
    if multiple <= 1:
        return keep
    out = []
    for kept, s in zip(keep, scores):
        width = len(s)
        floor = -(-minimum // multiple) * multiple
        target = min(width, max(floor, int(round(len(kept) / multiple)) * multiple))
        order = np.argsort(-np.asarray(s), kind="stable").tolist()   # highest score first
        kept_set = set(kept)
        if target < len(kept):
            chosen = [j for j in order if j in kept_set][:target]
        else:
            chosen = kept + [j for j in order if j not in kept_set][:target - len(kept)]
        out.append(sorted(chosen))
    return out


def _targets(original: Sequence[int], fraction: float, step: int, steps: int, scope: str,
             now: Sequence[int]):
    """How many units go in this step (in all, and per layer), so that after step ``step``
    of ``steps`` the share ``fraction * step / steps`` of the original units is gone."""
    share = fraction * step / steps
    if scope == "layer":
        per_layer = [max(0, n_now - (n0 - int(round(share * n0)))) for n0, n_now in zip(original, now)]
        return sum(per_layer), per_layer
    gone_target = int(round(share * sum(original)))
    return max(0, gone_target - (sum(original) - sum(now))), None


# -- the method ------------------------------------------------------------

@register_pruner(StructuredPruneConfig)
def prune_structured(job, config: StructuredPruneConfig) -> dict:
    """Remove ``heads`` and ``ffn`` shares of the model's heads and FFN neurons."""
    first = shape_of(job.model)
    if first.get("linear_rank"):
        raise CompressorError("this model's Linears are factorised (lowrank): heads and FFN neurons "
                              "cannot be pruned from the factors; prune first, then factorise")
    original = {"heads": list(first["heads"]), "ffn": list(first["ffn"])}
    steps: List[dict] = []
    first_scores = None
    for step in range(1, config.iterations + 1):
        model = job.model.to(job.device)
        now = shape_of(model)
        scores = importance(job, model, config)
        if first_scores is None:
            first_scores = scores
        keep = {}
        for unit, fraction, minimum in (("heads", config.heads, config.min_heads),
                                        ("ffn", config.ffn, config.min_ffn)):
            if not fraction:
                keep[unit] = None
                continue
            remove, per_layer = _targets(original[unit], fraction, step, config.iterations,
                                         config.scope, now[unit])
            keep[unit] = select(scores[unit], remove, config.scope, minimum, per_layer)
            if unit == "ffn":
                keep[unit] = align(keep[unit], scores[unit], config.ffn_multiple, minimum)
        resize_layers(model, heads=keep["heads"], ffn=keep["ffn"])
        shape = shape_of(model)
        entry = {"step": step, "heads": shape["heads"], "ffn": shape["ffn"],
                 "heads_removed": 1 - sum(shape["heads"]) / sum(original["heads"]),
                 "ffn_removed": 1 - sum(shape["ffn"]) / sum(original["ffn"]),
                 "pruned": job.evaluate(desc=f"score pruned ({step}/{config.iterations})")}
        recovered = job.recover(desc=f"recover ({step}/{config.iterations})")
        if recovered is not None:
            entry["recovered"] = {k: recovered[k] for k in ("metrics", "score", "best_step", "steps", "train_time_s")}
        steps.append(entry)
    record = {"heads_before": original["heads"], "ffn_before": original["ffn"],
              "heads_after": steps[-1]["heads"], "ffn_after": steps[-1]["ffn"],
              "steps": steps,
              "importance": {"heads": [s.round(6).tolist() for s in first_scores["heads"]],
                             "head_importance": config.head_importance,
                             "ffn_importance": config.ffn_importance}}
    if job.out_dir:
        record["report_files"] = write_importance_report(first_scores, original, steps[-1],
                                                         job.out_dir, config)
    return record


# -- the importance report -------------------------------------------------

def write_importance_report(scores: Dict[str, List[np.ndarray]], original: dict, last: dict,
                            out_dir: str, config: StructuredPruneConfig) -> List[str]:
    """``importance.md`` (per-layer table) and ``importance.png`` (heat maps of head scores
    and of each layer's FFN scores, sorted, in 32 bins), from the scores of the unpruned model."""
    from compressor.core.io import write_text

    heads = normalise(scores["heads"])
    ffn = normalise(scores["ffn"])
    lines = ["# Importance", "",
             f"Heads scored by {config.head_importance}, FFN neurons by {config.ffn_importance}, "
             f"on {config.importance_rows} training rows, before pruning; each layer's scores "
             "normalised to unit L2 norm.", "",
             "| layer | heads | heads kept | head scores (normalised) | FFN | FFN kept | FFN score mean | FFN score max |",
             "|---:|---:|---:|---|---:|---:|---:|---:|"]
    for i, (h, f) in enumerate(zip(heads, ffn)):
        lines.append(f"| {i} | {original['heads'][i]} | {last['heads'][i]} | "
                     + " ".join(f"{v:.2f}" for v in h)
                     + f" | {original['ffn'][i]} | {last['ffn'][i]} | {float(f.mean()):.4f} | {float(f.max()):.4f} |")
    written = [os.path.join(out_dir, "importance.md")]
    write_text(written[0], "\n".join(lines) + "\n")
    try:
        image = _heatmap(heads, ffn, os.path.join(out_dir, "importance.png"), config)
        written.append(image)
    except ImportError:
        pass
    return [os.path.basename(w) for w in written]


def _heatmap(heads, ffn, path: str, config) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = max(len(h) for h in heads)
    grid = np.full((len(heads), width), np.nan)
    for i, h in enumerate(heads):
        grid[i, :len(h)] = h
    bins = 32
    fgrid = np.stack([np.interp(np.linspace(0, len(f) - 1, bins), np.arange(len(f)), np.sort(f)[::-1])
                      for f in ffn])
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.45 * len(heads) + 1.8),
                             gridspec_kw={"width_ratios": [max(width, 4), bins / 2]})
    for ax, data, title, xlabel in ((axes[0], grid, f"heads ({config.head_importance})", "head"),
                                    (axes[1], fgrid, f"FFN neurons ({config.ffn_importance}), sorted",
                                     "neurons, most to least important")):
        im = ax.imshow(data, aspect="auto", cmap="viridis")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("layer")
        ax.set_yticks(range(len(heads)))
        fig.colorbar(im, ax=ax, fraction=0.046)
    axes[1].set_xticks([])
    fig.tight_layout()
    return save_figure(fig, path)
