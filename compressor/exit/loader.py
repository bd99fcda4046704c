"""Kinds ``early-exit-onnx`` (the segment chain behind a classifier's call, so ``eval`` and
``predict`` score it one sentence at a time, as it is timed) and ``early-exit`` (a PyTorch model
with exit heads, registered where that model is defined)."""
from __future__ import annotations

from compressor.core.errors import CompressorError
from compressor.core.loaders import register_loader

KIND = "early-exit-onnx"


@register_loader(KIND, pytorch=False, describe="an early-exit ONNX export (segments)")
def load_segments(path: str, task=None, **_):
    from compressor.export.loader import GraphTokenizer, OnnxClassifier

    from compressor.exit.runtime import SegmentChain

    chain = SegmentChain(path)
    model = OnnxClassifier(chain)   # it asks only for run, inputs, labels, regression, manifest
    if task is not None and model.config.num_labels != task.num_labels:
        raise CompressorError(f"{path} classifies into {model.config.num_labels} labels but task "
                              f"{task.name} has {task.num_labels}")
    return model, GraphTokenizer(chain)


# kind early-exit (a PyTorch model with exit heads) registers where the model is defined
from compressor.exit import model as _model  # noqa: E402,F401
