"""Quantisation: dynamic and static INT8, quantisation-aware training, mixed precision, FP16/BF16.

``quantize(model, out, config)`` is the one entry point; the config's type is the
method (``configs.py``: one type per method, ``quantize_config(backend, method)``
from names), ``api.py`` has the function registered for each type, ``presets.py``
the hardware presets.
"""
from compressor.quantize.api import quantize
from compressor.quantize.configs import (BACKENDS, IncDynamicConfig, IncStaticConfig, OrtAutoConfig, OrtDynamicConfig,
                      OrtFP16Config, OrtMixedConfig, OrtQATConfig, OrtStaticConfig, QuantizeConfig,
                      TorchaoBF16Config, TorchaoDynamicConfig, TorchaoFP16Config, TorchaoWeightOnlyConfig,
                      quantize_config, register_quantizer)
from compressor.core.presets import PRESETS, HardwarePreset, resolve_preset

__all__ = ["BACKENDS", "PRESETS", "HardwarePreset", "QuantizeConfig", "quantize", "quantize_config",
           "register_quantizer", "resolve_preset", "load_quantized",
           "OrtDynamicConfig", "OrtStaticConfig", "OrtQATConfig", "OrtMixedConfig", "OrtAutoConfig",
           "OrtFP16Config", "TorchaoDynamicConfig", "TorchaoWeightOnlyConfig", "TorchaoFP16Config",
           "TorchaoBF16Config", "IncStaticConfig", "IncDynamicConfig"]


def load_quantized(path: str):
    """(model, tokenizer) of a folder a PyTorch backend wrote."""
    from compressor.quantize.torch_int8 import load_quantized as load

    return load(path)
