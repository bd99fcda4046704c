"""An ONNX export as ``compressor.core.models.load_for_task`` gives it: kind ``onnx``; an
OpenVINO IR folder (``compressor export --format openvino``): kind ``openvino``.

``load_for_task(EXPORT, pytorch=False)`` returns an :class:`OnnxClassifier` and
a :class:`GraphTokenizer`, both over the export's ``Predictor``: the tokenizer
gives the ids the Predictor gives, and the classifier takes them as a PyTorch
classifier does and returns ``.logits``. So ``eval`` and ``predict`` score every
kind of folder on one path, and an export scores what ``score_onnx`` (and the
quantize stage and the benchmark) report: one sentence at a time, unpadded, as
the export is deployed and timed (dynamic INT8 takes activation ranges over the
whole input, so padding would change its scores). An OpenVINO folder is the same
classifier over the ``OpenVINOPredictor`` (``import openvino`` only when one is read).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from compressor.core.errors import CompressorError
from compressor.core.loaders import register_loader


@register_loader("onnx", pytorch=False, describe="an ONNX export", engine="onnxruntime")
def load_export(path: str, task=None, **_):
    from compressor.export.runtime import Predictor

    return _classifier(path, Predictor(path), task)  # the toolkit's one way to tokenise for and run a graph


@register_loader("openvino", pytorch=False, engine="openvino",
                 describe="an OpenVINO IR folder (compressor export --format openvino)")
def load_openvino(path: str, task=None, **_):
    from compressor.export.openvino_runtime import OpenVINOPredictor, require

    require("openvino", f"{path} is an OpenVINO IR folder, which")   # one line where the extra is missing
    return _classifier(path, OpenVINOPredictor(path), task)


def _classifier(path: str, predictor, task) -> tuple:
    model = OnnxClassifier(predictor)
    if task is not None and model.config.num_labels != task.num_labels:
        raise CompressorError(f"{path} classifies into {model.config.num_labels} labels but task "
                              f"{task.name} has {task.num_labels}")
    return model, GraphTokenizer(predictor)


class GraphTokenizer:
    """The Predictor's tokenisation behind the call ``compressor.core.batches.encode`` makes.

    Texts are cut at the length the graph was exported with (the Predictor's), whatever
    ``max_length`` the caller passes.
    """

    def __init__(self, predictor):
        self.predictor = predictor
        self.pad_token_id = predictor.pad_id

    def __call__(self, texts, pairs=None, return_token_type_ids=False, **_):
        items = list(zip(texts, pairs)) if pairs is not None else list(texts)
        feeds = [self.predictor.encode([item]) for item in items]  # one text: no padding
        out = {"input_ids": [feed["input_ids"][0].tolist() for feed in feeds]}
        if return_token_type_ids:
            out["token_type_ids"] = [feed["token_type_ids"][0].tolist() for feed in feeds]
        return out


class OnnxClassifier(torch.nn.Module):
    """The ``model.onnx`` of an export folder behind a classifier's call: ids in, ``.logits`` out."""

    def __init__(self, predictor):
        super().__init__()
        self.predictor = predictor
        self.engine = getattr(predictor, "engine", "onnxruntime")   # what a record says ran it
        labels, regression = self.predictor.labels, self.predictor.regression
        num_labels = 1 if regression else len(labels or []) or 2
        # what scoring reads off a classifier's config (segment ids: only where the graph takes them)
        self.config = SimpleNamespace(
            model_type=self.predictor.manifest.get("model_type"), num_labels=num_labels,
            type_vocab_size=2 if "token_type_ids" in self.predictor.inputs else 1,
            id2label=dict(enumerate(labels or [])),
            problem_type="regression" if regression else "single_label_classification")

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        from transformers.modeling_outputs import SequenceClassifierOutput

        ids = input_ids.detach().cpu().numpy().astype(np.int64)
        mask = np.ones_like(ids) if attention_mask is None else \
            attention_mask.detach().cpu().numpy().astype(np.int64)
        types = np.zeros_like(ids) if token_type_ids is None else \
            token_type_ids.detach().cpu().numpy().astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        rows = []
        for row in range(ids.shape[0]):
            real = mask[row] != 0  # one sentence, its padding left out
            rows.append(self.predictor.run({name: feeds[name][row][real][None, :]
                                            for name in self.predictor.inputs})[0])
        logits = np.stack(rows) if rows else np.zeros((0, self.config.num_labels), np.float32)
        return SequenceClassifierOutput(logits=torch.from_numpy(logits.astype(np.float32)))
