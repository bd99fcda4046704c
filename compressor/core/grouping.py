"""How rows of many lengths are grouped into batches, for the torch-free ONNX runtime and the
PyTorch path alike (plain Python: the deployment runtime imports it without torch)."""
from __future__ import annotations

from typing import List, Sequence

BATCHINGS = ("padded", "sorted", "bucketed")
BUCKET_WINDOW = 8   # bucketed: rows are sorted within windows of this many batches


def batch_groups(lengths: Sequence[int], batch_size: int, batching: str = "sorted",
                 window: int = BUCKET_WINDOW) -> List[List[int]]:
    """Row indices of each batch, for rows of token counts ``lengths``.

    ``padded``: in input order (each batch padded to its longest row, the rest thrown away);
    ``sorted``: by token count over all rows (stable), so a batch holds rows of nearly one
    length and computes almost no padding; ``bucketed``: sorted within windows of ``window``
    batches in input order (what a server with that much look-ahead can do). Batch size 1
    keeps input order whatever ``batching`` says. The one rule of both paths: the torch-free
    ``Predictor`` and the PyTorch batches (``compressor.core.batches``)."""
    if batching not in BATCHINGS:
        raise ValueError(f"batching must be one of {', '.join(BATCHINGS)}, not {batching!r}")
    batch_size = max(1, int(batch_size))
    order = list(range(len(lengths)))
    if batch_size > 1 and batching == "sorted":
        order.sort(key=lambda i: lengths[i])
    elif batch_size > 1 and batching == "bucketed":
        span = batch_size * max(1, window)
        order = [i for s in range(0, len(order), span)
                 for i in sorted(order[s:s + span], key=lambda i: lengths[i])]
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
