"""Intel Neural Compressor 3.x (``neural_compressor.torch.quantization``) as a second backend.

INC quantises a ``torch.export`` graph of the model (PT2E): ``prepare`` adds
observers, a calibration run fills them, ``convert`` writes INT8
quantise/dequantise pairs that ``torch.compile`` (inductor) turns into INT8
kernels. Two traps, both handled here:

- INC's *dynamic* config also needs that calibration run: converted without
  one it returns all-zero logits, silently. We calibrate it, and refuse to
  build any INC model from zero calibration rows; a converted model whose
  logits are all zero where the FP32 model's are not is an error too.
- INC's ``SmoothQuantConfig`` runs only through the Intel Extension for
  PyTorch, which ends at torch 2.8 (this toolkit pins 2.13). We apply the
  SmoothQuant transform (Xiao et al., 2023) ourselves: each Linear's input
  channels are divided by ``s_j = max|X_j|^a / max|W_j|^(1-a)`` and its weight
  columns multiplied by ``s_j`` (an exact rewrite), which moves activation
  outliers into the weights, then INC's static config quantises the result.
  BERT's LayerNorms feed the residual stream too, so the division cannot be
  folded into them; it stays an explicit multiply, as INC's ``folding=False``.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Dict, List, Sequence

import torch
from torch import nn

from compressor.core.arch import uses_token_type_ids
from compressor.core.errors import CompressorError


class SmoothedLinear(nn.Module):
    """``linear(x / s)`` with the weight pre-multiplied by ``s``: the same function, smoother inputs."""

    def __init__(self, linear: nn.Linear, scale: torch.Tensor):
        super().__init__()
        self.linear = linear
        with torch.no_grad():
            linear.weight.mul_(scale)
        self.register_buffer("inv_scale", 1.0 / scale)

    def forward(self, x):
        return self.linear(x * self.inv_scale)


def smooth_quant(model: nn.Module, feeds: Sequence[Dict[str, torch.Tensor]], alpha: float = 0.5) -> int:
    """Apply the SmoothQuant rewrite to every Linear layer in place; returns how many."""
    if not 0 < alpha < 1:
        raise CompressorError(f"smoothquant_alpha must be in (0, 1), got {alpha}")
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    amax: Dict[str, torch.Tensor] = {}

    def hook(name):
        def record(module, args):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0)
            amax[name] = torch.maximum(amax[name], x) if name in amax else x
        return record

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in linears.items()]
    model.eval()
    with torch.no_grad():
        for feed in feeds:
            model(**feed)
    for h in handles:
        h.remove()
    for name, linear in linears.items():
        w_max = linear.weight.detach().abs().amax(0).clamp(min=1e-5)
        x_max = amax[name].clamp(min=1e-5)
        scale = (x_max.pow(alpha) / w_max.pow(1 - alpha)).clamp(min=1e-5)
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr,
                SmoothedLinear(linear, scale))
    return len(linears)


def _inputs(model, feed: Dict[str, torch.Tensor]) -> tuple:
    """Positional inputs for the export (input_ids, attention_mask[, token_type_ids])."""
    args = [feed["input_ids"], feed["attention_mask"]]
    if uses_token_type_ids(model.config):
        args.append(feed.get("token_type_ids", torch.zeros_like(feed["input_ids"])))
    return tuple(args)


def torch_feeds(tokenizer, examples, max_length: int, config) -> List[Dict[str, torch.Tensor]]:
    """One unpadded feed per example."""
    keep_types = uses_token_type_ids(config)
    feeds = []
    for ex in examples:
        enc = tokenizer(*ex.texts, truncation=True, max_length=max_length, return_tensors="pt",
                        return_token_type_ids=keep_types)
        feeds.append({k: v for k, v in enc.items()})
    return feeds


class ExportedClassifier(nn.Module):
    """A ``torch.export`` program behind the ``model(**inputs).logits`` interface the toolkit scores."""

    def __init__(self, program, config):
        super().__init__()
        self.module_ = program.module() if hasattr(program, "module") else program
        self.config = config
        self._uses_types = uses_token_type_ids(config)

    def train(self, mode: bool = True):
        # an exported graph has no train mode (torch raises); it is always in eval
        self.training = False
        return self

    def forward(self, input_ids, attention_mask, token_type_ids=None, **_):
        args = [input_ids, attention_mask]
        if self._uses_types:
            args.append(token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids))
        return SimpleNamespace(logits=_logits(self.module_(*args)))


def _logits(out):
    return out["logits"] if isinstance(out, dict) else (out[0] if isinstance(out, tuple) else out.logits)


def check_not_silenced(logits: torch.Tensor, reference: torch.Tensor) -> None:
    """Refuse an INT8 model whose logits are all zero where the FP32 model's are not (INC's trap)."""
    if torch.count_nonzero(logits) == 0 and torch.count_nonzero(reference) > 0:
        raise CompressorError("INC's INT8 model returns all-zero logits (its observers saw no "
                              "calibration data); refusing to write it")


OBSERVER_PREFIX = "activation_post_process_"


def _inc():
    """INC's PT2E entry points, its logging quiet."""
    from neural_compressor.torch.quantization import DynamicQuantConfig, StaticQuantConfig, convert, prepare

    # after the import: INC sets its logger's level (INFO) when it is first imported
    logging.getLogger("neural_compressor").setLevel(logging.ERROR)
    return SimpleNamespace(convert=convert, prepare=prepare,
                           configs={"static": StaticQuantConfig, "dynamic": DynamicQuantConfig})


def _prepared(inc, model: nn.Module, example: tuple, method: str, strict: bool = False):
    """The model exported on ``example`` (batch and length dynamic) with INC's observers in it.

    The export is torch.export's, as INC's own ``export`` makes it for this torch, but non-strict
    by default: INC's tries strict tracing first, which takes about three times as long on these
    encoders. Both name their observers alike (checked on BERT and MPNet), so folders saved from
    the strict graph rebuild from this one."""
    from torch.export import Dim

    shapes = tuple({0: Dim.AUTO, 1: Dim.AUTO} for _ in example)
    try:
        with torch.no_grad():
            graph = torch.export.export(model.eval(), args=example, dynamic_shapes=shapes,
                                        strict=strict).module()
    except Exception as e:   # torch.export's errors have no common base class
        raise CompressorError(f"INC could not export the model with torch.export: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    graph._exported, graph.dynamic_shapes = True, shapes   # as INC's export marks its graphs
    return inc.prepare(graph, inc.configs[method]())


def quantize_inc(model: nn.Module, feeds: Sequence[Dict[str, torch.Tensor]], method: str = "static",
                 smoothquant_alpha: float = 0.0, max_length: int = 128):
    """INC INT8 of ``model`` calibrated on ``feeds``; returns (scorable model, calibration).

    ``method`` is ``static`` (activation ranges fixed from calibration) or
    ``dynamic`` (ranges per input; INC still needs the calibration run).
    ``calibration`` holds plain tensors only: the observers' statistics
    (``observer.NAME``) and the export's example inputs (``example.I``);
    with ``model``'s weights they rebuild the same model (``rebuild_inc``).
    """
    if method not in ("static", "dynamic"):
        raise CompressorError(f"INC quantises static or dynamic, not {method!r}")
    if not feeds:
        raise CompressorError(
            "INC needs calibration rows (calibration_samples > 0): without a calibration run its "
            "INT8 model returns all-zero outputs")
    inc = _inc()
    model.eval()
    sq = smooth_quant(model, feeds, smoothquant_alpha) if smoothquant_alpha else 0
    # a batch of two: torch.export specialises a size-1 dimension to a constant
    example = tuple(torch.cat([t, t]) for t in _inputs(model, feeds[0]))
    with torch.no_grad():
        reference = model(*example).logits
    prepared = _prepared(inc, model, example, method)
    with torch.no_grad():
        for feed in feeds:
            prepared(*_inputs(model, feed))
    calibration = {f"observer.{k}": v.detach().clone() for k, v in prepared.state_dict().items()
                   if k.startswith(OBSERVER_PREFIX)}
    calibration.update({f"example.{i}": t for i, t in enumerate(example)})
    quantized = inc.convert(prepared)
    with torch.no_grad():
        out = quantized(*example)
    check_not_silenced(_logits(out), reference)
    wrapped = ExportedClassifier(quantized, model.config)
    wrapped.smoothed_linears = sq
    return wrapped, calibration


def smoothed_structure(model: nn.Module) -> int:
    """Every Linear wrapped as ``smooth_quant`` leaves it (unit scales), to load smoothed weights into."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in linears:
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr,
                SmoothedLinear(linear, torch.ones(linear.in_features)))
    return len(linears)


def rebuild_inc(model: nn.Module, weights: Dict[str, torch.Tensor], calibration: Dict[str, torch.Tensor],
                info: dict, where: str = "the INC folder") -> "ExportedClassifier":
    """The INC model ``quantize_inc`` made, from the FP32 ``model`` built from its config, its saved
    (smoothed) ``weights``, its ``calibration`` and its recipe ``info`` (``quantization.json``).

    The same export, the same INC config, the observers set to the saved
    statistics instead of a calibration run: ``convert`` gives the same graph.
    """
    from compressor.quantize.torch_int8 import unflatten_state

    method = info.get("inc_method")
    if method not in ("static", "dynamic"):
        raise CompressorError(f"{where}: quantization.json names no INC method (static or dynamic)")
    if info.get("smoothed_linears"):
        smoothed_structure(model)
    model.load_state_dict(unflatten_state(model.state_dict(), weights, f"{where}/model_fp32.safetensors"))
    model.eval()
    n_inputs = 3 if uses_token_type_ids(model.config) else 2
    example = tuple(calibration.get(f"example.{i}") for i in range(n_inputs))
    observers = {k[len("observer."):]: v for k, v in calibration.items() if k.startswith("observer.")}
    if any(t is None or t.dim() != 2 or t.dtype != torch.int64 for t in example) \
            or set(calibration) != {f"example.{i}" for i in range(n_inputs)} | {f"observer.{k}" for k in observers}:
        raise CompressorError(f"{where}/calibration.safetensors: not the {n_inputs} example inputs and "
                              "observer statistics INC's model needs")
    inc = _inc()
    prepared = _prepared(inc, model, example, method)
    wanted = {k for k in prepared.state_dict() if k.startswith(OBSERVER_PREFIX)}
    if set(observers) != wanted:
        odd = sorted(set(observers) ^ wanted)[0]
        raise CompressorError(f"{where}/calibration.safetensors: observer {odd} does not match the "
                              "model its quantization.json describes")
    prepared.load_state_dict(observers, strict=False)
    return ExportedClassifier(inc.convert(prepared), model.config)
