"""Export a toolkit checkpoint to an ONNX folder that runs without torch.

The folder holds ``model.onnx`` (dynamic batch and sequence axes), the
tokenizer files, ``config.json``, ``manifest.json`` (task, labels, max length,
opset, exporter, graph fusions, versions) and ``parity.json`` (the ONNX graph
against the PyTorch model on the task's real dev sentences).

Transformers models go through optimum's exporter; anything else the toolkit
loads (a distilled BiLSTM/CNN student, say) through ``torch.onnx``.
"""
from __future__ import annotations

import contextlib
import glob
import io
import os
import shutil
import time
from typing import Optional

import numpy as np

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, check_output_dir, is_disk_full, read_json, versions, write_json
from compressor.core.loaders import META_FILE

MODEL_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
PARITY_FILE = "parity.json"
FORMAT = "compressor-onnx/1"
DEFAULT_OPSET = 17
# the graph-level fusions onnxruntime's transformer optimizer reports, by operator
FUSED_OPS = ("EmbedLayerNormalization", "Attention", "MultiHeadAttention", "SkipLayerNormalization",
             "LayerNormalization", "BiasGelu", "FastGelu", "Gelu", "SkipSimplifiedLayerNormalization")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.txt", "vocab.json", "merges.txt", "spm.model", "sentencepiece.bpe.model")


def export_onnx(model_dir: str, out_dir: str, task: Optional[str] = None, opset: int = DEFAULT_OPSET,
                optimize: bool = True, parity: bool = True, data_dir: Optional[str] = None,
                parity_limit: Optional[int] = None, exporter: str = "auto",
                overwrite: bool = False, examples=None, user_data=None,
                split_skip_layernorms: bool = True) -> dict:
    """Export ``model_dir`` (a toolkit or Hugging Face checkpoint) to the folder ``out_dir``.

    ``optimize`` runs onnxruntime's transformer optimizer (Attention,
    SkipLayerNormalization, BiasGelu, EmbedLayerNormalization fusions, where
    the graph allows them) and keeps the fused graph as ``model.onnx``, with each
    SkipLayerNormalization written back as Add + LayerNormalization unless
    ``split_skip_layernorms`` is False (``split_skip_layernorm``: the CPU's faster form).
    ``parity`` compares the final graph with the PyTorch model on the task's
    dev split (``parity_limit`` rows) and writes ``parity.json``.
    ``exporter`` is ``auto`` (optimum for transformers models, else torch.onnx),
    ``optimum`` or ``torch``. ``examples`` (task examples) replace the dev split
    for the parity check; a model trained on the user's files is checked on the dev file its
    ``compressor.json`` records, or on ``user_data``'s. Returns the manifest.
    """
    from compressor.core.models import count_parameters, load_for_task, resolve_model
    from compressor.engine.scoring import _task_for

    if exporter not in ("auto", "optimum", "torch"):
        raise CompressorError(f"exporter must be auto, optimum or torch, got {exporter!r}")
    check_output_dir(out_dir, overwrite)
    path = resolve_model(model_dir)
    task_spec, meta = _task_for(path, task)
    net, tokenizer = load_for_task(path, task_spec)
    net.eval()
    max_length = meta.get("max_length", 128)
    source = "given examples"
    if parity and examples is None:   # read first: a missing dev file is one line before any work
        from compressor.core.data import load_for_model

        dataset = load_for_model(path, task_spec, "dev", data_dir, parity_limit, user_data)
        examples, source = dataset.examples, dataset.source
    start = time.perf_counter()
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        used = _export_graph(net, tokenizer, tmp, opset, exporter)
        _copy_side_files(path, tokenizer, tmp)
        input_names = _graph_inputs(os.path.join(tmp, MODEL_FILE))
        optimization = optimize_graph(os.path.join(tmp, MODEL_FILE), net.config, heads=_layer_heads(net),
                                      split=split_skip_layernorms) if optimize else None
        deduplicated = dedupe_initializers(os.path.join(tmp, MODEL_FILE))
        manifest = {
            "format": FORMAT, "model_file": MODEL_FILE, "task": task_spec.name,
            "task_spec": meta.get("task_spec") or _task_dict(task_spec),
            "labels": list(task_spec.labels) if task_spec.labels else None,
            "regression": task_spec.is_regression, "max_length": max_length,
            "inputs": input_names, "opset": opset, "exporter": used, "precision": "fp32",
            "optimization": optimization, "deduplicated_initializers": deduplicated,
            "source": os.path.abspath(path),
            # the checkpoint's count: the graph's initializers would miss tensors the export
            # merged because their values happened to be equal (a fresh LayerNorm's ones)
            "parameters": count_parameters(net),
            "model_type": getattr(net.config, "model_type", type(net).__name__),
            "versions": _versions(),
        }
        write_json(os.path.join(tmp, MANIFEST_FILE), manifest)
        write_json(os.path.join(tmp, META_FILE), _export_meta(path, manifest))
        if parity:
            check = parity_check(net, tokenizer, tmp, examples, max_length,
                                 regression=task_spec.is_regression)
            check.update(task=task_spec.name, split="dev", data=source)
            write_json(os.path.join(tmp, PARITY_FILE), check)
            manifest["parity"] = check
        manifest["export_time_s"] = round(time.perf_counter() - start, 2)
        write_json(os.path.join(tmp, MANIFEST_FILE), manifest)
        write_export_card(tmp, out_dir, manifest)
    return manifest


def write_export_card(folder: str, out_dir: str, manifest: dict) -> None:
    """The export folder's model card (``README.md``), its ``config.json`` naming no custom code
    (the modelling file stays with the PyTorch checkpoint)."""
    from compressor.core.hub import clean_config, model_card, read_config, source_record, write_model_card
    from compressor.core.models import read_meta

    if os.path.isfile(os.path.join(folder, "config.json")):
        clean_config(os.path.join(folder, "config.json"))
    record = {**source_record(manifest.get("source")), "parameters": manifest.get("parameters")}
    name = os.path.basename(os.path.abspath(out_dir))
    write_model_card(folder, model_card(read_meta(folder), name, "onnx", config=read_config(folder),
                                        record=record, manifest=manifest, kind="onnx"))


def read_manifest(folder: str) -> dict:
    """The manifest of an export folder, or a CompressorError saying what is missing."""
    file = os.path.join(folder, MANIFEST_FILE)
    if not os.path.isfile(file):
        raise CompressorError(f"{folder} is not an ONNX export folder (no {MANIFEST_FILE})")
    from compressor.export.runtime import read_manifest as read_manifest_file

    manifest = read_manifest_file(file)   # damaged: one line naming it
    model = os.path.join(folder, manifest.get("model_file", MODEL_FILE))
    if not os.path.isfile(model):
        raise CompressorError(f"{folder}: the manifest names {os.path.basename(model)}, which is missing")
    return manifest


def is_export(folder: str) -> bool:
    """Whether ``folder`` is an ONNX export (its manifest and model.onnx), not a PyTorch checkpoint."""
    return os.path.isfile(os.path.join(folder, MANIFEST_FILE)) and \
        os.path.isfile(os.path.join(folder, MODEL_FILE))


def checkpoint_behind(model_dir: str, needed_by: str) -> str:
    """The PyTorch checkpoint behind ``model_dir``: itself, or the source an export folder's manifest
    records (what needs the weights in PyTorch, a Hessian or a QAT run, says so as ``needed_by``)."""
    if not is_export(model_dir):
        return model_dir
    manifest = os.path.join(model_dir, MANIFEST_FILE)
    source = read_json(manifest).get("source") if os.path.isfile(manifest) else None
    if source and os.path.isdir(source) and not is_export(source):
        return source
    raise CompressorError(f"{needed_by} needs the PyTorch checkpoint behind {model_dir}; its manifest "
                          f"names {source or 'none'}, which is not there: quantise the checkpoint instead")


def load_graph(model_file: str, load_external_data: bool = True):
    """The ``onnx.ModelProto`` in ``model_file``: the one place ONNX files are read as graphs.

    A truncated or corrupt file is one line naming it (``compressor.export.runtime.Predictor``
    does the same for the files that are run).
    """
    import onnx
    from google.protobuf.message import DecodeError

    from compressor.export.runtime import ExportError, unreadable

    if not os.path.isfile(model_file):
        raise ExportError(f"ONNX model not found: {model_file}")
    if load_external_data:
        external_data_files(model_file)   # every location checked before any is read
    try:
        return onnx.load(model_file, load_external_data=load_external_data)
    except (DecodeError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise unreadable(model_file, exc) from None


def external_data_files(model_file: str) -> list:
    """The external-data files ``model_file``'s tensors name (paths relative to its folder), each
    checked before anything reads it: a plain file inside the folder, reached through no symbolic
    link. Anything else (``../``, an absolute path, a link to a file elsewhere) is one line."""
    import onnx
    from google.protobuf.message import DecodeError

    from compressor.export.runtime import ExportError, unreadable

    try:
        model = onnx.load(model_file, load_external_data=False)
    except (DecodeError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise unreadable(model_file, exc) from None
    folder = os.path.dirname(os.path.abspath(model_file))
    real_folder = os.path.realpath(folder)
    found = []
    tensors = list(model.graph.initializer) + [t for n in model.graph.node for a in n.attribute
                                               for t in ([a.t] if a.HasField("t") else []) + list(a.tensors)]
    for tensor in tensors:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        path = os.path.normpath(os.path.join(folder, location))
        if not location or os.path.isabs(location) or not path.startswith(folder + os.sep):
            raise ExportError(f"{model_file}: tensor {tensor.name} keeps its data at {location!r}, "
                              "outside the model's folder; refused")
        if os.path.islink(path) or not os.path.realpath(path).startswith(real_folder + os.sep):
            raise ExportError(f"{model_file}: tensor {tensor.name}'s data file {location} is reached "
                              "through a symbolic link; refused (copy the file itself into the folder)")
        if os.path.exists(path) and not os.path.isfile(path):
            raise ExportError(f"{model_file}: tensor {tensor.name}'s data file {location} is not a "
                              "file; refused")
        rel = os.path.relpath(path, folder)
        if rel not in found:
            found.append(rel)
    return found


# -- export --------------------------------------------------------------

def _export_graph(net, tokenizer, out: str, opset: int, exporter: str) -> str:
    import warnings

    import torch

    # tracing warns about constants it folds (attention-mask helpers); parity checks the result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return _export_with(net, tokenizer, out, opset, exporter)


def _export_with(net, tokenizer, out: str, opset: int, exporter: str) -> str:
    from transformers import PreTrainedModel

    if exporter in ("auto", "optimum") and isinstance(net, PreTrainedModel):
        try:
            _export_optimum(net, out, opset)
            return "optimum"
        except Exception as exc:  # an architecture or shape optimum's configs do not cover
            if is_disk_full(exc):
                raise  # no exporter does better on a full disk
            if exporter == "optimum":
                raise CompressorError(f"optimum could not export {type(net).__name__}: "
                                      f"{str(exc).splitlines()[0][:300]}") from None
    _export_torch(net, tokenizer, out, opset)
    return "torch.onnx"


def _export_optimum(net, out: str, opset: int) -> None:
    import logging

    from optimum.exporters.onnx import onnx_export_from_model

    logging.getLogger("optimum").setLevel(logging.ERROR)
    work = os.path.join(out, ".optimum")
    # validation is ours (parity on real sentences), so optimum's own random-input check is skipped
    onnx_export_from_model(net, work, opset=opset, task="text-classification", do_validation=False,
                           preprocessors=[])
    shutil.move(os.path.join(work, MODEL_FILE), os.path.join(out, MODEL_FILE))
    for extra in glob.glob(os.path.join(work, "*.onnx_data")) + glob.glob(os.path.join(work, "*.data")):
        shutil.move(extra, out)
    shutil.rmtree(work, ignore_errors=True)


def _export_torch(net, tokenizer, out: str, opset: int) -> None:
    import torch

    from compressor.core.arch import uses_token_type_ids

    config = getattr(net, "config", None)
    try:
        types = config is not None and uses_token_type_ids(config)
    except CompressorError:
        types = False
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if types else [])
    # outputs after the logits that a model names (token pruning's kept_tokens per row and layer);
    # the runtime reads output 0, the logits
    extra = list(getattr(net, "onnx_outputs", ()))

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *inputs):
            out = self.inner(**dict(zip(names, inputs)))
            return (out.logits, *(getattr(out, name) for name in extra)) if extra else out.logits

    enc = tokenizer(["a short example", "and a somewhat longer second example sentence"],
                    padding=True, return_tensors="pt", return_token_type_ids=types)
    args = tuple(enc[n] for n in names)
    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    for name in ["logits"] + extra:
        axes[name] = {0: "batch_size"}
    with torch.no_grad():
        torch.onnx.export(Logits(net).eval(), args, os.path.join(out, MODEL_FILE), input_names=names,
                          output_names=["logits"] + extra, dynamic_axes=axes, opset_version=opset,
                          dynamo=False, do_constant_folding=True)


def _copy_side_files(src: str, tokenizer, out: str) -> None:
    for name in ("config.json",) + _TOKENIZER_FILES:
        file = os.path.join(src, name)
        if os.path.isfile(file) and not os.path.exists(os.path.join(out, name)):
            shutil.copy2(file, out)
    if not os.path.isfile(os.path.join(out, "tokenizer.json")):
        # the torch-free runtime reads only tokenizer.json: write it from the fast tokenizer
        if not getattr(tokenizer, "is_fast", False):
            raise CompressorError(f"{src}: the runtime needs a fast tokenizer (tokenizer.json)")
        tokenizer.backend_tokenizer.save(os.path.join(out, "tokenizer.json"))


def _export_meta(source: str, manifest: dict) -> dict:
    """The source's ``compressor.json``, saying the folder is now kind ``onnx`` and where it came from."""
    from compressor.core.models import read_meta, with_kind

    meta = {**read_meta(source), "made_by": "export", "source": manifest["source"],
            **{k: manifest[k] for k in ("task", "task_spec", "labels", "max_length")}}
    return with_kind(meta, "onnx", None)


def _graph_inputs(model_file: str) -> list:
    graph = load_graph(model_file, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in initializers]


def _task_dict(task_spec) -> dict:
    from compressor.core.data import task_to_dict

    return task_to_dict(task_spec)


def _versions() -> dict:
    import onnx
    import onnxruntime

    info = versions()
    info.update(onnx=onnx.__version__, onnxruntime=onnxruntime.__version__)
    try:
        import importlib.metadata as md

        info["optimum"] = md.version("optimum")
        info["optimum-onnx"] = md.version("optimum-onnx")
    except Exception:
        pass
    return info


def dedupe_initializers(model_file: str) -> int:
    """Store each distinct constant tensor of the graph once, in place; returns how many went.

    Weights shared across layers (``compressor.share``) are one initializer in the exported
    graph, but graph fusions make a new one per use (the optimizer's fused query-key-value
    weight of each attention layer), so a shared weight would count once per layer on disk.
    Initializers equal in type, shape and bytes are merged, every use renamed to the first.
    A graph whose weights live in external data files is left as it is.
    """
    import onnx

    model = load_graph(model_file, load_external_data=False)
    graph = model.graph
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph.initializer):
        return 0
    first, rename, keep = {}, {}, []
    for tensor in graph.initializer:
        bare = onnx.TensorProto()
        bare.CopyFrom(tensor)
        bare.name = ""
        key = bare.SerializeToString()   # type, shape and values: all but the name
        if key in first:
            rename[tensor.name] = first[key]
        else:
            first[key] = tensor.name
            keep.append(tensor)
    if not rename:
        return 0
    del graph.initializer[:]
    graph.initializer.extend(keep)
    kept_inputs = [i for i in graph.input if i.name not in rename]
    del graph.input[:]
    graph.input.extend(kept_inputs)

    def relink(g):
        for node in g.node:
            for i, name in enumerate(node.input):
                if name in rename:
                    node.input[i] = rename[name]
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    relink(sub)
        for out in g.output:
            if out.name in rename:   # an initializer that is also a graph output keeps its name
                raise ValueError(out.name)

    try:
        relink(graph)
    except ValueError:
        return 0
    onnx.save(model, model_file)
    return len(rename)


# -- graph optimisation --------------------------------------------------

def optimize_graph(model_file: str, config=None, heads=None, split: bool = True) -> dict:
    """Fuse the transformer graph in place with onnxruntime's optimizer; report what fused.

    ``heads`` is the head count each layer has (``compressor.core.shapes.shape_of``:
    pruning leaves layers with different counts). The optimizer is told a head
    count only when every layer has the same one; otherwise (0, 0) makes it read
    each layer's count off that layer's Reshape, and a layer whose count it
    cannot read stays unfused rather than taking the config's. Every fused
    attention node is then checked against its own weights and against
    ``heads``; a fusion that got a count wrong is not kept (the graph is fused
    again without attention fusion) and the report says so. ``split``: each SkipLayerNormalization
    is then written back as Add + LayerNormalization (:func:`split_skip_layernorm`).

    Returns ``{"tool", "fusions": {op: count}, "attention": {...}, "nodes_before",
    "nodes_after"}`` where ``fusions`` lists only the fused operators that appeared
    and ``attention`` gives the layers, their head counts, the ``num_heads`` of
    each fused attention node in graph order and a ``note`` when not every layer fused.
    """
    import logging

    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    config_heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", None) or 0
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", None) or 0
    before = _op_counts(load_graph(model_file))
    if not config_heads:
        # no attention (a BiLSTM or CNN student): nothing of a transformer's to fuse
        return {"tool": None, "fusions": {}, "skipped": "not a transformer",
                "nodes_before": sum(before.values()), "nodes_after": sum(before.values())}
    head_size = hidden // config_heads if hidden and hidden % config_heads == 0 else 0
    heads = [int(h) for h in heads] if heads else None
    counts = set(heads) if heads else {config_heads}
    if not head_size or len(counts) > 1:
        # odd shapes, or layers pruned to different head counts: the optimizer reads each
        # layer's count off its graph (a count we passed would be used where it cannot)
        num_heads, width = 0, 0
    else:
        num_heads = counts.pop()
        width = num_heads * head_size
    # opt_level 0: only the pattern fusions, so the file stays portable across CPU and GPU.
    # Its per-layer warnings (a pruned layer's width is not the input's) say nothing the report does not.
    # (onnxruntime imports its fusion modules under both names)
    quiet = [logging.getLogger(name) for name in ("fusion_attention",
                                                  "onnxruntime.transformers.fusion_attention")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)

    def fuse(with_attention: bool = True):
        options = None
        if not with_attention:
            options = FusionOptions("bert")
            options.enable_attention = False
        # onnxruntime prints "failed in shape inference" to stdout where its symbolic shape inference
        # gives up (a token-pruned graph's computed indices); the fusions go on without it
        with contextlib.redirect_stdout(io.StringIO()):
            return optimize_model(model_file, model_type="bert", num_heads=num_heads, hidden_size=width,
                                  opt_level=0, optimization_options=options)

    try:
        unfusable = None
        try:
            optimized = fuse()
        except RuntimeError as exc:
            # the attention fusion can leave a graph that is no longer a DAG where layers see
            # computed token indices (token pruning): fuse the rest, attention left as it is
            unfusable = " ".join(str(exc).split())[:200]
            optimized = fuse(with_attention=False)
        # MPNet: onnxruntime fuses no attention (its relative position bias); ours does
        mpnet = _fuse_mpnet(optimized, config, head_size)
        attention = _attention_report(optimized.model, heads, head_size)
        if mpnet:
            attention["mpnet_fusion"] = mpnet
        if unfusable:
            attention["note"] = f"attention left unfused: the optimizer's attention fusion failed ({unfusable})"
        if attention.get("wrong"):
            optimized = fuse(with_attention=False)
            refused = attention.pop("wrong")
            attention.update(fused=[], refused=refused,
                             note=f"attention left unfused: the optimizer's fusion had {refused}")
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    fused = _op_counts(optimized.model)
    fusions = {op: fused[op] for op in FUSED_OPS if fused.get(op, 0) > before.get(op, 0)}
    split = split_skip_layernorm(optimized.model) if split else 0
    optimized.save_model_to_file(model_file)
    after = _op_counts(optimized.model)   # as saved: the save sorts the nodes, it adds or drops none
    report = {"tool": "onnxruntime.transformers.optimizer (model_type bert, opt_level 0, "
                      f"num_heads {num_heads}, hidden_size {width})",
              "fusions": fusions, "attention": attention,
              "nodes_before": sum(before.values()), "nodes_after": sum(after.values())}
    if split:
        report["skip_layernorm_split"] = {"nodes": split, "why": SPLIT_WHY}
    return report


SPLIT_WHY = ("onnxruntime's CPU SkipLayerNormalization kernel took 2-6x the time of Add + LayerNormalization "
             "on the same tensors (1.30 and 1.32, AMD EPYC and Intel Xeon): the fused node is written as those")


def split_skip_layernorm(model) -> int:
    """Each ``SkipLayerNormalization`` (onnxruntime's fusion of the residual Add, the bias and the
    LayerNorm) written back as ``Add`` (+ ``Add`` for the bias) and ``LayerNormalization`` (opset
    17), in place; returns how many. On the CPU the fused kernel is the slow one: 220 against 40
    microseconds for 44 tokens of width 768 at one thread, a fifth of an INT8 MPNet chain's
    time (bench/results/skip-layernorm-cpu/). The outputs are the same to float rounding. A node whose
    mean or inverse-deviation output is read, or a graph below opset 17, is left fused.
    onnxruntime may fuse such a pattern again when it loads the graph; the runtime's CPU sessions
    turn that fusion off (``SkipLayerNormFusion``)."""
    from onnx import helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 17:
        return 0
    read = {name for node in model.graph.node for name in node.input} | {o.name for o in model.graph.output}
    nodes, count = [], 0
    for node in model.graph.node:
        if node.op_type != "SkipLayerNormalization" or node.domain != "com.microsoft":
            nodes.append(node)
            continue
        outputs = list(node.output) + [""] * (4 - len(node.output))
        if any(name and name in read for name in outputs[1:3]):
            nodes.append(node)
            continue
        x, skip, gamma, beta, bias = (list(node.input) + [""] * 5)[:5]
        epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
        base = node.name or f"SkipLayerNorm_split_{count}"
        total = outputs[3] if outputs[3] and outputs[3] in read else f"{base}/input_skip_bias"
        if bias:
            nodes.append(helper.make_node("Add", [x, skip], [f"{base}/input_skip"], name=f"{base}/Add"))
            nodes.append(helper.make_node("Add", [f"{base}/input_skip", bias], [total], name=f"{base}/AddBias"))
        else:
            nodes.append(helper.make_node("Add", [x, skip], [total], name=f"{base}/Add"))
        nodes.append(helper.make_node("LayerNormalization", [total, gamma] + ([beta] if beta else []),
                                      [outputs[0]], name=f"{base}/LayerNormalization", axis=-1, epsilon=epsilon))
        count += 1
    if count:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return count


_ATTENTION_OPS = ("Attention", "MultiHeadAttention")


def _fuse_mpnet(optimized, config, head_size: int):
    """``export/mpnet_fusion.py`` on an MPNet graph (its report), else None."""
    if getattr(config, "model_type", None) != "mpnet" or not head_size:
        return None
    from compressor.export.mpnet_fusion import fuse_mpnet_attention

    return fuse_mpnet_attention(optimized, head_size)


def _attention_report(model, heads, head_size: int) -> dict:
    """The fused attention nodes of ``model`` against the head count of each layer (``heads``).

    A fused node's ``num_heads`` must be what its own weights imply (query width /
    head size); when every layer fused, the i-th node must have layer i's count.
    ``wrong`` (only when something is) says what did not hold.
    """
    from onnx import helper

    initializers = {i.name: i for i in model.graph.initializer}
    fused, implied = [], []
    for node in model.graph.node:
        if node.op_type not in _ATTENTION_OPS:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        fused.append(int(attrs.get("num_heads", 0)))
        width = None
        if "qkv_hidden_sizes" in attrs:
            width = int(attrs["qkv_hidden_sizes"][0])
        else:
            # Attention: input 1 the packed [in, 3 * width] weight; MultiHeadAttention: input 3 its bias
            index = 1 if node.op_type == "Attention" else 3
            tensor = initializers.get(node.input[index]) if len(node.input) > index else None
            if tensor is not None and tensor.dims:
                width = int(tensor.dims[-1]) // 3
        implied.append(width // head_size if width and head_size and width % head_size == 0 else None)
    report = {"layers": len(heads) if heads else None, "heads": heads, "fused": fused}
    wrong = [f"node {i} num_heads {n}, its weights {m} heads"
             for i, (n, m) in enumerate(zip(fused, implied)) if m is not None and n != m]
    if heads and len(fused) == len(heads) and fused != heads:
        wrong.append(f"num_heads {fused} for layers with {heads} heads")
    if wrong:
        report["wrong"] = "; ".join(wrong)
    elif heads and len(fused) < len(heads):
        report["note"] = (f"attention fused in {len(fused)} of {len(heads)} layers; the rest run "
                          "unfused (MatMul, Softmax)")
    return report


def _layer_heads(net):
    """The head count of each layer (pruning may have made them differ), or None for a model the
    toolkit's architecture table does not describe."""
    from compressor.core.shapes import shape_of

    try:
        return shape_of(net)["heads"]
    except (CompressorError, AttributeError, KeyError, StopIteration, TypeError):
        return None


def _op_counts(model) -> dict:
    counts: dict = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


# -- parity --------------------------------------------------------------

def parity_check(net, tokenizer, folder: str, examples, max_length: int,
                 regression: bool = False, batch_size: int = 32) -> dict:
    """An export folder's graph against the PyTorch model on the same token ids (same batches,
    same padding), run by the ``Predictor``."""
    import torch

    from compressor.core.batches import encode, iter_batches

    from compressor.export.runtime import Predictor

    predictor = Predictor(folder)
    items = encode(tokenizer, examples, max_length, net.config)
    n_labels = net.config.num_labels
    torch_logits = np.zeros((len(items), n_labels), np.float32)
    onnx_logits = np.zeros_like(torch_logits)
    net.eval()
    with torch.no_grad():
        for batch in iter_batches(items, batch_size, tokenizer.pad_token_id or 0, regression):
            order = batch.pop("order").numpy()
            batch.pop("labels", None)
            torch_logits[order] = net(**batch).logits.float().numpy()
            feed = {k: v.numpy().astype(np.int64) for k, v in batch.items() if k in predictor.inputs}
            onnx_logits[order] = predictor.run(feed)
    diff = np.abs(torch_logits - onnx_logits)
    if regression:
        same = float(np.mean(np.abs(torch_logits[:, 0] - onnx_logits[:, 0]) < 1e-3))
    else:
        same = float(np.mean(torch_logits.argmax(-1) == onnx_logits.argmax(-1)))
    return {"examples": len(items), "max_abs_logit_diff": float(diff.max()) if diff.size else 0.0,
            "mean_abs_logit_diff": float(diff.mean()) if diff.size else 0.0,
            "identical_predictions": round(same, 6), "batch_size": batch_size}


def score_onnx(folder: str, dataset, threads: Optional[int] = None, model_file: Optional[str] = None) -> dict:
    """The task's metrics for an export folder on a labelled dataset, through the ``Predictor``.

    The one scorer of ONNX graphs: the export and quantize stages, ``eval``, the
    sensitivity search and the benchmark all report what it returns. ``model_file``
    scores another graph with the folder's tokenizer (``Predictor``). One sentence
    at a time, as the model is deployed and timed: dynamic INT8 takes activation
    ranges over the whole input, so padding would change its scores.
    """
    from compressor.core.metrics import compute_metrics

    logits = dataset_logits(folder, dataset, threads, model_file)
    preds = logits[:, 0] if dataset.task.is_regression else logits.argmax(-1)
    return compute_metrics(dataset.task, preds, [ex.label for ex in dataset.examples])


def dataset_logits(folder: str, dataset, threads: Optional[int] = None, model_file: Optional[str] = None):
    """The graph's outputs (rows x labels) on a dataset's rows, one sentence at a time: what
    ``score_onnx`` scores, for a caller that compares graphs row by row (the INT8 search's
    agreement with FP32)."""
    from compressor.export.runtime import open_graph

    predictor = open_graph(folder, threads=threads, model_file=model_file)   # an early-exit export: its chain
    return predictor.logits(example_texts(dataset.examples), batch_size=1)


def example_texts(examples) -> list:
    """What the ``Predictor`` takes for task examples: a sentence, or a pair as a tuple."""
    return [ex.texts[0] if len(ex.texts) == 1 else tuple(ex.texts) for ex in examples]


# -- labelling files -----------------------------------------------------

def predict_file(folder: str, input: str, output: str, text_columns=None,
                 threads: Optional[int] = None, probabilities: bool = False) -> dict:
    """``compressor predict --onnx``: label a GLUE or user file with the torch-free ``Predictor``.

    One sentence at a time, as the graph is scored and deployed: a padded batch would
    change what a dynamically quantised graph predicts.
    """
    from compressor.core.data import task_from_dict
    from compressor.engine.scoring import (check_probabilities, label_rows, read_rows_to_label,
                                           split_empty, write_predictions)

    from compressor.export.runtime import open_graph

    manifest = read_manifest(folder)
    task_spec = task_from_dict(manifest["task_spec"])
    check_probabilities(task_spec, probabilities)
    dataset = read_rows_to_label(input, task_spec, text_columns, output=output)
    rows, empty = split_empty(dataset.examples)
    predictor = open_graph(folder, threads=threads)
    logits = predictor.logits(example_texts([dataset.examples[i] for i in rows]), batch_size=1) \
        if rows else None
    labels, probs = label_rows(task_spec, logits, rows, len(dataset.examples), probabilities)
    write_predictions(output, dataset.examples, labels, input=input, probabilities=probs,
                      names=task_spec.label_names)
    return {"input": input, "output": os.path.abspath(output), "rows": len(labels),
            "task": task_spec.name, "engine": "onnxruntime",
            "empty_rows": [dataset.examples[i].guid for i in empty]}
