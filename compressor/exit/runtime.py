"""Early exit without torch: ONNX segments chained with onnxruntime, tokenizers and numpy.

ONNX Runtime cannot stop a graph midway, so an early-exit model is exported as segments
(``compressor.exit.segments``): the embeddings and the layers up to the first exit with its
head, then the layers up to the next exit with its head, ..., the last ending in the model's own
classifier. :class:`SegmentChain` runs them in turn; after each, the rule
(``compressor.exit.rules``, numpy only) says which rows stop there, and those rows leave the
batch (padding past the longest remaining row is cut too)::

    from compressor.exit.runtime import SegmentChain
    chain = SegmentChain("runs/x/segments")
    chain.predict(["a gripping film", "flat and dull"])   # ['1', '0']

Tokenising, session options and the first graph come from the toolkit's one ONNX runner,
``compressor.export.runtime.Predictor`` (the folder's manifest names segment 0 as its model file).
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence

import numpy as np

from compressor.export.runtime import SEGMENTS_FORMAT as FORMAT
from compressor.export.runtime import FOLDER_RUNTIMES, ExportError, Predictor

from compressor.exit.rules import RuleState, check_rule


@FOLDER_RUNTIMES.register(FORMAT)
class SegmentChain:
    """The segments of an early-exit export folder, run as one classifier that stops early.

    ``rule`` and ``threshold`` default to the calibrated ones in the manifest.
    """

    def __init__(self, folder: str, threads: Optional[int] = None, providers: Optional[list] = None,
                 rule: Optional[str] = None, threshold: Optional[float] = None):
        # The segments run back to back, each in its own session: with onnxruntime's default, a
        # session's idle pool threads spin for work while the next segment runs and take its
        # cores (MPNet-base on CoLA, 2 threads, 2-core machine: p50 51 ms spinning, 7.8 ms not;
        # at 1 thread 9.7 and 7.0). So no session of a chain spins.
        spinning = False
        self.predictor = Predictor(folder, threads=threads, providers=providers, spinning=spinning)
        self.manifest = self.predictor.manifest
        if self.manifest.get("format") != FORMAT:
            raise ExportError(f"{folder} is not an early-exit export (its manifest's format is "
                              f"{self.manifest.get('format')!r}, not {FORMAT})")
        self.segments = self.manifest["segments"]
        self.sessions = [self.predictor.session] + [
            Predictor._session(os.path.join(folder, seg["file"]), threads, providers, spinning)
            for seg in self.segments[1:]]
        self.exits = [seg["exit_layer"] for seg in self.segments]
        self.labels, self.regression = self.predictor.labels, self.predictor.regression
        self.inputs, self.pad_id = self.predictor.inputs, self.predictor.pad_id
        self.tolerance = float(self.manifest.get("tolerance", 0.1))
        self.set_rule(rule or self.manifest.get("rule"),
                      self.manifest.get("threshold") if threshold is None else threshold)

    def set_rule(self, rule: Optional[str], threshold: Optional[float]) -> None:
        if rule is not None:
            check_rule(rule, threshold, self.regression)
        self.rule, self.threshold = rule, threshold

    def encode(self, texts) -> dict:
        return self.predictor.encode(texts)

    def _segment(self, k: int, x: np.ndarray, mask: np.ndarray, feed: Optional[dict] = None):
        if k == 0:
            out = self.sessions[0].run(None, feed)
        else:
            out = self.sessions[k].run(None, {"hidden_states": x, "attention_mask": mask})
        return (None, out[0]) if len(out) == 1 else (out[0], out[1])

    def run(self, feed: dict, exits: bool = False):
        """Logits for one encoded batch, each row stopping where the rule says (and, with
        ``exits``, the index of the exit each row took)."""
        if self.rule is None:
            raise ExportError("no exit rule: give rule and threshold (the manifest has none)")
        mask = feed["attention_mask"]
        rows = mask.shape[0]
        state = RuleState(self.rule, self.threshold, len(self.segments), self.regression, self.tolerance)
        out = None
        where = np.full(rows, -1, np.int64)
        running = np.arange(rows)
        hidden = None
        for k in range(len(self.segments)):
            hidden, logits = self._segment(k, hidden, mask, feed)
            if out is None:
                out = np.zeros((rows, logits.shape[-1]), np.float32)
            stop = state.step(logits)
            out[running[stop]] = logits[stop]
            where[running[stop]] = k
            if stop.all():
                break
            go = ~stop
            running = running[go]
            state.keep(go)
            mask = mask[go]
            width = int(mask.sum(1).max())
            mask, hidden = np.ascontiguousarray(mask[:, :width]), np.ascontiguousarray(hidden[go][:, :width])
        return (out, where) if exits else out

    def run_all(self, feed: dict) -> List[np.ndarray]:
        """Every exit's logits for one encoded batch (no row leaves): what a threshold sweep needs."""
        mask, hidden, outs = feed["attention_mask"], None, []
        for k in range(len(self.segments)):
            hidden, logits = self._segment(k, hidden, mask, feed)
            outs.append(logits)
        return outs

    def logits(self, texts: Sequence, batch_size: int = 1, exits: bool = False):
        texts = list(texts)
        out, where = None, np.zeros(len(texts), np.int64)
        for start in range(0, len(texts), batch_size):
            logits, k = self.run(self.encode(texts[start:start + batch_size]), exits=True)
            if out is None:
                out = np.zeros((len(texts), logits.shape[-1]), np.float32)
            out[start:start + batch_size] = logits
            where[start:start + batch_size] = k
        if out is None:
            out = np.zeros((0, len(self.labels or [0])), np.float32)
        return (out, where) if exits else out

    def predict(self, texts: Sequence, batch_size: int = 1) -> list:
        logits = self.logits(texts, batch_size)
        if self.regression:
            return [float(v) for v in logits[:, 0]]
        return [self.labels[i] if self.labels else int(i) for i in logits.argmax(-1)]
