"""Quantised PyTorch models: torchao dynamic INT8, FP16/BF16, and their folders.

A folder of kind ``torch-quantized`` holds ``config.json``, the tokenizer,
``compressor.json`` (its kind, and the encoder's per-layer ``shape``),
``quantization.json`` (how it was made: the recipe) and the weights, in
safetensors only, so that loading a folder never unpickles anything (a pickle
can run code):

- torchao INT8: ``model_int8.safetensors``, the plain tensors inside torchao's
  quantised weights (``NAME:qdata`` in int8, ``NAME:scale``,
  ``NAME:zero_point``) beside the ordinary ones. Loading builds the model from
  ``config.json`` at its shape, quantises it by the same recipe and puts the
  saved tensors in.
- INC: ``model_fp32.safetensors`` (the FP32 weights, smoothed when SmoothQuant
  was asked for; INC's PT2E graph quantises them as it runs) and
  ``calibration.safetensors`` (the observers' statistics and the example inputs
  of the export). Loading exports, prepares and converts the model again with
  those statistics: the graph quantisation made, rebuilt.
- FP16/BF16: ``model.safetensors`` (``compressor.core.models.save_model``).

Folders of older versions (``model_int8.pt``, ``model.pt2``) hold pickles and
are refused with one line.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import Dict, Optional, Sequence

import torch

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, read_json, write_json
from compressor.core.loaders import register_loader
from compressor.core.models import META_FILE, load_shaped, read_meta, save_model, size_on_disk, with_kind
from compressor.core.shapes import build_model, is_plain, shape_of
from compressor.core.presets import HardwarePreset

KIND = "torch-quantized"
INFO_FILE = "quantization.json"
INT8_WEIGHTS = "model_int8.safetensors"
INC_WEIGHTS = "model_fp32.safetensors"
INC_CALIBRATION = "calibration.safetensors"
HF_WEIGHTS = "model.safetensors"
# files that unpickle when loaded (torch.save, torch.export.save, pickle): never loaded here
PICKLE_SUFFIXES = (".pt", ".pt2", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")


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


def save_quantized(model, tokenizer, out_dir: str, meta: dict, info: dict,
                   calibration: Optional[Dict[str, torch.Tensor]] = None) -> int:
    """Write a ``torch-quantized`` folder atomically; returns the weights' size in bytes.

    ``calibration`` (INC only) is what ``quantize_inc`` returns beside the model.
    """
    from safetensors.torch import save_file

    with atomic_dir(out_dir) as tmp:
        method = info["method"]
        shape = shape_of(model)
        if method in ("fp16", "bf16"):
            save_model(model, tmp)
        elif method == "inc":
            if calibration is None:
                raise ValueError("an INC folder needs the calibration quantize_inc returned")
            model.config.save_pretrained(tmp)
            save_file(_plain_tensors(model.state_dict()), os.path.join(tmp, INC_WEIGHTS),
                      metadata={"format": "pt"})
            save_file(_plain_tensors(calibration), os.path.join(tmp, INC_CALIBRATION),
                      metadata={"format": "pt"})
        else:
            model.config.save_pretrained(tmp)
            save_file(_plain_tensors(flatten_state(model.state_dict())), os.path.join(tmp, INT8_WEIGHTS),
                      metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        write_json(os.path.join(tmp, META_FILE), with_kind(meta, KIND, shape))
        write_json(os.path.join(tmp, INFO_FILE), info)
        size = size_on_disk(tmp)
    return size


def flatten_state(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A state dict whose tensor subclasses (torchao's ``Int8Tensor``) are split into plain tensors.

    A subclass ``t`` at ``NAME`` becomes its inner tensors (``t.__tensor_flatten__()``)
    at ``NAME:INNER`` (``...weight:qdata``, ``...weight:scale``...); its other
    attributes (block size, activation quantisation) follow from the recipe.
    """
    flat = {}
    for name, tensor in state.items():
        if _is_subclass(tensor):
            inner, _ = tensor.__tensor_flatten__()
            flat.update(flatten_state({f"{name}:{i}": getattr(tensor, i) for i in inner}))
        else:
            flat[name] = tensor
    return flat


def unflatten_state(reference: Dict[str, torch.Tensor], flat: Dict[str, torch.Tensor],
                    where: str) -> Dict[str, torch.Tensor]:
    """The state dict ``flatten_state`` split, rebuilt with the tensor types of ``reference``.

    ``reference`` is the state of a model quantised by the same recipe; every
    tensor of ``flat`` must be there with its name, shape and dtype.
    """
    unused = set(flat)

    def build(name, ref):
        if _is_subclass(ref):
            names, ctx = ref.__tensor_flatten__()
            inner = {i: build(f"{name}:{i}", getattr(ref, i)) for i in names}
            return type(ref).__tensor_unflatten__(inner, ctx, ref.size(), ref.stride())
        if name not in flat:
            raise CompressorError(f"{where}: no tensor {name}, which the model its quantization.json "
                                  "describes has; re-create the folder with compressor quantize")
        saved = flat[name]
        unused.discard(name)
        if saved.shape != ref.shape or saved.dtype != ref.dtype:
            raise CompressorError(f"{where}: tensor {name} is {saved.dtype} {tuple(saved.shape)}, the model "
                                  f"its quantization.json describes needs {ref.dtype} {tuple(ref.shape)}")
        return saved

    state = {name: build(name, ref) for name, ref in reference.items()}
    if unused:
        raise CompressorError(f"{where}: tensor {sorted(unused)[0]} belongs to no weight of the model "
                              "its quantization.json describes")
    return state


def _is_subclass(tensor) -> bool:
    return type(tensor) not in (torch.Tensor, torch.nn.Parameter) and hasattr(tensor, "__tensor_flatten__")


def _plain_tensors(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Contiguous CPU tensors, each its own storage (safetensors refuses shared ones)."""
    out, seen = {}, set()
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        key = t.untyped_storage().data_ptr()
        out[name] = t.clone() if key in seen and t.numel() else t
        seen.add(key)
    return out


def is_quantized_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, INFO_FILE))


def refuse_pickles(path: str, expected: Sequence) -> None:
    """One line when a weight file ``expected`` is missing: a pickle in its place is named, never read.

    An item of ``expected`` is a file name or a tuple of names, any of which will do.
    """
    alternatives = [(e,) if isinstance(e, str) else tuple(e) for e in expected]
    missing = [names[0] for names in alternatives
               if not any(os.path.isfile(os.path.join(path, f)) for f in names)]
    if not missing:
        return
    pickles = sorted(f for f in os.listdir(path) if f.lower().endswith(PICKLE_SUFFIXES))
    if pickles:
        what = ("a torch.export archive, whose contents are pickles" if pickles[0].lower().endswith(".pt2")
                else "a pickle file")
        raise CompressorError(f"{os.path.join(path, pickles[0])}: {what}, which compressor never loads "
                              "(it could run code); re-create the folder with compressor quantize")
    raise CompressorError(f"{path} has no {missing[0]}; re-create the folder with compressor quantize")


def check_quantized_folder(path: str) -> dict:
    """The recipe (``quantization.json``) of a ``torch-quantized`` folder whose weight files are all
    there and safe to read; one line otherwise (a pickle in their place is refused, never opened)."""
    if not is_quantized_folder(path):
        raise CompressorError(f"{path} has no {INFO_FILE}: not a folder `compressor quantize` wrote "
                              "with a PyTorch backend")
    info_file = os.path.join(path, INFO_FILE)
    info = read_json(info_file)
    method = info.get("method") if isinstance(info, dict) else None
    if method not in ("fp16", "bf16", "inc", "dynamic", "weight_only"):
        raise CompressorError(f"{info_file}: unknown method {method!r}; expected dynamic, weight_only, "
                              "inc, fp16 or bf16")
    hf_weights = (HF_WEIGHTS, HF_WEIGHTS + ".index.json")  # one file, or shards and their index
    expected = {"fp16": [hf_weights], "bf16": [hf_weights],
                "inc": [INC_WEIGHTS, INC_CALIBRATION]}.get(method, [INT8_WEIGHTS])
    refuse_pickles(path, expected)
    return info


def _read_safetensors(file: str) -> Dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(file)
    except (SafetensorError, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise CompressorError(f"{file}: not a readable safetensors file ({first})") from None


@register_loader(KIND)
def load_quantized(path: str, task=None, **_):
    """(model, tokenizer) from a ``torch-quantized`` folder, ready for ``compressor.engine.scoring.score``.

    Only JSON and safetensors are read: the model is rebuilt from its recipe.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    info = check_quantized_folder(path)
    info_file = os.path.join(path, INFO_FILE)
    method = info["method"]
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    if task is not None and config.num_labels != task.num_labels:
        raise CompressorError(f"{path} classifies into {config.num_labels} labels but task "
                              f"{task.name} has {task.num_labels}")
    shape = read_meta(path).get("shape")
    if method in ("fp16", "bf16"):
        dtype = torch.float16 if method == "fp16" else torch.bfloat16
        if not is_plain(shape, config):
            return load_shaped(path, config, shape).to(dtype).eval(), tokenizer
        return AutoModelForSequenceClassification.from_pretrained(
            path, dtype=dtype, use_safetensors=True, trust_remote_code=False).eval(), tokenizer
    if method == "inc":
        from compressor.quantize.inc import rebuild_inc

        weights = _read_safetensors(os.path.join(path, INC_WEIGHTS))
        calibration = _read_safetensors(os.path.join(path, INC_CALIBRATION))
        model = build_model(config, shape).eval()
        return rebuild_inc(model, weights, calibration, info, where=path), tokenizer
    from compressor.core.presets import HardwarePreset as _Preset

    try:
        preset = _Preset(**info["preset"])
    except (KeyError, TypeError):
        raise CompressorError(f"{info_file}: no valid preset (the hardware preset it was quantised "
                              "for)") from None
    model = build_model(config, shape).eval()
    quantize_torchao(model, preset, info.get("exclude", ()), weight_only=info.get("weight_only", False))
    _quiet_torchao()
    weights = os.path.join(path, INT8_WEIGHTS)
    state = unflatten_state(model.state_dict(), _read_safetensors(weights), weights)
    model.load_state_dict(state, assign=True)
    return model.eval(), tokenizer


def cast_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """FP16 or BF16 weights for GPU deployment (BF16 also runs on recent CPUs)."""
    if precision not in ("fp16", "bf16"):
        raise CompressorError(f"precision must be fp16 or bf16, got {precision!r}")
    return model.to(torch.float16 if precision == "fp16" else torch.bfloat16).eval()
