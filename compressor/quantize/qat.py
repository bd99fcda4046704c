"""Quantisation-aware training in the manner of Q8BERT (Zafrir et al., 2019).

Every matrix product of the encoder layers sees its INT8 self during
fine-tuning: weights are rounded to the int8 grid the deployed model will
use (symmetric, per output channel or per tensor, 7 bits with
``reduce_range``) and inputs to the dynamic uint8 grid ONNX Runtime computes
from each tensor's range at run time. Rounding passes gradients straight
through (the straight-through estimator), so the FP32 weights drift to
values that survive rounding. Optionally the frozen FP32 model is a teacher
(soft targets, as in Q8BERT's follow-ups), which recovers more accuracy than
labels alone on small data.

The trained weights are then quantised for real by the same rule
(``onnx_int8.quantize_dynamic_onnx``), so the deployed INT8 model computes
what training simulated.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from compressor.core.arch import arch_of


def fake_quant_weight(w: torch.Tensor, per_channel: bool, bits: int = 8) -> torch.Tensor:
    """Symmetric int8 rounding of a weight matrix (one scale per row or one in all)."""
    qmax = 2 ** (bits - 1) - 1
    amax = w.detach().abs().amax(dim=1, keepdim=True) if per_channel else w.detach().abs().max()
    scale = amax.clamp(min=1e-8) / qmax
    q = torch.clamp(torch.round(w / scale), -qmax, qmax) * scale
    return w + (q - w).detach()


def fake_quant_activation(x: torch.Tensor) -> torch.Tensor:
    """Dynamic asymmetric uint8 rounding over the whole tensor, as ONNX Runtime's DynamicQuantizeLinear."""
    lo = torch.clamp(x.detach().min(), max=0.0)
    hi = torch.clamp(x.detach().max(), min=0.0)
    scale = ((hi - lo) / 255.0).clamp(min=1e-8)
    zero = torch.round(-lo / scale)
    q = (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale
    return x + (q - x).detach()


class FakeQuantLinear(nn.Module):
    """A Linear layer that computes as its INT8 version would, and trains its FP32 weights."""

    def __init__(self, linear: nn.Linear, per_channel: bool = True, reduce_range: bool = False):
        super().__init__()
        self.linear = linear
        self.per_channel = per_channel
        self.bits = 7 if reduce_range else 8

    @property
    def weight(self):  # code that reads .weight (tying, inspection) sees the real parameter
        return self.linear.weight

    def forward(self, x):
        w = fake_quant_weight(self.linear.weight, self.per_channel, self.bits)
        return F.linear(fake_quant_activation(x), w, self.linear.bias)


def quantized_linears(model: nn.Module) -> Dict[str, nn.Linear]:
    """The encoder layers' Linear modules: the ones ONNX Runtime's dynamic INT8 turns into MatMulInteger.

    The pooler and classifier see 2-D inputs, export as Gemm and stay FP32 in
    ONNX Runtime's dynamic mode, so QAT leaves them alone too.
    """
    spec = arch_of(model)
    found = {}
    layers = spec.get_layers(model)
    prefix = next(name for name, m in model.named_modules() if m is layers)
    for i, layer in enumerate(layers):
        for part, linear in {**spec.attention(layer), **spec.ffn(layer)}.items():
            name = next(n for n, m in layer.named_modules() if m is linear)
            found[f"{prefix}.{i}.{name}"] = linear
    return found


def prepare_qat(model: nn.Module, per_channel: bool = True, reduce_range: bool = False) -> int:
    """Swap the encoder's Linear layers for fake-quantised ones in place; returns how many."""
    count = 0
    for name, linear in quantized_linears(model).items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, attr, FakeQuantLinear(linear, per_channel, reduce_range))
        count += 1
    return count


def strip_qat(model: nn.Module) -> nn.Module:
    """Put the trained plain Linear layers back (for saving and export)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, FakeQuantLinear):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr, module.linear)
    return model


def qat_train(model: nn.Module, tokenizer, train_set, dev_set, config, per_channel: bool = True,
              reduce_range: bool = False, distill_alpha: float = 0.5, temperature: float = 2.0,
              desc: str = "qat", teacher: Optional[nn.Module] = None) -> dict:
    """Fake-quantised fine-tuning of ``model`` in place (left holding its best dev weights, unwrapped).

    ``config`` is a ``compressor.engine.train.TrainConfig``; ``distill_alpha`` > 0
    adds soft targets from ``teacher`` (frozen; by default a frozen copy of the FP32 model as it
    is now: ``teacher: input``).
    Returns the training history plus the dev score of the fake-quantised
    model before training (what post-training quantisation alone gives).
    """

    from compressor.core.device import resolve_device
    from compressor.core.metrics import task_score
    from compressor.engine.scoring import score
    from compressor.engine.teacher import TeacherLoss, frozen_copy
    from compressor.engine.train import fit, set_seed

    set_seed(config.seed)
    device = resolve_device(config.device)
    if distill_alpha <= 0:
        teacher = None
    elif teacher is None:
        teacher = frozen_copy(model).to(device)
    else:
        teacher = teacher.to(device)
    count = prepare_qat(model, per_channel, reduce_range)
    model.to(device)
    before = score(model, tokenizer, dev_set, config.max_length, 64, device, desc="score fake-int8")
    loss_fn = TeacherLoss(teacher, kd_weight=distill_alpha, temperature=temperature,
                          task_weight=1 - distill_alpha) if teacher is not None else None
    kwargs = {"loss_fn": loss_fn} if loss_fn is not None else {}
    result = fit(model, tokenizer, train_set, dev_set, config, desc=desc, **kwargs)
    strip_qat(model)
    model.to("cpu")
    return {**result, "fake_quantized_linears": count, "before": {
        "metrics": before, "score": task_score(dev_set.task, before)}}
