"""Quantisation: dynamic and static INT8, quantisation-aware training, mixed precision, FP16/BF16.

``quantize(model, out, QuantizeConfig(...))`` is the one entry point; see
``api.py`` for what each backend and method does, ``presets.py`` for the
hardware presets.
"""
from .api import BACKENDS, QuantizeConfig, quantize
from .presets import PRESETS, HardwarePreset, resolve_preset

__all__ = ["BACKENDS", "PRESETS", "HardwarePreset", "QuantizeConfig", "quantize", "resolve_preset",
           "load_quantized"]


def load_quantized(path: str):
    """(model, tokenizer) of a folder a PyTorch backend wrote."""
    from .torch_int8 import load_quantized as load

    return load(path)
