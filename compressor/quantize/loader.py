"""Kind ``torch-quantized`` (a PyTorch INT8/FP16 model written by a torch backend): its loader
is defined beside the backend that writes such folders and registers on import."""
from compressor.quantize import torch_int8 as _torch_int8  # noqa: F401
