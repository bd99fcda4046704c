"""The deployment runtime: classify text from an export folder with onnxruntime, tokenizers, numpy.

Nothing here imports torch or transformers, so an edge box needs only those
three packages (and this file)::

    from compressor.export.runtime import Predictor
    p = Predictor("runs/x/export")
    p.predict(["a gripping, funny film", "flat and lifeless"])   # ['1', '0']

or from a shell, one text per line (a tab separates the two texts of a pair)::

    python -m compressor.export.runtime runs/x/export < sentences.txt
"""
from __future__ import annotations

import functools
import json
import os
import sys
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_status
from tokenizers import Tokenizer

from compressor.core.io import file_version
from compressor.core.grouping import BATCHINGS, BUCKET_WINDOW, batch_groups  # noqa: F401 (the runtime's API)

Text = Union[str, Tuple[str, str]]

try:  # within the toolkit a bad export is one of its one-line errors; on an edge box, a ValueError
    from compressor.core.errors import CompressorError as _ToolkitError
except ImportError:
    class _ToolkitError(Exception):
        pass


class ExportError(_ToolkitError, ValueError):
    """An ONNX file or export folder that cannot be used; the message names the file."""


def unreadable(path: str, exc: BaseException) -> ExportError:
    """The error for an ONNX file that onnx or onnxruntime cannot load (truncated, corrupt, foreign)."""
    text = " ".join(str(exc).split())
    # onnxruntime: "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from P failed:Protobuf parsing failed."
    reason = (text.split(" failed:", 1)[1] if " failed:" in text else text).strip().rstrip(".")
    if "INVALID_PROTOBUF" in text or type(exc).__name__ == "DecodeError":
        reason = "truncated or corrupt: it does not parse"
    return ExportError(f"{path} is not a readable ONNX model ({reason[:300]}); export the model again")


_INPUTS = ("input_ids", "attention_mask", "token_type_ids")   # what encode() gives


def _threads_from_env() -> Optional[int]:
    """``OMP_NUM_THREADS`` as a whole number of threads, or None (unset or not a positive number)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _tokenizer(path: str, max_length: int) -> Tokenizer:
    """The folder's tokenizer, unpadded, truncating at ``max_length``. Parsing a vocabulary takes
    tens of milliseconds, and a search opens one folder's graphs hundreds of times: a file read
    before in this process, unchanged (``file_version``), gives the same object, which nothing
    configures again after this (encoding does not change it)."""
    try:
        version = file_version(path)
    except OSError:
        raise ExportError(f"{path} is missing: the export folder has no tokenizer") from None
    return _parsed_tokenizer(version, max_length)


@functools.lru_cache(maxsize=16)
def _parsed_tokenizer(version: tuple, max_length: int) -> Tokenizer:
    tokenizer = Tokenizer.from_file(version[0])
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


class Predictor:
    """An ONNX classifier with its tokenizer, read from a folder ``export_onnx`` wrote.

    The toolkit's one way to run an ONNX graph: the export stage and its parity
    check, quantisation (its score, the sensitivity search, ``auto``'s timings),
    ``eval``/``predict`` and the benchmark all open, tokenise and batch here, with
    one set of session options, so one graph has one score. ``model_file`` runs
    another graph (a candidate being searched, a peer's file; absolute or in
    ``folder``) with this folder's tokenizer and labels.
    """

    def __init__(self, folder: str, threads: Optional[int] = None, providers: Optional[list] = None,
                 model_file: Optional[str] = None, spinning: bool = True, profile: Optional[str] = None):
        manifest_file = os.path.join(folder, "manifest.json")
        if not os.path.isfile(manifest_file):
            raise ExportError(f"{folder} is not an ONNX or OpenVINO export folder (no manifest.json)")
        self.manifest = read_manifest(manifest_file)
        self.labels = self.manifest.get("labels")
        self.regression = bool(self.manifest.get("regression"))
        self.max_length = int(self.manifest.get("max_length", 128))
        path = os.path.join(folder, model_file or self.manifest.get("model_file", "model.onnx"))
        # profile: a file prefix for onnxruntime's per-operator profile (session.end_profiling() writes it)
        self.session = self._session(path, threads, providers, spinning, profile)
        self.inputs = [i.name for i in self.session.get_inputs()]
        unknown = [name for name in self.inputs if name not in _INPUTS]
        if unknown:
            raise ExportError(f"{path} wants input(s) {', '.join(unknown)}; the runtime gives "
                              f"{', '.join(_INPUTS)}")
        self.tokenizer = _tokenizer(os.path.join(folder, "tokenizer.json"), self.max_length)
        self.pad_id = _pad_id(folder, self.tokenizer)

    @staticmethod
    def _session(path: str, threads: Optional[int], providers: Optional[list],
                 spinning: bool = True, profile: Optional[str] = None) -> ort.InferenceSession:
        """The one place the toolkit makes an onnxruntime session; a missing, truncated or corrupt
        file is one line naming it. ``spinning=False``: idle pool threads sleep at once instead
        of spinning for work (onnxruntime's ``allow_spinning`` 0). No ``threads``: the
        ``OMP_NUM_THREADS`` of the environment where set (the cap PyTorch obeys too; onnxruntime's
        own default is every physical core, which several jobs on one machine fight over)."""
        if not os.path.isfile(path):
            raise ExportError(f"ONNX model not found: {path}")
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the graph's warnings were shown when it was exported or quantised
        threads = threads or _threads_from_env()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if profile:
            options.enable_profiling = True
            options.profile_file_prefix = profile
        providers = providers or ["CPUExecutionProvider"]
        # on the CPU, onnxruntime's SkipLayerNormalization is 2-6x slower than the Add + LayerNormalization
        # it fuses (export.onnx.split_skip_layernorm): its load-time fusion of them stays off there
        cpu_only = all((p[0] if isinstance(p, tuple) else p) == "CPUExecutionProvider" for p in providers)
        try:
            return ort.InferenceSession(path, options, providers=providers,
                                        disabled_optimizers=["SkipLayerNormFusion"] if cpu_only else None)
        except (_ort_status.InvalidProtobuf, _ort_status.InvalidGraph, _ort_status.InvalidArgument,
                _ort_status.NoSuchFile, _ort_status.NotImplemented, _ort_status.Fail) as exc:
            raise unreadable(path, exc) from None

    def encode(self, texts: Sequence[Text]) -> dict:
        """Token ids for a batch, padded to its longest text (one text: no padding at all)."""
        return self._feed(self._tokenize(texts))

    def _tokenize(self, texts: Sequence[Text]) -> list:
        return self.tokenizer.encode_batch([tuple(t) if isinstance(t, (tuple, list)) else t for t in texts])

    def _feed(self, encs: Sequence) -> dict:
        width = max(len(e.ids) for e in encs)
        ids = np.full((len(encs), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encs), width), dtype=np.int64)
        types = np.zeros((len(encs), width), dtype=np.int64)
        for row, e in enumerate(encs):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        feed = dict(zip(_INPUTS, (ids, mask, types)))
        return {name: feed[name] for name in self.inputs}

    def feeds(self, texts: Sequence[Text], batch_size: int = 32,
              batching: str = "sorted") -> List[Tuple[List[int], dict]]:
        """``(rows, feed)`` per batch of ``texts``, grouped as ``batching`` says
        (:func:`batch_groups`: ``padded`` in input order, ``sorted`` or ``bucketed`` by token
        count); each batch is padded to its own longest row. Tokenised once, not per batch."""
        encs = self._tokenize(texts)
        groups = batch_groups([len(e.ids) for e in encs], batch_size, batching)
        return [(idx, self._feed([encs[i] for i in idx])) for idx in groups]

    def run(self, feed: dict) -> np.ndarray:
        """Logits for one encoded batch (what a benchmark times)."""
        return self.session.run(None, feed)[0]

    def logits(self, texts: Sequence[Text], batch_size: int = 32, batching: str = "sorted") -> np.ndarray:
        """Logits in input order. ``batching`` (:func:`batch_groups`): ``sorted`` (the default)
        batches rows of like token count, so a batch computes almost no padding; ``padded``
        takes rows in input order, each batch padded to its longest. Batch 1 is the same either
        way. A dynamic INT8 graph takes activation ranges over the whole batch, padding included,
        so its logits depend on which rows share a batch (``score_onnx`` runs one at a time)."""
        texts = list(texts)
        out: Optional[np.ndarray] = None
        for idx, feed in self.feeds(texts, batch_size, batching):
            logits = self.run(feed)
            if out is None:
                out = np.zeros((len(texts), logits.shape[-1]), dtype=np.float32)
            out[idx] = logits
        return out if out is not None else np.zeros((0, len(self.labels or [0])), np.float32)

    def predict(self, texts: Sequence[Text], batch_size: int = 32, batching: str = "sorted") -> List:
        """A label per text (a float for regression tasks)."""
        logits = self.logits(texts, batch_size, batching)
        if self.regression:
            return [float(v) for v in logits[:, 0]]
        ids = logits.argmax(-1)
        return [self.labels[i] if self.labels else int(i) for i in ids]

    def predict_proba(self, texts: Sequence[Text], batch_size: int = 32, batching: str = "sorted") -> np.ndarray:
        logits = self.logits(texts, batch_size, batching)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


SEGMENTS_FORMAT = "compressor-early-exit-onnx/1"   # the manifest format of an early-exit export


def _folder_runtimes():
    from compressor.core.registry import Registry

    return Registry("export format", module="runtime")


# Runtimes of export folders that one graph cannot stand for, by manifest format; each lives with
# its method (``compressor.<method>.runtime``) and registers itself there.
FOLDER_RUNTIMES = _folder_runtimes()


OPENVINO_FORMAT = "compressor-openvino/1"   # the manifest format of an OpenVINO IR folder


def _format(folder: str) -> Optional[str]:
    manifest = os.path.join(folder, "manifest.json")
    return read_manifest(manifest).get("format") if os.path.isfile(manifest) else None


def is_segments(folder: str) -> bool:
    """Whether ``folder`` is an early-exit export: ONNX segments that one graph cannot stand for
    (its first segment ends in the first exit, not in the model's classifier)."""
    manifest = os.path.join(folder, "manifest.json")
    if not os.path.isfile(manifest):
        return False
    return read_manifest(manifest).get("format") == SEGMENTS_FORMAT


def read_manifest(path: str) -> dict:
    """An export folder's ``manifest.json``; damaged (not JSON, not a mapping) is one line naming it."""
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:   # JSONDecodeError is a ValueError
        line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ExportError(f"{path}{line}: damaged, not valid JSON ({getattr(exc, 'msg', exc)}); "
                          "export the model again") from None
    if not isinstance(manifest, dict):
        raise ExportError(f"{path}: damaged, not an export manifest (a JSON {type(manifest).__name__}); "
                          "export the model again")
    return manifest


def open_graph(folder: str, threads: Optional[int] = None, providers: Optional[list] = None,
               model_file: Optional[str] = None, spinning: bool = True):
    """What runs an export folder: the ``Predictor``, for an early-exit export the segment chain
    (``compressor.exit.runtime.SegmentChain``, which stops each row at its exit), for an OpenVINO
    folder the ``OpenVINOPredictor`` (``compressor.export.openvino_runtime``). Both give
    ``encode``, ``run``, ``logits`` and ``predict``; scoring, ``predict --onnx`` and the benchmark
    open every folder here, so an early-exit export is scored and timed as it is deployed.
    ``spinning`` is the ``Predictor``'s; a chain's sessions never spin."""
    if _format(folder) == OPENVINO_FORMAT:   # compressor.export.openvino_runtime
        if model_file is not None:
            raise ExportError(f"{folder} is an OpenVINO folder: it runs its own model.xml, not {model_file}")
        from compressor.export.openvino_runtime import OpenVINOPredictor

        return OpenVINOPredictor(folder, threads=threads)
    if is_segments(folder):
        if model_file is not None:
            raise ExportError(f"{folder} is an early-exit export (segments): there is no single graph "
                              f"to swap for {model_file}")
        chain = FOLDER_RUNTIMES[SEGMENTS_FORMAT]   # compressor.exit.runtime.SegmentChain
        return chain(folder, threads=threads, providers=providers)   # never spins: see there
    return Predictor(folder, threads=threads, providers=providers, model_file=model_file, spinning=spinning)


def _pad_id(folder: str, tokenizer: Tokenizer) -> int:
    token = None
    config = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(config):
        with open(config) as f:
            token = json.load(f).get("pad_token")
        if isinstance(token, dict):
            token = token.get("content")
    for candidate in (token, "[PAD]", "<pad>"):
        if candidate and tokenizer.token_to_id(candidate) is not None:
            return tokenizer.token_to_id(candidate)
    return 0


def main(argv: Optional[list] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m compressor.export.runtime",
                                     description="Label texts (one per line on stdin; TAB splits a pair).")
    parser.add_argument("folder", help="an ONNX export folder")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        predictor = open_graph(args.folder, threads=args.threads)
    except (ValueError, ExportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    texts = [tuple(line.rstrip("\n").split("\t", 1)) if "\t" in line else line.rstrip("\n")
             for line in sys.stdin if line.strip()]
    for label in predictor.predict(texts):
        print(label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
