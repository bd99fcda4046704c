"""The ``share`` stage's settings: what is shared, over which layers, from what, and recovery.

Recovery (``recover``) is pruning's: none, fine-tuning on the task, or distillation from
the unshared model (``teacher: input``), run by ``compressor.engine.job.RecoveryJob.recover``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from compressor.core.errors import CompressorError
from compressor.engine.recovery import RecoveringConfig
from compressor.core.settings import not_negative, setting
from compressor.core.sharing import INIT, WHAT


def _index(value, name, config=None) -> Optional[str]:
    if value is not None and value < 0:
        return f"{name} must not be negative, got {value}"
    group = getattr(config, "group", 0) or 0
    if value is not None and group > 0 and value >= group:
        return f"{name} {value} is no layer of a group of {group} (0 to {group - 1})"
    return None


@dataclass
class ShareConfig(RecoveringConfig):
    """ALBERT-style sharing of a trained encoder's layers, and/or a factorised word embedding."""

    share: str = setting("all", choices=WHAT)          # all layer weights, attention, ffn, or none
    group: int = setting(0, check=not_negative)        # layers per group of consecutive layers; 0: the whole stack
    init: str = setting("mean", choices=INIT)          # shared weights start from the group's mean, or one layer
    index: int = setting(0, check=_index)              # init index: which layer of each group (0-based)
    embedding_rank: int = setting(0, check=not_negative)   # factorise the word embedding at this rank; 0: keep it
    adapter_rank: int = setting(0, check=not_negative)     # per-layer low-rank correction of each shared Linear; 0: none

    def check(self) -> None:
        super().check()
        if self.share == "none" and not self.embedding_rank:
            raise CompressorError("share: share none and embedding_rank 0 change nothing; "
                                  "share all, attention or ffn, or give an embedding_rank")
