"""Recipe stages ``quantize`` (ONNX Runtime: produces an export folder) and ``quantize_torch``.

One stage name per output kind, because a stage declares what it produces (the
``method:`` key, with ``backend:`` in ``quantize_torch``, picks the config type):
``quantize`` takes a checkpoint (exported first) or an export folder and
writes an ONNX export folder; ``quantize_torch`` takes a checkpoint and
writes a ``torch-quantized`` folder (torchao or INC), scored in PyTorch.
"""
from __future__ import annotations

from compressor.core.registry import TRAINABLE, register_stage
from compressor.quantize.configs import OrtQuantizeConfig, QuantizeConfig, TorchQuantizeConfig
from compressor.quantize.torch_int8 import KIND as TORCH_KIND

ONNX_KIND = "onnx"


def _run(ctx, config: QuantizeConfig) -> dict:
    from compressor.core.models import read_meta
    from compressor.quantize.api import quantize

    max_length = read_meta(ctx.model_dir).get("max_length", getattr(getattr(config, "train", None), "max_length", 128))
    dev = ctx.split("dev")
    train = ctx.split("train") if config.uses_train else None
    held = ctx.split("holdout") if getattr(config, "search_on", None) == "holdout" else None
    record = quantize(ctx.model_dir, ctx.out_dir, config, task=None, data_dir=ctx.data_dir,
                      train_set=train, dev_set=dev, holdout_set=held, teacher_dir=ctx.teacher_dir,
                      meta=ctx.meta(f"quantize:{config.backend}:{config.method}", max_length))
    keep = ("metrics", "score", "split", "examples", "engine", "size_bytes", "parameters", "preset",
            "method", "backend", "qat", "search", "quantization", "sensitivity_files")
    out = {k: record[k] for k in keep if k in record}
    search = out.get("search")
    if search:  # the full per-unit table is in the folder (sensitivity.md); keep the record short
        out["search"] = {k: v for k, v in search.items() if k != "sensitivity"}
        if "sensitivity" in search:
            out["search"]["sensitivity"] = [{"unit": u["unit"], "drop": round(u["drop"], 3),
                                             **({"agreement": u["agreement"]} if "agreement" in u else {})}
                                            for u in search["sensitivity"]["units"]]
    return out


@register_stage("quantize", OrtQuantizeConfig, accepts=(TRAINABLE, ONNX_KIND), produces=ONNX_KIND)
def quantize_stage(ctx, config: OrtQuantizeConfig) -> dict:
    """INT8 (dynamic, static, QAT, mixed, auto) or FP16 ONNX with ONNX Runtime; writes an export folder."""
    return _run(ctx, config)


@register_stage("quantize_torch", TorchQuantizeConfig, accepts=(TRAINABLE,), produces=TORCH_KIND)
def quantize_torch_stage(ctx, config: TorchQuantizeConfig) -> dict:
    """INT8 or FP16/BF16 PyTorch model with torchao or Intel Neural Compressor."""
    return _run(ctx, config)
