"""Distillation losses: small pure functions of tensors, and the config that picks them.

Conventions: ``hidden_states`` are Hugging Face tuples (index 0 is the embedding
output, index i the output of layer i); ``attentions`` are per-layer
``[batch, heads, query, key]`` probabilities; ``mask`` is the attention mask
``[batch, length]`` (1 for real tokens), so padding never counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from ..errors import CompressorError

MAPPINGS = ("uniform", "skip", "last")
RELATIONS = ("qk", "qq", "kk", "vv")


# -- output layer ----------------------------------------------------------

def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                       temperature: float = 1.0) -> torch.Tensor:
    """Hinton's soft-target loss: cross-entropy to the teacher's softened distribution, times T².

    The T² factor keeps the gradient scale independent of the temperature.
    """
    t = float(temperature)
    target = F.softmax(teacher_logits.float() / t, dim=-1)
    log_probs = F.log_softmax(student_logits.float() / t, dim=-1)
    return -(target * log_probs).sum(-1).mean() * t * t


def logits_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean squared error between logits (Tang et al.; the soft target of a regression task)."""
    return F.mse_loss(student_logits.float(), teacher_logits.float())


def task_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The hard-label loss: cross-entropy, or MSE for a regression task (one output)."""
    if logits.shape[-1] == 1:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())
    return F.cross_entropy(logits.float(), labels)


# -- hidden states ---------------------------------------------------------

def layer_mapping(student_layers: int, teacher_layers: int,
                  how: Union[str, Sequence[int]] = "uniform") -> List[Tuple[int, int]]:
    """Pairs ``(student layer, teacher layer)``, 1-based (0 would be the embeddings).

    - ``uniform`` (TinyBERT): student layer i learns teacher layer i·n/m, the last included;
    - ``skip`` (BERT-PKD): every (n/m)-th teacher layer, the student's last layer left out
      (the prediction loss already covers it);
    - ``last`` (BERT-PKD): the teacher's last m-1 layers below its top one;
    - a list of teacher layers, one per student layer from layer 1 on (it may be shorter).
    """
    m, n = int(student_layers), int(teacher_layers)
    if m < 1 or n < 1:
        raise CompressorError(f"layer mapping needs layers on both sides, got student {m}, teacher {n}")
    if not isinstance(how, str):
        layers = [int(t) for t in how]
        if len(layers) > m:
            raise CompressorError(f"layer mapping lists {len(layers)} teacher layers for a "
                                  f"{m}-layer student")
        bad = [t for t in layers if not 1 <= t <= n]
        if bad:
            raise CompressorError(f"layer mapping names teacher layer {bad[0]}; the teacher has "
                                  f"layers 1..{n}")
        return [(i + 1, t) for i, t in enumerate(layers)]
    if how == "uniform":
        return [(i, max(1, int(i * n / m + 0.5))) for i in range(1, m + 1)]
    if how == "skip":
        step = max(1, n // m)
        return [(i, i * step) for i in range(1, m)]
    if how == "last":
        return [(i, n - m + i) for i in range(1, m)]
    raise CompressorError(f"unknown layer mapping '{how}'; use {', '.join(MAPPINGS)} "
                          "or a list of teacher layers")


def _masked_mean(values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Mean of ``values [batch, length, ...]`` over real tokens."""
    if mask is None:
        return values.mean()
    weights = mask.to(values.dtype)
    while weights.dim() < values.dim():
        weights = weights.unsqueeze(-1)
    per_token = values.numel() // (mask.numel() or 1)
    return (values * weights).sum() / (weights.sum() * per_token).clamp_min(1)


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, mask: Optional[torch.Tensor] = None,
               tokens: str = "all", normalize: bool = False) -> torch.Tensor:
    """MSE between two ``[batch, length, hidden]`` states of equal width.

    ``tokens='cls'`` compares the first token only; ``normalize`` compares unit
    vectors by their squared distance (BERT-PKD's patient loss).
    """
    student, teacher = student.float(), teacher.float()
    if tokens == "cls":
        student, teacher, mask = student[:, :1], teacher[:, :1], None
    elif tokens != "all":
        raise CompressorError(f"unknown hidden tokens '{tokens}'; use all or cls")
    if normalize:
        # BERT-PKD: the squared distance between unit vectors, summed over the hidden size
        student = F.normalize(student, dim=-1)
        teacher = F.normalize(teacher, dim=-1)
        return _masked_mean(((student - teacher) ** 2).sum(-1), mask)
    return _masked_mean((student - teacher) ** 2, mask)


def cosine_loss(student: torch.Tensor, teacher: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DistilBERT's alignment loss: 1 - cosine between the hidden vectors, over real tokens."""
    cos = F.cosine_similarity(student.float(), teacher.float(), dim=-1)
    return _masked_mean(1.0 - cos, mask)


# -- attention -------------------------------------------------------------

def _check_heads(student: torch.Tensor, teacher: torch.Tensor) -> None:
    if student.shape != teacher.shape:
        raise CompressorError(
            f"attention maps differ in shape (student {tuple(student.shape)}, teacher "
            f"{tuple(teacher.shape)}): attention losses need equal head counts; use the "
            "MiniLM relation loss (minilm) when teacher and student differ")


def _row_mask(mask: Optional[torch.Tensor], like: torch.Tensor) -> Optional[torch.Tensor]:
    """``[batch, heads, query]`` weights: real query rows only."""
    if mask is None:
        return None
    return mask[:, None, :].expand(like.shape[0], like.shape[1], mask.shape[-1])


def attention_mse(student: torch.Tensor, teacher: torch.Tensor,
                  mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """MSE between attention probabilities (TinyBERT, MobileBERT), real query and key tokens."""
    _check_heads(student, teacher)
    diff = (student.float() - teacher.float()) ** 2
    if mask is not None:
        diff = diff * mask[:, None, None, :].to(diff.dtype)   # padded keys hold ~0 anyway
        return _masked_mean(diff.sum(-1) / mask.sum(-1)[:, None, None].clamp_min(1),
                            _row_mask(mask, diff))
    return diff.mean()


def kl_rows(student_probs: torch.Tensor, teacher_probs: torch.Tensor,
            mask: Optional[torch.Tensor] = None, eps: float = 1e-12) -> torch.Tensor:
    """KL(teacher ‖ student) of each row of ``[batch, heads, query, key]``, averaged over real rows."""
    t = teacher_probs.float()
    kl = (t * (torch.log(t + eps) - torch.log(student_probs.float() + eps))).sum(-1)
    return _masked_mean(kl, _row_mask(mask, kl))


def attention_kl(student: torch.Tensor, teacher: torch.Tensor,
                 mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """KL divergence between attention distributions (MiniLM, MobileBERT's attention transfer)."""
    _check_heads(student, teacher)
    return kl_rows(student, teacher, mask)


def relation(a: torch.Tensor, b: torch.Tensor, heads: int,
             mask: Optional[torch.Tensor] = None, log: bool = False) -> torch.Tensor:
    """MiniLM's self-attention relation: softmax(A_h B_hᵀ / √d_h) over ``heads`` relation heads.

    ``a`` and ``b`` are ``[batch, length, hidden]`` (query, key or value vectors
    of one layer). Splitting into a chosen number of relation heads, rather
    than the model's own heads, is what lets teacher and student differ in
    hidden size and head count: each side yields ``[batch, heads, length, length]``.
    """
    batch, length, hidden = a.shape
    if hidden % heads:
        raise CompressorError(f"hidden size {hidden} does not split into {heads} relation heads")
    size = hidden // heads
    a = a.float().view(batch, length, heads, size).transpose(1, 2)
    b = b.float().view(batch, b.shape[1], heads, size).transpose(1, 2)
    scores = a @ b.transpose(-1, -2) / math.sqrt(size)
    if mask is not None:
        scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
    return F.log_softmax(scores, -1) if log else F.softmax(scores, -1)


def relation_kl(student: Dict[str, torch.Tensor], teacher: Dict[str, torch.Tensor],
                relations: Sequence[str] = ("qk", "vv"), heads: int = 12,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """MiniLM: the sum over ``relations`` (``qk`` attention distribution, ``vv`` value relation,
    MiniLMv2's ``qq`` and ``kk``) of KL(teacher relation ‖ student relation).

    ``student`` and ``teacher`` map ``q``, ``k``, ``v`` to that layer's projections.
    """
    total = 0.0
    for rel in relations:
        if rel not in RELATIONS:
            raise CompressorError(f"unknown MiniLM relation '{rel}'; use {', '.join(RELATIONS)}")
        x, y = rel
        t = relation(teacher[x], teacher[y], heads, mask)
        s_log = relation(student[x], student[y], heads, mask, log=True)
        kl = (t * (torch.log(t + 1e-12) - s_log)).sum(-1)
        total = total + _masked_mean(kl, _row_mask(mask, kl))
    return total


# -- which losses, with which weights ----------------------------------------

@dataclass
class LossConfig:
    """Weights of each loss (0 turns it off) and their settings; the keys of a recipe's ``losses``."""

    kd: float = 1.0                    # soft-target cross-entropy with the teacher's logits
    temperature: float = 1.0
    task: float = 0.0                  # hard labels (MSE for regression tasks)
    logits_mse: float = 0.0            # MSE between logits (Tang et al.)
    hidden: float = 0.0                # hidden-state MSE over hidden_mapping
    hidden_mapping: Union[str, List[int]] = "uniform"
    hidden_tokens: str = "all"         # all, or cls (BERT-PKD)
    hidden_normalize: bool = False     # BERT-PKD compares normalised vectors
    embedding: float = 0.0             # embedding-output MSE
    attention: float = 0.0             # attention probabilities over hidden_mapping's layers
    attention_loss: str = "mse"        # mse (TinyBERT) or kl
    cosine: float = 0.0                # DistilBERT: cosine of the last hidden states
    minilm: float = 0.0                # MiniLM relation KL, last student layer vs minilm_teacher_layer
    minilm_relations: List[str] = field(default_factory=lambda: ["qk", "vv"])
    minilm_heads: int = 0              # relation heads; 0 = the teacher's head count
    minilm_teacher_layer: int = 0      # 0 = the teacher's last layer

    def check(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", float) and value < 0:
                raise CompressorError(f"losses.{f.name} must be >= 0, got {value}")
        if self.temperature <= 0:
            raise CompressorError(f"losses.temperature must be positive, got {self.temperature}")
        if isinstance(self.hidden_mapping, str) and self.hidden_mapping not in MAPPINGS:
            raise CompressorError(f"losses.hidden_mapping '{self.hidden_mapping}' is unknown; use "
                                  f"{', '.join(MAPPINGS)} or a list of teacher layers")
        if self.hidden_tokens not in ("all", "cls"):
            raise CompressorError(f"losses.hidden_tokens must be all or cls, got {self.hidden_tokens!r}")
        if self.attention_loss not in ("mse", "kl"):
            raise CompressorError(f"losses.attention_loss must be mse or kl, got {self.attention_loss!r}")
        bad = [r for r in self.minilm_relations if r not in RELATIONS]
        if bad:
            raise CompressorError(f"losses.minilm_relations: unknown '{bad[0]}'; use {', '.join(RELATIONS)}")
        if not any(getattr(self, n) for n in OUTPUT_LOSSES + INTERMEDIATE_LOSSES):
            raise CompressorError("losses: every weight is 0; give at least one loss a weight")

    @property
    def needs_hidden(self) -> bool:
        return bool(self.hidden or self.embedding or self.cosine)

    @property
    def needs_attentions(self) -> bool:
        return bool(self.attention)

    @property
    def needs_teacher_logits(self) -> bool:
        return bool(self.kd or self.logits_mse)

    def intermediate_only(self) -> "LossConfig":
        """TinyBERT's first stage: the same layer losses, no prediction-layer loss."""
        return _replace(self, **{n: 0.0 for n in OUTPUT_LOSSES})

    def prediction_only(self) -> "LossConfig":
        """TinyBERT's second stage: the prediction-layer losses alone."""
        return _replace(self, **{n: 0.0 for n in INTERMEDIATE_LOSSES})


OUTPUT_LOSSES = ("kd", "task", "logits_mse")
INTERMEDIATE_LOSSES = ("hidden", "embedding", "attention", "cosine", "minilm")


def _replace(config: LossConfig, **changes) -> LossConfig:
    from dataclasses import replace
    return replace(config, **changes)


def loss_config(values: Optional[dict]) -> LossConfig:
    """A :class:`LossConfig` from a recipe mapping, every problem as one CompressorError."""
    from ..recipe.registry import nested_config

    config = nested_config(LossConfig, values, "losses")
    config.check()
    return config
