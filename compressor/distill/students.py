"""Building a student from a teacher: fewer of its layers, a narrower random encoder,
another pre-trained encoder, or a small BiLSTM/CNN classifier."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import List, Optional, Tuple

from torch import nn

from ..arch import ARCHITECTURES, arch_of
from ..errors import CompressorError
from ..settings import check_fields, setting
from .small import CLASSES as SMALL_KINDS, build_small

KINDS = ("layers", "config", "pretrained", "input") + tuple(SMALL_KINDS)
LAYER_PICKS = ("every", "first", "last")


@dataclass
class StudentSpec:
    """What the student is; the keys of a recipe's ``student`` mapping.

    - ``layers``: the teacher with ``num_layers`` of its layers, picked by ``pick``
      (``every``: 1, 1+k, 1+2k... as DistilBERT; ``first`` as BERT-PKD; ``last``) or
      listed in ``layers`` (1-based teacher layer numbers); embeddings and head copied.
    - ``config``: a randomly initialised encoder of the teacher's architecture (or
      ``model_type``) with ``num_layers``, ``hidden_size``, ``heads``, ``ffn_size``.
    - ``pretrained``: another pre-trained encoder, ``model`` (a folder, alias or hub id),
      with a new head.
    - ``bilstm`` / ``cnn``: a small classifier over the teacher tokenizer's ids.
    - ``input`` (recipe stage only): the stage's input model, trained on from the teacher.
    """

    kind: str = setting("layers", check=lambda v, name, c: None if v in KINDS else
                        f"student kind '{v}' is unknown; use {', '.join(KINDS)}")
    num_layers: Optional[int] = setting(None, check=lambda v, name, c: None if v is None or v >= 1 else
                                        "num_layers must be at least 1; leave it out for half "
                                        "the teacher's layers")   # layers, config: None = half the teacher's
    pick: str = setting("every", check=lambda v, name, c: None if v in LAYER_PICKS else
                        f"student pick '{v}' is unknown; use {', '.join(LAYER_PICKS)}")  # layers: every, first or last
    layers: Optional[List[int]] = None  # layers: teacher layers to keep (overrides num_layers, pick)
    hidden_size: int = 0           # config: 0 = the teacher's; bilstm/cnn: LSTM units or filters
    heads: int = 0                 # config: 0 = the teacher's
    ffn_size: int = 0              # config: 0 = 4 x hidden_size
    model_type: str = ""           # config: another registered architecture
    model: str = ""                # pretrained: the student's checkpoint
    embedding_dim: int = 64        # bilstm, cnn
    dropout: float = 0.1           # bilstm, cnn
    init_embeddings: bool = True   # bilstm, cnn: start from the teacher's word embeddings (PCA)

    def check(self) -> None:
        check_fields(self)
        if self.kind == "pretrained" and not self.model:
            raise CompressorError("student kind 'pretrained' needs model: a checkpoint folder or alias")
        if self.kind == "config" and self.model_type and self.model_type not in ARCHITECTURES:
            raise CompressorError(f"student model_type '{self.model_type}' is not registered; "
                                  f"use {', '.join(sorted(ARCHITECTURES))}")
        for name in ("hidden_size", "heads", "ffn_size", "embedding_dim"):
            if getattr(self, name) < 0:
                raise CompressorError(f"student {name} must be >= 0, got {getattr(self, name)}")

    @property
    def is_small(self) -> bool:
        return self.kind in SMALL_KINDS


def student_spec(values) -> StudentSpec:
    """A :class:`StudentSpec` from a recipe mapping (or a spec), every problem a CompressorError."""
    if isinstance(values, StudentSpec):
        values.check()
        return values
    from ..recipe.registry import nested_config

    spec = nested_config(StudentSpec, values, "student")
    spec.check()
    return spec


def teacher_layers_to_keep(spec: StudentSpec, teacher_layers: int) -> List[int]:
    """1-based teacher layers the student keeps, in order."""
    if spec.layers:
        bad = [i for i in spec.layers if not 1 <= i <= teacher_layers]
        if bad:
            raise CompressorError(f"student layers name teacher layer {bad[0]}; the teacher has "
                                  f"layers 1..{teacher_layers}")
        return list(spec.layers)
    m = spec.num_layers or max(1, teacher_layers // 2)
    if m > teacher_layers:
        raise CompressorError(f"student num_layers {m} exceeds the teacher's {teacher_layers} layers")
    if spec.pick == "first":
        return list(range(1, m + 1))
    if spec.pick == "last":
        return list(range(teacher_layers - m + 1, teacher_layers + 1))
    step = teacher_layers / m
    return [1 + int(i * step) for i in range(m)]


def build_student(spec: StudentSpec, teacher: nn.Module, teacher_tokenizer, task
                  ) -> Tuple[nn.Module, object, dict]:
    """The student model, its tokenizer, and a note of how it was made (for the record)."""
    spec.check()
    if spec.kind == "input":
        raise CompressorError("student kind 'input' means a recipe stage's input model; "
                              "outside a recipe use kind 'pretrained' with model: PATH")
    if spec.is_small:
        model = build_small(spec.kind, teacher_tokenizer, task, spec.embedding_dim,
                            spec.hidden_size or 128, spec.dropout,
                            teacher if spec.init_embeddings else None)
        return model, teacher_tokenizer, {"kind": spec.kind}
    if spec.kind == "pretrained":
        from ..models import load_for_task

        model, tokenizer = load_for_task(spec.model, task, attn_implementation="eager")
        return model, tokenizer, {"kind": "pretrained", "model": spec.model}
    t_arch = arch_of(teacher)
    if spec.kind == "layers":
        keep = teacher_layers_to_keep(spec, t_arch.num_layers(teacher.config))
        model = copy.deepcopy(teacher)
        layers = t_arch.get_layers(model)
        t_arch.set_layers(model, nn.ModuleList(layers[i - 1] for i in keep))
        return model, teacher_tokenizer, {"kind": "layers", "teacher_layers": keep}
    return _random_student(spec, teacher, teacher_tokenizer, task)


def _random_student(spec: StudentSpec, teacher, tokenizer, task):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    t_arch = arch_of(teacher)
    if spec.model_type and spec.model_type != teacher.config.model_type:
        config = AutoConfig.for_model(spec.model_type)
        config.vocab_size = teacher.config.vocab_size
        config.pad_token_id = tokenizer.pad_token_id or 0
        config.max_position_embeddings = max(getattr(teacher.config, "max_position_embeddings", 512), 512)
        if hasattr(config, "type_vocab_size"):
            config.type_vocab_size = getattr(teacher.config, "type_vocab_size", 2)
    else:
        config = copy.deepcopy(teacher.config)
    arch = arch_of(config)
    hidden = spec.hidden_size or t_arch.hidden_size(teacher.config)
    heads = spec.heads or t_arch.num_heads(teacher.config)
    if hidden % heads:
        raise CompressorError(f"student hidden_size {hidden} does not split into {heads} heads")
    values = {arch.num_layers_key: spec.num_layers or max(1, t_arch.num_layers(teacher.config) // 2),
              arch.hidden_key: hidden, arch.heads_key: heads,
              arch.ffn_key: spec.ffn_size or 4 * hidden}
    for key, value in values.items():
        setattr(config, key, value)
    labels = task.labels if task.labels is not None else ("score",)
    config.num_labels = task.num_labels
    config.id2label = dict(enumerate(labels))
    config.label2id = {l: i for i, l in enumerate(labels)}
    config.problem_type = "regression" if task.is_regression else "single_label_classification"
    config.architectures = None
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    return model, tokenizer, {"kind": "config", **{k: v for k, v in values.items()},
                              "model_type": config.model_type}


def same_tokenizer(a, b) -> bool:
    """Whether two tokenizers turn text into the same ids (so hidden states line up)."""
    if a is b:
        return True
    return (type(a).__name__ == type(b).__name__ and a.get_vocab() == b.get_vocab()
            and getattr(a, "do_lower_case", None) == getattr(b, "do_lower_case", None))
