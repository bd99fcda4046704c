"""What Hugging Face users find in a folder the toolkit writes.

A transformers encoder whose shape ``config.json`` says loads with
``AutoModelForSequenceClassification.from_pretrained(folder)`` alone. One with
per-layer shapes (pruned heads or FFN widths, shared layers, a factorised
embedding) gets the hub's convention for custom code: ``config.json`` names a
class of ``modeling_compressor.py`` in ``auto_map`` and records the shape and
module paths under ``compressor_shape`` (:func:`write_loading_files`);
``from_pretrained(folder, trust_remote_code=True)`` then builds it. That file is
for users of plain transformers only: the toolkit's own loader rebuilds shapes
itself (``compressor.core.shapes``, from ``compressor.json``'s shape or else
``compressor_shape``), passes ``trust_remote_code=False`` to every
``from_pretrained``, and refuses a folder that names code for a class transformers
lacks (:func:`refuse_remote_code`): it never runs code from a folder.

Every checkpoint and ONNX export folder also gets a model card, ``README.md``
with the hub's metadata block (:func:`model_card`).
"""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

from compressor.core.arch import arch_of
from compressor.core.io import read_json, write_bytes, write_json, write_text

MODELING_FILE = "modeling_compressor.py"
CARD_FILE = "README.md"
SHAPE_KEY = "compressor_shape"
AUTO_CLASS = "AutoModelForSequenceClassification"
CARD_MARK = "<!-- written by compressor: replaced when the folder is written again -->"


def _template() -> bytes:
    from compressor.core import modeling_compressor

    with open(modeling_compressor.__file__, "rb") as f:
        return f.read()


def remote_class(config) -> str | None:
    """The class of ``modeling_compressor.py`` for ``config``'s architecture, or None if it has none."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    from compressor.core import modeling_compressor

    base = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(getattr(config, "model_type", None))
    name = f"Compressor{base}" if base else None
    return name if name and hasattr(modeling_compressor, name) else None


def shape_from_config(config) -> dict | None:
    """The per-layer shape ``config.json`` records for ``modeling_compressor.py``
    (``compressor_shape``), as ``compressor.json`` records it: what the toolkit's own classes are
    built at (``compressor.core.shapes.build_model``) for a folder that lacks ``compressor.json``'s
    shape. None where the config records none."""
    from compressor.core.shapes import SHAPE_KEYS

    raw = getattr(config, SHAPE_KEY, None)
    if not isinstance(raw, dict) or not isinstance(raw.get("heads"), list):
        return None
    shape = {key: raw[key] for key in SHAPE_KEYS if key in raw}
    shape["layers"] = len(raw["heads"])
    return shape


def refuse_remote_code(path: str) -> None:
    """One line for a folder whose ``config.json`` or ``tokenizer_config.json`` names code to run
    (``auto_map``) for a model or tokenizer transformers has no class of its own for: loading it
    could only run that code (transformers would ask whether to), which the toolkit never does.
    Where transformers has its own class (every architecture the toolkit supports), the
    toolkit's loaders use that class, ``trust_remote_code=False``, and never open the file."""
    if not os.path.isdir(path):
        return
    from compressor.core.errors import CompressorError

    config = read_config(path) or {}
    model_type = config.get("model_type")
    if config.get("auto_map"):
        from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

        if model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
            raise CompressorError(
                f"{os.path.join(path, 'config.json')}: auto_map names code in the folder to run for "
                f"model type {model_type!r}, which transformers has no classifier of its own for; "
                "compressor never runs code from a folder")
    tokenizer = _json_object(os.path.join(path, "tokenizer_config.json"))
    if tokenizer.get("auto_map"):
        from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name

        name = tokenizer.get("tokenizer_class")   # transformers' class of that name; none named: the model type's
        local = (any(tokenizer_class_from_name(n) is not None for n in (name, name + "Fast"))
                 if isinstance(name, str) else model_type in TOKENIZER_MAPPING_NAMES)
        if not local:
            raise CompressorError(
                f"{os.path.join(path, 'tokenizer_config.json')}: auto_map names code in the folder "
                f"to run for tokenizer {name!r}, which transformers has no class of its own for; "
                "compressor never runs code from a folder")


def _json_object(file: str) -> dict:
    try:
        with open(file) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def layout(config) -> dict:
    """The module paths and attribute names ``modeling_compressor.py`` resizes, from the
    architecture registry (the file itself spells none)."""
    from compressor.core.shapes import (
        _HEAD_COUNT_ATTRS,
        _HEADS_WIDTH_ATTRS,
        _SHARED_BIAS_ARG,
    )

    spec = arch_of(config)
    query = spec.qkv if spec.fused_qkv else spec.query
    return {"layers": spec.layers, "query": spec.query, "key": spec.key, "value": spec.value,
            "qkv": spec.qkv, "attention_output": spec.attention_output,
            "self_attention": query.rpartition(".")[0], "ffn_in": spec.ffn_in, "ffn_out": spec.ffn_out,
            "ffn_gated": spec.ffn_gated, "head_count_attrs": list(_HEAD_COUNT_ATTRS),
            "head_width_attrs": list(_HEADS_WIDTH_ATTRS),
            "shared_bias_arg": _SHARED_BIAS_ARG if spec.shared_layer_params else ""}


def write_loading_files(folder: str, model, shape: dict | None) -> str:
    """Make ``folder``'s ``config.json`` load in plain transformers; returns how it loads:
    ``plain`` (transformers alone), ``remote-code`` (``trust_remote_code=True``, with
    ``modeling_compressor.py`` written beside it) or ``toolkit`` (an architecture the file
    does not cover: only the toolkit's loader rebuilds it).

    Keys an earlier save left in the config (the model's config came from such a folder)
    are taken out first, so a plain model's folder names no custom code.
    """
    from compressor.core.shapes import is_plain

    file = os.path.join(folder, "config.json")
    config = read_json(file)
    config.pop(SHAPE_KEY, None)
    auto_map = {k: v for k, v in (config.get("auto_map") or {}).items()
                if not str(v).startswith(MODELING_FILE[:-3] + ".")}
    config.pop("auto_map", None)
    if auto_map:
        config["auto_map"] = auto_map
    how = "plain" if is_plain(shape, model.config) else "toolkit"
    name = remote_class(model.config) if how != "plain" else None
    if name:
        spec = arch_of(model.config)
        config["auto_map"] = {**auto_map, AUTO_CLASS: f"{MODELING_FILE[:-3]}.{name}"}
        config[SHAPE_KEY] = {
            "heads": shape["heads"], "ffn": shape["ffn"],
            "head_size": spec.hidden_size(model.config) // spec.num_heads(model.config),
            **{k: shape[k] for k in ("head_index", "shared", "embedding_rank", "adapter_rank", "linear_rank")
               if shape.get(k)},
            "layout": layout(model.config)}
        write_bytes(os.path.join(folder, MODELING_FILE), _template())
        how = "remote-code"
    write_json(file, config)
    return how


def clean_config(file: str) -> None:
    """Take the custom-code keys out of a ``config.json`` copied where no modelling file goes
    (an ONNX export)."""
    config = read_json(file)
    if SHAPE_KEY not in config and not config.get("auto_map"):
        return
    config.pop(SHAPE_KEY, None)
    auto_map = {k: v for k, v in (config.pop("auto_map", None) or {}).items()
                if not str(v).startswith(MODELING_FILE[:-3] + ".")}
    if auto_map:
        config["auto_map"] = auto_map
    write_json(file, config)


# -- model card ----------------------------------------------------------------

_STEP_TAGS = {"finetune": "fine-tuned", "distill": "distilled", "prune": "pruned", "share": "shared-layers",
              "theseus": "theseus", "quantize": "quantized", "export": "onnx", "early_exit": "early-exit",
              "qat": "quantization-aware-training"}
_GLUE = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli_mm", "qnli", "rte", "wnli"}


def _hub_id(name) -> str | None:
    """``name`` if it reads as a hub repository id (``owner/model``), else None (a local path)."""
    if not isinstance(name, str) or not name or os.path.isabs(name) or name.startswith((".", "~")):
        return None
    parts = name.split("/")
    if len(parts) != 2 or not all(parts) or os.path.exists(name):
        return None
    return name


def _steps(meta: dict, depth: int = 0) -> list:
    """What the folder went through, oldest first: the ``made_by`` of the folders its
    ``source`` (and theirs) name, where they are still there, then its own."""
    source = meta.get("source")
    earlier = []
    if depth < 10 and isinstance(source, str) and os.path.isfile(os.path.join(source, "compressor.json")):
        try:
            earlier = _steps(read_json(os.path.join(source, "compressor.json")), depth + 1)
        except Exception:   # a damaged source folder: its steps are unknown, this one's are not
            earlier = []
    made_by = meta.get("made_by")
    return earlier + ([str(made_by)] if made_by else [])


def _shape_lines(shape: dict | None, config: dict | None, spec) -> list:
    if not shape:
        return []
    lines = [f"- layers: {shape.get('layers')}"]
    heads, ffn = shape.get("heads") or [], shape.get("ffn") or []
    full_heads = full_ffn = None
    if config and spec is not None:
        full_heads, full_ffn = config.get(spec.heads_key), config.get(spec.ffn_key)
    if heads and any(h != full_heads for h in heads):
        lines.append(f"- attention heads kept per layer: {', '.join(map(str, heads))}"
                     + (f" (of {full_heads})" if full_heads else ""))
    if ffn and any(f != full_ffn for f in ffn):
        lines.append(f"- FFN width per layer: {', '.join(map(str, ffn))}"
                     + (f" (of {full_ffn})" if full_ffn else ""))
    if shape.get("shared"):
        lines.append(f"- shared modules or tensors: {len(shape['shared'])} (stored once)")
    if shape.get("embedding_rank"):
        lines.append(f"- word embedding factorised at rank {shape['embedding_rank']}")
    if shape.get("adapter_rank"):
        lines.append(f"- per-layer low-rank adapters of rank {shape['adapter_rank']} on shared weights")
    if shape.get("linear_rank"):
        ranks = list(shape["linear_rank"].values())
        lines.append(f"- {len(ranks)} Linear layers factorised as two smaller matrices (SVD), "
                     f"ranks {min(ranks)} to {max(ranks)}")
    return lines


def _fmt(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def model_card(meta: dict, name: str, how: str, shape: dict | None = None,
               config: dict | None = None, record: dict | None = None,
               manifest: dict | None = None, kind: str = "hf") -> str:
    """The hub model card (``README.md``) of a folder: YAML metadata, what it is, the
    compression steps and their figures, how to load it.

    ``how`` is what :func:`write_loading_files` returned, or ``onnx`` for an export
    (``manifest`` its manifest); ``record`` the stage's figures (score, metrics,
    parameters, teacher score), where known.
    """
    import yaml

    hidden = re.match(r"^\.(.+)\.tmp-[^/]*$", name)   # written into atomic_dir's temporary folder
    name = hidden.group(1) if hidden else name
    record = record or {}
    task = meta.get("task") or record.get("task")
    steps = _steps(meta)
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    score = record.get("score")
    model_type = (config or {}).get("model_type") or (manifest or {}).get("model_type")
    try:
        spec = arch_of(type("C", (), {"model_type": model_type})) if model_type else None
    except Exception:
        spec = None
    tags = ["compressor", "text-classification"]
    tags += [_STEP_TAGS.get(step.split(":")[0], step.split(":")[0]) for step in steps]
    if how == "remote-code":
        tags.append("custom_code")
    if how == "onnx":
        tags.append("onnx")
        precision = (manifest or {}).get("precision")
        if precision and precision != "fp32":
            tags.append(precision)
    if model_type:
        tags.append(str(model_type))
    base = _hub_id(meta.get("base_model")) or _hub_id(record.get("base_model")) or \
        _hub_id(meta.get("teacher")) or _hub_id((config or {}).get("_name_or_path"))
    header = {}
    if base:
        header["base_model"] = base
    header["pipeline_tag"] = "text-classification"
    header["library_name"] = "onnx" if how == "onnx" else "transformers"
    header["tags"] = list(dict.fromkeys(tags))
    if task in _GLUE:
        header["datasets"] = ["nyu-mll/glue"]
    if metrics:
        header["metrics"] = sorted(str(m) for m in metrics)
        dataset = {"name": f"GLUE {str(task).upper()}", "type": "nyu-mll/glue", "config": task,
                   "split": "validation"} if task in _GLUE else {"name": str(task), "type": str(task)}
        header["model-index"] = [{"name": name, "results": [{
            "task": {"type": "text-classification", "name": "Text Classification"},
            "dataset": dataset,
            "metrics": [{"type": str(m), "value": round(100.0 * float(v), 2), "name": f"dev {m}"}
                        for m, v in sorted(metrics.items()) if isinstance(v, (int, float))]}]}]
    lines = ["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", CARD_MARK, "", f"# {name}", ""]
    what = f"A text classifier ({model_type})" if model_type else "A text classifier"
    labels = meta.get("labels")
    lines.append(f"{what} for the task `{task}`" + (f" (labels: {', '.join(map(str, labels))})" if labels else "")
                 + ", written by the compressor toolkit.")
    lines += ["", "## Compression", ""]
    lines.append("- steps: " + (" → ".join(steps) if steps else "unknown"))
    if meta.get("teacher"):
        lines.append(f"- teacher: `{meta['teacher']}`")
    if meta.get("recipe"):
        lines.append(f"- recipe: `{meta['recipe']}`")
    lines += _shape_lines(shape, config, spec)
    for key, label in (("parameters", "parameters"), ("parameters_before", "parameters before"),
                       ("size_bytes", "size on disk (bytes)")):
        if record.get(key) is not None:
            lines.append(f"- {label}: {record[key]:,}" if isinstance(record[key], int)
                         else f"- {label}: {record[key]}")
    if score is not None:
        lines.append(f"- dev score: {_fmt(score)}" + (f" ({', '.join(f'{m} {_fmt(100.0 * float(v))}' for m, v in sorted(metrics.items()) if isinstance(v, (int, float)))})" if metrics else ""))
    for key, label in (("score_before", "dev score before this step"), ("teacher_score", "teacher dev score"),
                       ("retention", "retention of the teacher's score")):
        if record.get(key) is not None:
            lines.append(f"- {label}: {_fmt(record[key])}")
    if manifest:
        quant = manifest.get("quantization") or {}
        lines.append(f"- ONNX opset {manifest.get('opset')}, precision {manifest.get('precision', 'fp32')}"
                     + (f", quantisation {quant.get('method')}" if quant.get("method") else ""))
    lines += ["", "## How to load", ""]
    if how == "onnx":
        lines += ["An ONNX graph with its tokenizer; it runs without torch:", "", "```python",
                  "from compressor.export.runtime import Predictor", "",
                  'predictor = Predictor("path/to/this/folder")',
                  'print(predictor.predict(["a sentence to classify"]))', "```"]
    elif how == "remote-code":
        lines += ["Its layers differ in width (or share weights), which `config.json` alone cannot say: "
                  "the folder carries `modeling_compressor.py` (torch and transformers only), "
                  "which plain transformers runs when asked to:", "", "```python",
                  "from transformers import AutoModelForSequenceClassification, AutoTokenizer", "",
                  'model = AutoModelForSequenceClassification.from_pretrained("path/to/this/folder", '
                  "trust_remote_code=True)",
                  'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")', "```"]
    elif how == "plain":
        lines += ["A plain Hugging Face folder:", "", "```python",
                  "from transformers import AutoModelForSequenceClassification, AutoTokenizer", "",
                  'model = AutoModelForSequenceClassification.from_pretrained("path/to/this/folder")',
                  'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")', "```"]
    else:
        lines.append("Only the compressor toolkit rebuilds this model (plain transformers cannot).")
    if kind == "early-exit":
        lines += ["", "Its exit heads (`exits.safetensors`, `exits.json`) and their exit rule run in the "
                  "toolkit only: plain transformers loads the model without them (every row through "
                  "every layer, the last layer's classifier)."]
    lines += ["", "With the toolkit: `compressor eval path/to/this/folder`, or in Python "
              "`compressor.core.models.load_for_task(\"path/to/this/folder\")`.", ""]
    return "\n".join(lines)


def write_model_card(folder: str, text: str) -> bool:
    """Write ``README.md`` into ``folder`` (one of the toolkit's own output folders) atomically,
    unless a file of that name is there that the toolkit did not write. Returns whether it wrote."""
    file = os.path.join(folder, CARD_FILE)
    if os.path.lexists(file):
        if os.path.islink(file) or not os.path.isfile(file):
            return False
        with open(file, encoding="utf-8", errors="replace") as f:
            if CARD_MARK not in f.read(4096):
                return False
    write_text(file, text)
    return True


def how_it_loads(folder: str, kind: str, shape: dict | None, model_config) -> str:
    """``plain``, ``remote-code`` or ``toolkit``: how plain transformers loads ``folder``
    (an early-exit folder: its model without the exits)."""
    from compressor.core.shapes import is_plain

    config = read_config(folder) or {}
    if str((config.get("auto_map") or {}).get(AUTO_CLASS, "")).startswith(MODELING_FILE[:-3] + "."):
        return "remote-code"
    if kind not in ("hf", "early-exit") or not config:
        return "toolkit"
    try:
        return "plain" if is_plain(shape, model_config or SimpleNamespace(**config)) else "toolkit"
    except Exception:   # an architecture the registry does not know
        return "toolkit"


def refresh_card(folder: str, name: str, record: dict | None = None) -> None:
    """Write ``folder``'s model card again with the figures of ``record`` (a recipe stage's),
    where the card there is the toolkit's own (a user's ``README.md`` stays)."""
    from compressor.core.errors import CompressorError
    from compressor.core.loaders import read_meta

    card = os.path.join(folder, CARD_FILE)
    try:
        meta = read_meta(folder)
    except CompressorError:   # a damaged compressor.json: the card stays as it was written
        return
    if not os.path.isfile(card) or not meta:
        return
    kind = meta.get("kind", "hf")
    manifest = None
    if os.path.isfile(os.path.join(folder, "manifest.json")):
        manifest = read_json(os.path.join(folder, "manifest.json"))
    how = "onnx" if kind == "onnx" else how_it_loads(folder, kind, meta.get("shape"), None)
    write_model_card(folder, model_card(meta, name, how, shape=meta.get("shape"), config=read_config(folder),
                                        record=record, manifest=manifest if kind == "onnx" else None,
                                        kind=kind))


def source_record(folder) -> dict:
    """The figures the checkpoint ``folder`` was written with (its ``metrics.json``, or a
    recipe stage's ``record.json``), or {}."""
    for name in ("metrics.json", "record.json"):
        file = os.path.join(folder, name) if isinstance(folder, str) else ""
        if file and os.path.isfile(file):
            try:
                data = read_json(file)
            except Exception:   # a damaged record: the card goes without its figures
                continue
            if isinstance(data, dict) and data.get("score") is not None:
                return {k: data[k] for k in ("score", "metrics", "teacher_score", "retention") if k in data}
    return {}


def read_config(folder: str) -> dict | None:
    file = os.path.join(folder, "config.json")
    try:
        with open(file) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
