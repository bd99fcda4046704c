"""Quantised PyTorch models: torchao dynamic INT8, FP16/BF16, and their folders.

A folder of kind ``torch-quantized`` holds ``config.json``, the tokenizer,
``compressor.json``, ``quantization.json`` (how it was made) and the weights:
``model_int8.pt`` (torchao's INT8 tensors, which ``save_pretrained`` cannot
write), ``model.pt2`` (an INC ``torch.export`` program) or ``model.safetensors``
in FP16/BF16. ``load_quantized`` rebuilds any of them for evaluation and
benchmarking in PyTorch.
"""
from __future__ import annotations

import logging
import os
import warnings
import torch

from ..errors import CompressorError
from ..io import atomic_dir, read_json, write_json
from ..models import META_FILE, size_on_disk
from .presets import HardwarePreset

KIND = "torch-quantized"
INFO_FILE = "quantization.json"
INT8_WEIGHTS = "model_int8.pt"


def _quiet_torchao():
    """torchao announces optional CUDA kernels it cannot load on a CPU build; nothing is wrong."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="torchao")


def torchao_config(preset: HardwarePreset, weight_only: bool = False):
    """torchao's config for the preset: per-row (per-channel) symmetric int8 weights.

    torchao's int8 kernels always scale weights per row; activations are
    quantised per token, symmetric or not as the preset says.
    """
    _quiet_torchao()
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig
    from torchao.quantization.quant_primitives import MappingType

    if weight_only:
        return Int8WeightOnlyConfig()
    mapping = MappingType.SYMMETRIC if preset.symmetric_activations else MappingType.ASYMMETRIC
    return Int8DynamicActivationInt8WeightConfig(act_mapping_type=mapping)


def _linear_filter(exclude):
    exclude = tuple(exclude or ())

    def keep(module, fqn):
        return isinstance(module, torch.nn.Linear) and not any(
            fqn == e or fqn.startswith(e + ".") for e in exclude)
    return keep


def quantize_torchao(model: torch.nn.Module, preset: HardwarePreset, exclude=(),
                     weight_only: bool = False) -> torch.nn.Module:
    """Dynamic INT8 of every Linear layer (but ``exclude``), in place, with torchao's ``quantize_``."""
    from torchao.quantization import quantize_

    model.eval()
    quantize_(model, torchao_config(preset, weight_only), filter_fn=_linear_filter(exclude))
    return model


def save_quantized(model, tokenizer, out_dir: str, meta: dict, info: dict) -> int:
    """Write a ``torch-quantized`` folder atomically; returns the weights' size in bytes."""
    with atomic_dir(out_dir) as tmp:
        method = info["method"]
        if method in ("fp16", "bf16"):
            model.save_pretrained(tmp)
        elif method == "inc":
            model.config.save_pretrained(tmp)
            torch.export.save(info.pop("program"), os.path.join(tmp, "model.pt2"))
        else:
            model.config.save_pretrained(tmp)
            torch.save(model.state_dict(), os.path.join(tmp, INT8_WEIGHTS))
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        write_json(os.path.join(tmp, META_FILE), meta)
        write_json(os.path.join(tmp, INFO_FILE), info)
        size = size_on_disk(tmp)
    return size


def is_quantized_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, INFO_FILE))


def load_quantized(path: str):
    """(model, tokenizer) from a ``torch-quantized`` folder, ready for ``compressor.scoring.score``."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    if not is_quantized_folder(path):
        raise CompressorError(f"{path} has no {INFO_FILE}: not a folder `compressor quantize` wrote "
                              "with a PyTorch backend")
    info = read_json(os.path.join(path, INFO_FILE))
    tokenizer = AutoTokenizer.from_pretrained(path)
    method = info["method"]
    if method in ("fp16", "bf16"):
        dtype = torch.float16 if method == "fp16" else torch.bfloat16
        return AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype).eval(), tokenizer
    config = AutoConfig.from_pretrained(path)
    if method == "inc":
        from .inc import ExportedClassifier

        return ExportedClassifier(torch.export.load(os.path.join(path, "model.pt2")), config), tokenizer
    from .presets import HardwarePreset as _Preset

    model = AutoModelForSequenceClassification.from_config(config).eval()
    quantize_torchao(model, _Preset(**info["preset"]), info.get("exclude", ()),
                     weight_only=info.get("weight_only", False))
    _quiet_torchao()
    state = torch.load(os.path.join(path, INT8_WEIGHTS), weights_only=False)
    model.load_state_dict(state, assign=True)
    return model.eval(), tokenizer


def cast_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """FP16 or BF16 weights for GPU deployment (BF16 also runs on recent CPUs)."""
    if precision not in ("fp16", "bf16"):
        raise CompressorError(f"precision must be fp16 or bf16, got {precision!r}")
    return model.to(torch.float16 if precision == "fp16" else torch.bfloat16).eval()
