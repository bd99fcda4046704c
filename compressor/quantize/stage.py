"""Recipe stages ``quantize`` (ONNX Runtime: produces an export folder) and ``quantize_torch``.

One stage name per output kind, because a stage declares what it produces:
``quantize`` takes a checkpoint (exported first) or an export folder and
writes an ONNX export folder; ``quantize_torch`` takes a checkpoint and
writes a ``torch-quantized`` folder (torchao or INC), scored in PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..recipe.registry import TRAINABLE, register_stage
from ..settings import setting
from .api import BACKENDS, QuantizeConfig
from .torch_int8 import KIND as TORCH_KIND

ONNX_KIND = "onnx"


def _backend(allowed, other_stage):
    """The backends a stage runs; one of another stage's names says which stage that is."""
    def check(value, name, config=None):
        if value in allowed:
            return None
        if value in BACKENDS:
            return (f"backend {value} is the stage '{other_stage}'; this stage takes "
                    f"{' or '.join(allowed)}")
        return f"unknown backend {value!r}; use {', '.join(allowed)}"
    return check


@dataclass
class OnnxQuantizeConfig(QuantizeConfig):
    backend: str = setting("onnxruntime", check=_backend(("onnxruntime",), "quantize_torch"))


@dataclass
class TorchQuantizeConfig(QuantizeConfig):
    backend: str = setting("torchao", check=_backend(("torchao", "inc"), "quantize"))


def _run(ctx, config: QuantizeConfig) -> dict:
    from ..models import read_meta
    from .api import quantize

    max_length = read_meta(ctx.model_dir).get("max_length", config.max_length)
    dev = ctx.split("dev")
    needs_train = config.method in ("static", "qat", "auto") or config.backend == "inc"
    train = ctx.split("train") if needs_train else None
    record = quantize(ctx.model_dir, ctx.out_dir, config, task=None, data_dir=ctx.data_dir,
                      train_set=train, dev_set=dev, meta=ctx.meta(f"quantize:{config.backend}:{config.method}",
                                                                  max_length))
    keep = ("metrics", "score", "split", "examples", "engine", "size_bytes", "parameters", "preset",
            "method", "backend", "qat", "search", "quantization", "sensitivity_files")
    out = {k: record[k] for k in keep if k in record}
    search = out.get("search")
    if search:  # the full per-unit table is in the folder (sensitivity.md); keep the record short
        out["search"] = {k: v for k, v in search.items() if k != "sensitivity"}
        out["search"]["sensitivity"] = [{"unit": u["unit"], "drop": round(u["drop"], 3)}
                                        for u in search["sensitivity"]["units"]]
    return out


@register_stage("quantize", OnnxQuantizeConfig, accepts=(TRAINABLE, ONNX_KIND), produces=ONNX_KIND)
def quantize_stage(ctx, config: OnnxQuantizeConfig) -> dict:
    """INT8 (dynamic, static, QAT, mixed, auto) or FP16 ONNX with ONNX Runtime; writes an export folder."""
    return _run(ctx, config)


@register_stage("quantize_torch", TorchQuantizeConfig, accepts=(TRAINABLE,), produces=TORCH_KIND)
def quantize_torch_stage(ctx, config: TorchQuantizeConfig) -> dict:
    """INT8 or FP16/BF16 PyTorch model with torchao or Intel Neural Compressor."""
    return _run(ctx, config)
