"""The JSON of ``POST /predict``: Hugging Face's text-classification shape, so its clients work.

In: ``{"inputs": TEXT}`` with TEXT a string or a pair ``{"text": A, "text_pair": B}``, or
``{"inputs": [TEXT, ...]}`` (a pair may also be a list of two strings); optional
``"parameters": {"top_k": K, "function_to_apply": "softmax" | "sigmoid" | "none"}``.
Out: for one TEXT a list of ``{"label", "score"}``, every class by falling score (``top_k``
cuts it); for a list, one such list per text. A regression task answers ``[{"label": "score",
"score": VALUE}]``. Everything here is plain Python and numpy: the server and the load test
share it, and it is tested without a server.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

FUNCTIONS = ("softmax", "sigmoid", "none")


class BadRequest(ValueError):
    """A request the server refuses: ``status`` (413 too large, 422 not understood) and one line."""

    def __init__(self, status: int, message: str, kind: str):
        super().__init__(message)
        self.status, self.kind = status, kind


def parse_request(body, max_texts: int, max_chars: int) -> Tuple[list, bool, dict]:
    """``(texts, single, parameters)`` from a decoded JSON body; a pair is a tuple of two strings."""
    if not isinstance(body, dict) or "inputs" not in body:
        raise BadRequest(422, 'the body must be a JSON object with "inputs": a text, '
                              '{"text": ..., "text_pair": ...}, or a list of them', "shape")
    inputs = body["inputs"]
    single = not isinstance(inputs, list)
    items = [inputs] if single else inputs
    if not items:
        raise BadRequest(422, '"inputs" is an empty list', "shape")
    if len(items) > max_texts:
        raise BadRequest(413, f"{len(items)} texts in one request; at most {max_texts}", "too_many_texts")
    texts = [_text(item, i, single, max_chars) for i, item in enumerate(items)]
    return texts, single, _parameters(body.get("parameters"))


def _text(item, index: int, single: bool, max_chars: int):
    where = '"inputs"' if single else f'"inputs"[{index}]'
    if isinstance(item, dict) and "text" in item and set(item) <= {"text", "text_pair"}:
        parts = [item["text"]] + ([item["text_pair"]] if item.get("text_pair") is not None else [])
    elif isinstance(item, list) and not single and len(item) == 2:
        parts = item
    elif isinstance(item, str):
        parts = [item]
    else:
        raise BadRequest(422, f'{where} must be a string, {{"text": ..., "text_pair": ...}}'
                              f"{'' if single else ' or a list of two strings'}", "shape")
    for part in parts:
        if not isinstance(part, str):
            raise BadRequest(422, f"{where}: a text must be a string, got {type(part).__name__}", "shape")
        if not part.strip():
            raise BadRequest(422, f"{where}: the text is empty", "empty_text")
        if len(part) > max_chars:
            raise BadRequest(413, f"{where}: a text of {len(part)} characters; at most {max_chars}", "too_long")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _parameters(parameters) -> dict:
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise BadRequest(422, '"parameters" must be a JSON object', "shape")
    out = {}
    top_k = parameters.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise BadRequest(422, f'"parameters"."top_k" must be a whole number from 1, got {top_k!r}', "shape")
        out["top_k"] = top_k
    function = parameters.get("function_to_apply")
    if function is not None:
        if function not in FUNCTIONS:
            raise BadRequest(422, f'"parameters"."function_to_apply" must be one of {", ".join(FUNCTIONS)}, '
                                  f"got {function!r}", "shape")
        out["function_to_apply"] = function
    return out   # other keys (truncation, ...) are the pipeline's, taken and ignored


def scores(logits: np.ndarray, function: str = "softmax") -> np.ndarray:
    """Per-class scores of ``logits`` (rows): softmax probabilities as ``predict --probabilities``
    computes them (float64), a sigmoid of each logit, or the logits themselves."""
    logits = np.asarray(logits, dtype=np.float64)
    if function == "softmax":
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    return logits


def answers(logits: np.ndarray, labels: Optional[Sequence[str]], regression: bool,
            single: bool, parameters: dict) -> list:
    """The response body for ``logits`` (one row per text, in request order)."""
    out: List[list] = []
    if regression:
        out = [[{"label": "score", "score": float(row[0])}] for row in np.asarray(logits, np.float64)]
    else:
        names = list(labels) if labels else [f"LABEL_{i}" for i in range(np.shape(logits)[-1])]
        top_k = parameters.get("top_k")
        for row in scores(logits, parameters.get("function_to_apply", "softmax")):
            order = sorted(range(len(row)), key=lambda i: -row[i])[:top_k]
            out.append([{"label": names[i], "score": float(row[i])} for i in order])
    return out[0] if single else out
