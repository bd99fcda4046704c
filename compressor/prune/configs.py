"""One config type per pruning method, and the registry from type to the function doing it.

As quantisation does: a method is a config class holding only its own settings plus one
function registered for that class with :func:`register_pruner`. Recipes and the command
line name the type by ``method``:

| method | type | removes |
|---|---|---|
| ``structured`` | StructuredPruneConfig | attention heads and/or FFN neurons (per layer, for real) |
| ``layers`` | LayersPruneConfig | whole encoder layers |
| ``vocab`` | VocabPruneConfig | word pieces the task's text never uses (embedding rows) |
| ``magnitude`` | MagnitudePruneConfig | single weights (unstructured; zeros stay in dense matrices) |

Every type shares ``recover`` (training after pruning: none, fine-tuning on the task, or
distillation from the unpruned model) and the data settings. The command line imports
this module only when a command runs, so its help stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List

from compressor.core.errors import CompressorError
from compressor.core.registry import Registry
from compressor.core.settings import (not_negative, picks_type_by, positive,
                        setting, tag, variant)
from compressor.engine.recovery import RECOVERY, RecoverSettings, RecoveringConfig, fraction  # noqa: F401

SCOPES = ("global", "layer")
HEAD_IMPORTANCE = ("gradient", "magnitude")    # Michel et al.; attention-output weight norm
FFN_IMPORTANCE = ("magnitude", "taylor")       # weight norm; first-order Taylor |a * dL/da|
LAYER_RULES = ("top", "every_other", "importance", "list")
SCHEDULES = ("oneshot", "gradual")


@picks_type_by("method")
@dataclass
class PruneConfig(RecoveringConfig):
    """Base of every pruning method's config; ``method`` says which type it is."""

    method: str = tag("structured")
    importance_rows: int = setting(512, check=positive)   # training rows that importance is measured on
    batch_size: int = setting(32, check=positive)         # for importance passes


@variant
@dataclass
class StructuredPruneConfig(PruneConfig):
    """Attention heads and FFN neurons: score them, remove the least important for real."""

    method: str = tag("structured")
    heads: float = setting(0.5, check=fraction)     # share of all heads to remove
    ffn: float = setting(0.0, check=fraction)       # share of all FFN neurons to remove
    head_importance: str = setting("gradient", choices=HEAD_IMPORTANCE)
    ffn_importance: str = setting("taylor", choices=FFN_IMPORTANCE)
    scope: str = setting("global", choices=SCOPES)  # rank units over the whole model or per layer
    iterations: int = setting(1, check=positive)    # prune in this many equal steps, recovering after each
    min_heads: int = setting(1, check=positive)     # heads every layer keeps
    min_ffn: int = setting(32, check=positive)      # FFN neurons every layer keeps
    ffn_multiple: int = setting(1, check=positive)  # each layer's kept FFN width rounded to a multiple of this


@variant
@dataclass
class LayersPruneConfig(PruneConfig):
    """Whole encoder layers, by rule or by importance."""

    method: str = tag("layers")
    rule: str = setting("every_other", choices=LAYER_RULES)
    drop: int = setting(0, check=not_negative)      # how many layers go (top, importance); 0: half
    layers: List[int] = field(default_factory=list)  # rule list: the 0-based layers that go


@variant
@dataclass
class VocabPruneConfig(PruneConfig):
    """Word pieces: keep those the task's training text (and ``corpus``) uses, plus specials."""

    method: str = tag("vocab")
    corpus: List[str] = field(default_factory=list)   # extra text files, one sentence a line
    min_count: int = setting(1, check=positive)       # a piece seen fewer times goes
    recover: RecoverSettings = field(default_factory=lambda: RecoverSettings(mode="none"))


@variant
@dataclass
class MagnitudePruneConfig(PruneConfig):
    """Single weights of the encoder's linear layers by magnitude (Gordon et al.)."""

    method: str = tag("magnitude")
    sparsity: float = setting(0.9, check=fraction)   # share of the weights set to zero
    scope: str = setting("global", choices=SCOPES)
    schedule: str = setting("oneshot", choices=SCHEDULES)  # gradual: cubic ramp while recovering
    embeddings: bool = False     # prune the embedding matrices too


# -- the registry ------------------------------------------------------------

# each method module of compressor.prune registers its function for its config type
PRUNERS = Registry("pruning method", package="compressor.prune")


def register_pruner(config_cls: type):
    """Decorator: ``fn(job, config) -> dict`` prunes ``job.model`` in place with configs of
    ``config_cls`` (recovering as ``config.recover`` says) and returns its record."""
    return PRUNERS.register(config_cls)


def pruner_for(config) -> Callable:
    for cls in type(config).__mro__:
        if cls in PRUNERS:
            return PRUNERS[cls]
    known = ", ".join(sorted(c.__name__ for c in PRUNERS))
    raise CompressorError(f"no pruning method is registered for {type(config).__name__}; use {known}")
