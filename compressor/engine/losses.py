"""Distillation losses: small pure functions of tensors, and the registry that names them.

Conventions: ``hidden_states`` are Hugging Face tuples (index 0 is the embedding
output, index i the output of layer i); ``attentions`` are per-layer
``[batch, heads, query, key]`` probabilities; ``mask`` is the attention mask
``[batch, length]`` (1 for real tokens), so padding never counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from compressor.core.batches import has_label
from compressor.core.arch import arch_of
from compressor.core.errors import CompressorError
from compressor.core.registry import Registry
from compressor.core.settings import build, check_fields, not_negative, positive, setting

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


def soft_targets(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                 temperature: float = 1.0) -> torch.Tensor:
    """The toolkit's one soft-target loss (the registered ``kd``, and what every method that
    learns from a teacher's logits uses): Hinton's soft cross-entropy at ``temperature``, or
    the MSE between outputs for a regression task (one output)."""
    if student_logits.shape[-1] == 1:
        return logits_mse(student_logits, teacher_logits)
    return soft_cross_entropy(student_logits, teacher_logits, temperature)


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


# -- losses by name ----------------------------------------------------------------
#
# A loss is a function ``fn(signals, settings) -> scalar tensor`` registered under its name
# with its settings type; the ``losses:`` section names the ones to train with, each with
# its weight and settings, and the distiller adds them up. Adding a loss is one registered
# function (and its settings class, when it has settings beyond the weight).

USES = ("teacher_logits", "labels", "hidden_states", "attentions", "teacher")


@dataclass
class LossSettings:
    """A loss's weight in the sum; a loss with settings of its own subclasses this."""

    weight: float = setting(1.0, check=not_negative)


@dataclass
class Signals:
    """What one training batch gives a loss."""

    student: Any                      # the student's output: logits, hidden_states, attentions
    teacher: Any                      # the teacher's output on the batch (None unless a loss needs it)
    teacher_logits: Optional[torch.Tensor]
    labels: Optional[torch.Tensor]
    mask: torch.Tensor                # attention mask [batch, length]
    regression: bool
    project: Callable                 # (student states, student layer) -> states of the teacher's width
    state: Any = None                 # what this loss's ``prepare`` returned


class LossSetup:
    """The two models, before training: what a loss's ``prepare(settings, setup)`` may use.

    ``capture(model, layer_index)`` hooks a layer so that, after each forward pass, its
    ``values`` hold that layer's query, key and value vectors (``q``, ``k``, ``v``); ``close()``
    removes the hooks.
    """

    def __init__(self, student, teacher, capture: Callable):
        self.student, self.teacher, self.capture = student, teacher, capture

    @property
    def student_layers(self) -> int:
        return arch_of(self.student).num_layers(self.student.config)

    @property
    def teacher_layers(self) -> int:
        return arch_of(self.teacher).num_layers(self.teacher.config)

    @property
    def teacher_heads(self) -> int:
        return arch_of(self.teacher).num_heads(self.teacher.config)


@dataclass(frozen=True)
class LossType:
    name: str
    fn: Callable                      # fn(signals, settings) -> scalar tensor, or None to skip a batch
    settings: type                    # LossSettings or a subclass
    uses: frozenset                   # of USES: what the batch must carry for it
    layers: bool                      # compares inner layers: a transformer student, the same tokenizer
    prepare: Optional[Callable]       # (settings, setup) -> Signals.state; its close(), if any, ends it
    projected: Optional[Callable]     # (settings, student layers, teacher layers) -> student layers
                                      # whose hidden states it compares with the teacher's


LOSSES = Registry("loss")   # filled by @register_loss below (and by users' own losses)


def register_loss(name: str, settings: type = LossSettings, uses: Sequence[str] = (), layers: bool = False,
                  prepare: Optional[Callable] = None, projected: Optional[Callable] = None):
    """Decorator: make ``fn(signals, settings)`` the loss ``name`` of the ``losses:`` section."""
    unknown = set(uses) - set(USES)
    if unknown:
        raise ValueError(f"loss {name}: unknown uses {sorted(unknown)}; use {', '.join(USES)}")

    def wrap(fn):
        LOSSES[name] = LossType(name, fn, settings, frozenset(uses), layers, prepare, projected)
        return fn
    return wrap


class Losses(dict):
    """The ``losses:`` section: loss name -> its settings (a number alone is the weight)."""

    def active(self) -> List[Tuple[LossType, LossSettings]]:
        """The losses with a weight, each with its registered type."""
        return [(LOSSES[name], settings) for name, settings in self.items() if settings.weight]

    def uses(self, what: str) -> bool:
        return any(what in loss.uses for loss, _ in self.active())

    @property
    def needs_hidden(self) -> bool:
        return self.uses("hidden_states")

    @property
    def needs_attentions(self) -> bool:
        return self.uses("attentions")

    @property
    def needs_teacher_logits(self) -> bool:
        return self.uses("teacher_logits")

    def layer_losses(self) -> List[str]:
        """Names of the active losses that compare inner layers."""
        return [loss.name for loss, _ in self.active() if loss.layers]

    def intermediate_only(self) -> "Losses":
        """TinyBERT's first stage: the layer losses alone."""
        return Losses((n, s) for n, s in self.items() if LOSSES[n].layers)

    def prediction_only(self) -> "Losses":
        """TinyBERT's second stage: the prediction-layer losses alone."""
        return Losses((n, s) for n, s in self.items() if not LOSSES[n].layers)

    def check(self) -> None:
        for name, settings in self.items():
            if name not in LOSSES:
                raise CompressorError(_unknown_loss(name))
            check_fields(settings)
        if not self.active():
            raise CompressorError("losses: every weight is 0; give at least one loss a weight")

    @classmethod
    def from_settings(cls, values, path: tuple, what: str, prefix: str):
        """``(Losses or None, problems)`` from a mapping, each problem with its path of keys."""
        name = prefix[:-1] or what

        def say(message):
            return message if message.startswith(what) else f"{what}: {message}"

        if not isinstance(values, dict):
            return None, [(path, say(f"{name} must be a mapping of loss names to weights or "
                                     f"settings, got {values!r}"))]
        losses, problems = cls(), []
        for key, value in values.items():
            if key not in LOSSES:
                problems.append(((*path, key), say(_unknown_loss(key))))
                continue
            if isinstance(value, LOSSES[key].settings):
                losses[key] = value
                continue
            if value is None:
                value = {}
            elif not isinstance(value, dict):
                value = {"weight": value}
            settings, found = build(LOSSES[key].settings, value, (*path, key), what, f"{prefix}{key}.")
            problems += found
            if settings is not None:
                losses[key] = settings
        if not problems and not losses.active():
            problems.append((path, say(f"{name}: every weight is 0; give at least one loss a weight")))
        return (None if problems else losses), problems

    @classmethod
    def describe(cls, prefix: str = "") -> List[str]:
        return [prefix + ", ".join(
            f"{n} ({', '.join(f.name for f in fields(t.settings))})" for n, t in LOSSES.items())]


def _unknown_loss(key: str) -> str:
    message = f"unknown loss '{key}'; use {', '.join(LOSSES)}"
    for name, loss in LOSSES.items():
        names = [f.name for f in fields(loss.settings)]
        setting_name = key[len(name) + 1:] if key.startswith(name + "_") else key
        if setting_name in names and setting_name != "weight":
            return f"{message} ('{key}' is a setting of {name}: {name}: {{weight: 1, {setting_name}: ...}})"
    return message


def _mapping(value, name, config=None) -> Optional[str]:
    if isinstance(value, str) and value not in MAPPINGS:
        return f"{name} '{value}' is unknown; use {', '.join(MAPPINGS)} or a list of teacher layers"
    if isinstance(value, list) and any(t < 1 for t in value):
        return f"{name} lists teacher layer {min(value)}; teacher layers start at 1"
    return None


def _student_layers(value, name, config=None) -> Optional[str]:
    if any(s < 1 for s in value):
        return f"{name} lists student layer {min(value)}; student layers start at 1"
    return None


def _mapped(settings, setup: LossSetup) -> List[Tuple[int, int]]:
    pairs = layer_mapping(setup.student_layers, setup.teacher_layers, settings.mapping)
    only = getattr(settings, "layers", None)
    return [(s, t) for s, t in pairs if s in only] if only else pairs


# -- the losses --------------------------------------------------------------------

@dataclass
class KDSettings(LossSettings):
    temperature: float = setting(1.0, check=positive)


@register_loss("kd", KDSettings, uses=("teacher_logits",))
def kd(signals: Signals, settings: KDSettings) -> torch.Tensor:
    """Hinton's soft targets at ``temperature``; MSE between logits for a regression task."""
    return soft_targets(signals.student.logits, signals.teacher_logits, settings.temperature)


@register_loss("task", uses=("labels",))
def task(signals: Signals, settings: LossSettings) -> Optional[torch.Tensor]:
    """The labels (MSE for a regression task); rows without one (augmented rows) are left out."""
    if signals.labels is None:
        return None
    known = has_label(signals.labels)
    if not known.any():
        return None
    if known.all():
        return task_loss(signals.student.logits, signals.labels)
    return task_loss(signals.student.logits[known], signals.labels[known])


@register_loss("logits_mse", uses=("teacher_logits",))
def logits_mse_loss(signals: Signals, settings: LossSettings) -> torch.Tensor:
    """MSE between the student's and the teacher's logits (Tang et al.)."""
    return logits_mse(signals.student.logits, signals.teacher_logits)


@dataclass
class HiddenSettings(LossSettings):
    mapping: Union[str, List[int]] = setting("uniform", check=_mapping)   # see layer_mapping
    tokens: str = setting("all", choices=("all", "cls"))   # cls: the first token only (BERT-PKD)
    normalize: bool = False                                 # BERT-PKD compares unit vectors
    layers: List[int] = setting(default_factory=list, check=_student_layers)  # only these student layers' pairs; empty: all


@register_loss("hidden", HiddenSettings, uses=("hidden_states",), layers=True, prepare=_mapped,
               projected=lambda settings, m, n: [s for s, _ in layer_mapping(m, n, settings.mapping)])
def hidden(signals: Signals, settings: HiddenSettings) -> torch.Tensor:
    """MSE of hidden states, student layer against teacher layer as ``mapping`` pairs them."""
    parts = [hidden_mse(signals.project(signals.student.hidden_states[s], s),
                        signals.teacher.hidden_states[t], signals.mask, settings.tokens,
                        settings.normalize) for s, t in signals.state]
    return torch.stack(parts).mean()


@register_loss("embedding", uses=("hidden_states",), layers=True, projected=lambda settings, m, n: [0])
def embedding(signals: Signals, settings: LossSettings) -> torch.Tensor:
    """MSE of the embedding outputs (TinyBERT)."""
    return hidden_mse(signals.project(signals.student.hidden_states[0], 0),
                      signals.teacher.hidden_states[0], signals.mask)


@dataclass
class AttentionSettings(LossSettings):
    mapping: Union[str, List[int]] = setting("uniform", check=_mapping)
    measure: str = setting("mse", choices=("mse", "kl"))   # mse (TinyBERT) or kl (MobileBERT)
    layers: List[int] = setting(default_factory=list, check=_student_layers)  # only these student layers' pairs; empty: all


@register_loss("attention", AttentionSettings, uses=("attentions",), layers=True, prepare=_mapped)
def attention(signals: Signals, settings: AttentionSettings) -> torch.Tensor:
    """Attention probabilities, student layer against teacher layer as ``mapping`` pairs them."""
    fn = attention_kl if settings.measure == "kl" else attention_mse
    parts = [fn(signals.student.attentions[s - 1], signals.teacher.attentions[t - 1], signals.mask)
             for s, t in signals.state]
    return torch.stack(parts).mean()


@register_loss("cosine", uses=("hidden_states",), layers=True, projected=lambda settings, m, n: [m])
def cosine(signals: Signals, settings: LossSettings) -> torch.Tensor:
    """DistilBERT: 1 - cosine between the last hidden states."""
    last = len(signals.student.hidden_states) - 1
    return cosine_loss(signals.project(signals.student.hidden_states[last], last),
                       signals.teacher.hidden_states[-1], signals.mask)


@dataclass
class MiniLMSettings(LossSettings):
    relations: List[str] = setting(default_factory=lambda: ["qk", "vv"], choices=RELATIONS,
                                   what="MiniLM relation")
    heads: int = setting(0, check=not_negative)           # relation heads; 0: the teacher's head count
    teacher_layer: int = setting(0, check=not_negative)   # 0: the teacher's last layer


class _Relations:
    """The hooks that keep the last student layer's and one teacher layer's q, k, v."""

    def __init__(self, settings: MiniLMSettings, setup: LossSetup):
        t_layers = setup.teacher_layers
        t_index = (settings.teacher_layer or t_layers) - 1
        if not 0 <= t_index < t_layers:
            raise CompressorError(f"losses.minilm.teacher_layer {settings.teacher_layer} is outside "
                                  f"the teacher's layers 1..{t_layers}")
        self.heads = settings.heads or setup.teacher_heads
        self.captures = [setup.capture(setup.student, setup.student_layers - 1),
                         setup.capture(setup.teacher, t_index)]

    def close(self) -> None:
        for capture in self.captures:
            capture.close()


@register_loss("minilm", MiniLMSettings, uses=("teacher",), layers=True, prepare=_Relations)
def minilm(signals: Signals, settings: MiniLMSettings) -> torch.Tensor:
    """MiniLM's KL of self-attention relations, last student layer against ``teacher_layer``."""
    student_qkv, teacher_qkv = (c.values for c in signals.state.captures)
    return relation_kl(student_qkv, teacher_qkv, settings.relations, signals.state.heads, signals.mask)
