"""The settings of ``compressor auto``: the budget, the target, the search space and the study.

The search space is the product of the lists below (each trial picks one value of each):
how many of the teacher's layers stay (``min_layers`` up to all, chosen by a ``layer_rules``
rule), the share of heads and FFN neurons removed in every layer (``heads``, ``ffn``), whether
the vocabulary is cut to the task's word pieces (``vocab``), the share of tokens each layer passes
on (``tokens``), the precision of the exported graph (``precisions``: fp32, dynamic or static
INT8, or ``mixed``: dynamic INT8 with the ``mixed_fp32`` units the held-out score is most
sensitive to kept FP32) and early exit (``exits``: a rule, or none; ``exit_targets``: the share of
the score the threshold keeps on the held-out rows). Nothing is trained but the exit heads: a
candidate is scored on the held-out rows as it comes out of the methods (the cheap proxy), and
one whose score already fell more than ``max_drop + prune_margin`` after the PyTorch steps is
pruned before it is exported. After the search, at most ``recover_candidates`` candidates that may
enter the front (within ``recover_margin`` points of it) are rebuilt with ``recover`` (pruning's
recovery training) and rescored. Latency comes from this machine's table (``latency_table``), or
read only from a table measured on the deployment machine (``target_table``: the search then runs
elsewhere, a GPU machine, and times nothing).

``student``: a model of the teacher's family (its width and head size; a distilled student,
say) that the trials compress instead of the teacher: the layer choices run up to its depth and
the heads and FFN shares are of its shape, while the teacher stays the reference (``max_drop``
against its held-out score, the distillation teacher of every recovery, the report's "vs
teacher"). ``proxy_recover``: a short recovery of every trial's last pruning step before its
floor check and score (``{train: {max_steps: 200}}``: 200 optimiser steps of distillation from
the teacher), so the proxy reflects what recovery can give; off unless ``train.max_steps`` is set
(a proxy's recovery is a fixed number of steps) and ``mode`` is not none.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional

from compressor.core.errors import CompressorError
from compressor.core.settings import at_least_one, check_fields, from_values, not_negative, positive, setting
from compressor.engine.recovery import RecoverSettings

TARGETS = ("cpu", "gpu")
SAMPLERS = ("nsga2", "tpe")
LAYER_RULES = ("top", "importance")
PRECISIONS = ("fp32", "dynamic", "static", "mixed")
EXITS = ("none", "entropy", "max_prob", "patience")   # "none": no exits; else the rule calibrated
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def budget_seconds(value: str) -> Optional[float]:
    """``"90s"``, ``"30m"``, ``"4h"``, ``"1.5h"`` -> seconds; ``""`` -> None (no time limit)."""
    if not value:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", str(value))
    if not match:
        raise CompressorError(f"budget {value!r}: give a number and a unit, such as 90s, 30m or 4h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _budget(value, name, config=None) -> Optional[str]:
    try:
        budget_seconds(value)
    except CompressorError as exc:
        return str(exc)
    return None


def _shares(value, name, config=None) -> Optional[str]:
    if not isinstance(value, (list, tuple)) or not value:
        return f"{name} must be a non-empty list of shares in [0, 1), got {value!r}"
    if not all(isinstance(v, (int, float)) and 0 <= v < 1 for v in value):
        return f"{name} must be shares in [0, 1), got {value!r}"
    return None


def _keeps(value, name, config=None) -> Optional[str]:
    if not isinstance(value, (list, tuple)) or not value:
        return f"{name} must be a non-empty list of kept shares in (0, 1], got {value!r}"
    if not all(isinstance(v, (int, float)) and 0 < v <= 1 for v in value):
        return f"{name} must be kept shares in (0, 1], got {value!r}"
    return None


def _among(known):
    def check(value, name, config=None) -> Optional[str]:
        if not isinstance(value, (list, tuple)) or not value:
            return f"{name} must be a non-empty list of {', '.join(map(str, known))}"
        wrong = [v for v in value if v not in known]
        if wrong:
            return f"unknown {name} {wrong[0]!r}; use {', '.join(map(str, known))}"
        return None
    return check


def _counts(value, name, config=None) -> Optional[str]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, int) and v >= 1 for v in value):
        return f"{name} must be a non-empty list of unit counts (1 or more), got {value!r}"
    return None


def _storage(value, name, config=None) -> Optional[str]:
    if not value or value.startswith("journal:") or "://" in value:
        return None
    return (f"{name} {value!r}: give a database URL (sqlite:///study.db, postgresql://...) or "
            "journal:PATH (a journal file that processes on one host share)")


@dataclass
class AutoConfig:
    """Search the toolkit's methods for the fastest model within ``max_drop`` of the teacher."""

    max_drop: float = setting(1.0, check=not_negative)     # most score points lost on the held-out rows
    target: str = setting("cpu", choices=TARGETS)          # where latency is measured
    threads: int = setting(1, check=at_least_one)          # onnxruntime threads the latency is measured at
    trials: int = setting(20, check=at_least_one)          # trials of the whole study (all workers together)
    budget: str = setting("", check=_budget)               # wall time of a run, such as 30m or 4h; "": none
    workers: int = setting(1, check=at_least_one)          # local processes working on the one study
    storage: str = setting("", check=_storage)             # "": sqlite:///OUT/study.db; a URL or journal:PATH
    study: str = "auto"                                    # the study's name in the storage
    sampler: str = setting("nsga2", choices=SAMPLERS)      # optuna's NSGA-II or multi-objective TPE
    seed: int = 42
    min_layers: int = setting(1, check=at_least_one)       # fewest encoder layers a candidate keeps
    layer_rules: List[str] = setting(default_factory=lambda: ["top", "importance"],
                                     check=_among(LAYER_RULES))    # which layers go (prune layers' rules)
    heads: List[float] = setting(default_factory=lambda: [0.0, 0.25, 0.5], check=_shares)  # heads removed per layer
    ffn: List[float] = setting(default_factory=lambda: [0.0, 0.25, 0.5], check=_shares)    # FFN neurons removed per layer
    vocab: List[bool] = setting(default_factory=lambda: [False, True],
                                check=_among((False, True)))   # cut the vocabulary to the task's pieces
    tokens: List[float] = setting(default_factory=lambda: [1.0, 0.8], check=_keeps)  # share of tokens each layer passes on
    precisions: List[str] = setting(default_factory=lambda: ["fp32", "dynamic", "static", "mixed"],
                                    check=_among(PRECISIONS))  # the exported graph's precision
    mixed_fp32: List[int] = setting(default_factory=lambda: [1, 2], check=_counts)  # mixed: most sensitive units kept FP32
    exits: List[str] = setting(default_factory=lambda: ["none", "entropy"], check=_among(EXITS))  # early-exit rule
    exit_targets: List[float] = setting(default_factory=lambda: [0.99, 0.97], check=_keeps)  # score share the threshold keeps
    exit_epochs: float = setting(1.0, check=positive)      # training of the exit heads (the model fixed)
    importance_rows: int = setting(128, check=positive)    # training rows the pruning importance is measured on
    score_rows: int = setting(0, check=not_negative)       # held-out rows a trial is scored on; 0: all
    prune_margin: float = setting(10.0, check=not_negative)  # pruned before export below teacher - max_drop - this
    seq_len: int = setting(0, check=not_negative)          # tokens the latency is taken at; 0: the held-out rows' mean
    sentences: int = setting(30, check=at_least_one)       # timed runs per latency measurement
    check_models: int = setting(3, check=not_negative)     # whole models measured to check the table
    recover_candidates: int = setting(3, check=not_negative)  # candidates recovered after the search; 0: none
    recover_margin: float = setting(1.0, check=not_negative)  # recovered if within this many points of the front
    recover: RecoverSettings = field(default_factory=RecoverSettings)   # their recovery (prune's recover:)
    proxy_recover: RecoverSettings = field(default_factory=RecoverSettings)   # every trial's; on with train.max_steps
    student: str = ""                                      # the model the trials compress; "": the teacher
    latency_table: str = ""                                # the table's JSON; "": one per CPU in ~/.cache/compressor
    target_table: str = ""                                 # another machine's table, read only: nothing timed here
    max_length: int = setting(128, check=positive)         # the candidates' sequence length (the teacher's if it says)
    device: str = "auto"                                   # where importance is measured (auto: a GPU if there is one)

    def __post_init__(self):
        self.recover = from_values(RecoverSettings, self.recover, "recover")
        self.proxy_recover = from_values(RecoverSettings, self.proxy_recover, "proxy_recover")

    def check(self) -> None:
        check_fields(self)
        self.recover.check()
        self.proxy_recover.check()
        if self.target_table and self.latency_table:
            raise CompressorError("auto: give --latency-table (this machine's table, measured as needed) or "
                                  "--target-table (another machine's, read only), not both")
        if self.target == "gpu":
            from compressor.auto.latency import gpu_providers

            if not self.target_table:   # the target's GPU is elsewhere: nothing is timed here
                gpu_providers()   # one line when this machine has no GPU onnxruntime can run on
            cpu_only = [p for p in self.precisions if p != "fp32"]
            if cpu_only:
                raise CompressorError(f"auto: --target gpu times FP32 graphs only (onnxruntime's INT8 kernels "
                                      f"are the CPU's); drop {', '.join(cpu_only)} from --precisions")

    def space(self) -> dict:
        """What a trial chooses from (recorded with the study: a resumed search must match it)."""
        proxy = proxy_settings(self)
        return {"min_layers": self.min_layers, "layer_rules": list(self.layer_rules),
                "heads": list(self.heads), "ffn": list(self.ffn), "vocab": list(self.vocab),
                "tokens": list(self.tokens), "precisions": list(self.precisions),
                "mixed_fp32": list(self.mixed_fp32), "exits": list(self.exits),
                "exit_targets": list(self.exit_targets), "exit_epochs": self.exit_epochs,
                "target": self.target, "threads": self.threads, "max_drop": self.max_drop,
                "score_rows": self.score_rows, "importance_rows": self.importance_rows,
                "seq_len": self.seq_len, "max_length": self.max_length,
                **({"proxy_recover": proxy} if proxy else {})}


def proxy_settings(config: AutoConfig) -> Optional[dict]:
    """The proxy recovery as plain data (what a trial's last pruning step recovers with), or None."""
    if config.proxy_recover.mode == "none" or not config.proxy_recover.train.max_steps:
        return None
    from compressor.auto.recovery import plain

    return plain(config.proxy_recover)

