"""Building a student from a teacher: fewer of its layers, a narrower random encoder,
another pre-trained encoder, or a small BiLSTM/CNN classifier."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar, Iterable, List, Optional, Tuple

from torch import nn

from compressor.core.arch import ARCHITECTURES, arch_of
from compressor.core.errors import CompressorError
from compressor.core.settings import (check_fields, from_values, not_negative, picks_type_by, positive, setting, tag,
                        variant)
from compressor.core.small import build_small

LAYER_PICKS = ("every", "first", "last")


def _num_layers(value, name, config=None) -> Optional[str]:
    if value is not None and value < 1:
        return "num_layers must be at least 1; leave it out for half the teacher's layers"
    return None


@picks_type_by("kind")
@dataclass
class StudentConfig:
    """What the student is: the ``student:`` section, one type per ``kind``."""

    kind: str = tag("layers")
    is_small: ClassVar[bool] = False      # a BiLSTM/CNN classifier, not a transformer

    def check(self) -> None:
        check_fields(self)


@variant
@dataclass
class LayersStudent(StudentConfig):
    """The teacher with ``num_layers`` of its layers, picked ``every`` (1, 1+k, 1+2k..., as
    DistilBERT), ``first`` (BERT-PKD) or ``last``, or those listed in ``layers`` (1-based);
    embeddings and head copied."""

    kind: str = tag("layers")
    num_layers: Optional[int] = setting(None, check=_num_layers)   # None: half the teacher's
    pick: str = setting("every", choices=LAYER_PICKS)
    layers: Optional[List[int]] = None    # teacher layers to keep (overrides num_layers, pick)


@variant
@dataclass
class ConfigStudent(StudentConfig):
    """A randomly initialised encoder of the teacher's architecture (or ``model_type``)."""

    kind: str = tag("config")
    num_layers: Optional[int] = setting(None, check=_num_layers)   # None: half the teacher's
    hidden_size: int = setting(0, check=not_negative)   # 0: the teacher's
    heads: int = setting(0, check=not_negative)         # 0: the teacher's
    ffn_size: int = setting(0, check=not_negative)      # 0: 4 x hidden_size
    model_type: str = setting("", check=lambda v, name, c: None if not v or v in ARCHITECTURES else
                              f"student model_type '{v}' is not registered; "
                              f"use {', '.join(sorted(ARCHITECTURES))}")
    # random: drawn at random; teacher: cut out of the teacher's weights (every k-th layer, its
    # most active channels, heads, dimensions and neurons: compressor.engine.subclone)
    init: str = setting("random", choices=("random", "teacher"))
    init_rows: int = setting(256, check=positive)   # training rows whose activations rank them


@variant
@dataclass
class PretrainedStudent(StudentConfig):
    """Another pre-trained encoder with a new head."""

    kind: str = tag("pretrained")
    model: str = setting("", check=lambda v, name, c: None if v else
                         "student kind 'pretrained' needs model: a checkpoint folder or alias")


@variant
@dataclass
class InputStudent(StudentConfig):
    """Recipe stage only: the stage's input model, trained on from the teacher."""

    kind: str = tag("input")


@dataclass
class SmallStudent(StudentConfig):
    """A small classifier over the teacher tokenizer's ids (Tang et al.)."""

    embedding_dim: int = setting(64, check=positive)
    hidden_size: int = setting(128, check=positive)   # LSTM units or convolution filters
    dropout: float = 0.1
    init_embeddings: bool = True   # start from the teacher's word embeddings (PCA)
    is_small: ClassVar[bool] = True


@variant
@dataclass
class BiLSTMStudent(SmallStudent):
    kind: str = tag("bilstm")


@variant
@dataclass
class CNNStudent(SmallStudent):
    kind: str = tag("cnn")


def student_config(values) -> StudentConfig:
    """A student config from a mapping (recipe, ``--student KEY=VALUE``) or a config, checked."""
    spec = from_values(StudentConfig, values, "student")
    spec.check()
    return spec


def teacher_layers_to_keep(spec: LayersStudent, teacher_layers: int) -> List[int]:
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


def build_student(spec: StudentConfig, teacher: nn.Module, teacher_tokenizer, task,
                  batches: Optional[Iterable[dict]] = None) -> Tuple[nn.Module, object, dict]:
    """The student model, its tokenizer, and a note of how it was made (for the record).

    ``batches`` (teacher inputs from training rows) rank the teacher's channels for a
    ``config`` student with ``init: teacher``; without them, weight norms do."""
    spec.check()
    if isinstance(spec, InputStudent):
        raise CompressorError("student kind 'input' means a recipe stage's input model; "
                              "outside a recipe use kind 'pretrained' with model: PATH")
    if isinstance(spec, SmallStudent):
        model = build_small(spec.kind, teacher_tokenizer, task, spec.embedding_dim,
                            spec.hidden_size, spec.dropout,
                            teacher if spec.init_embeddings else None)
        return model, teacher_tokenizer, {"kind": spec.kind}
    if isinstance(spec, PretrainedStudent):
        from compressor.core.models import load_for_task

        model, tokenizer = load_for_task(spec.model, task, attn_implementation="eager")
        return model, tokenizer, {"kind": "pretrained", "model": spec.model}
    t_arch = arch_of(teacher)
    if isinstance(spec, LayersStudent):
        keep = teacher_layers_to_keep(spec, t_arch.num_layers(teacher.config))
        model = copy.deepcopy(teacher)
        layers = t_arch.get_layers(model)
        t_arch.set_layers(model, nn.ModuleList(layers[i - 1] for i in keep))
        return model, teacher_tokenizer, {"kind": "layers", "teacher_layers": keep}
    model, tokenizer, made = _random_student(spec, teacher, teacher_tokenizer, task)
    if spec.init == "teacher":
        made.update(_subclone(spec, model, teacher, batches))
    return model, tokenizer, made


def _config_shape(spec: ConfigStudent, t_arch, t_config) -> dict:
    """A ``config`` student's layers, width, heads and FFN, its unset ones from the teacher's."""
    hidden = spec.hidden_size or t_arch.hidden_size(t_config)
    heads = spec.heads or t_arch.num_heads(t_config)
    if hidden % heads:
        raise CompressorError(f"student hidden_size {hidden} does not split into {heads} heads")
    return {"num_layers": spec.num_layers or max(1, t_arch.num_layers(t_config) // 2),
            "hidden_size": hidden, "heads": heads, "ffn_size": spec.ffn_size or 4 * hidden}


def check_student(spec: StudentConfig, teacher_config) -> None:
    """What can be told of a student from its teacher's config alone, before any work: a student
    cut out of its teacher (``init: teacher``) must be of its architecture and no larger."""
    if not isinstance(spec, ConfigStudent) or spec.init != "teacher":
        return
    if spec.model_type and spec.model_type != teacher_config.model_type:
        raise CompressorError(f"student init: teacher needs the teacher's architecture "
                              f"({teacher_config.model_type}), not model_type {spec.model_type}")
    t_arch = arch_of(teacher_config)
    ours = _config_shape(spec, t_arch, teacher_config)
    theirs = {"num_layers": t_arch.num_layers(teacher_config), "hidden_size": t_arch.hidden_size(teacher_config),
              "heads": t_arch.num_heads(teacher_config), "ffn_size": t_arch.ffn_size(teacher_config)}
    ours["head size"], theirs["head size"] = (ours["hidden_size"] // ours["heads"],
                                              theirs["hidden_size"] // theirs["heads"])
    for name in ("hidden_size", "heads", "ffn_size", "num_layers", "head size"):
        if ours[name] > theirs[name]:
            raise CompressorError(f"student init: teacher cuts the student out of the teacher, whose "
                                  f"{name} is {theirs[name]}; the student's {ours[name]} is larger "
                                  "(use init: random)")


def _subclone(spec: ConfigStudent, student: nn.Module, teacher: nn.Module, batches) -> dict:
    """Fill ``student`` with slices of ``teacher``'s weights; the record's note of it."""
    from compressor.engine import subclone

    check_student(spec, teacher.config)
    t_arch, t_config = arch_of(teacher), teacher.config
    shape = _config_shape(spec, t_arch, t_config)   # what the student was built with
    keep = [i - 1 for i in teacher_layers_to_keep(LayersStudent(num_layers=shape["num_layers"]),
                                                  t_arch.num_layers(t_config))]
    importance = (subclone.activation_importance(teacher, batches) if batches is not None
                  else subclone.magnitude_importance(teacher))
    chosen = subclone.select(importance, keep, t_arch.num_heads(t_config), shape["hidden_size"],
                             shape["heads"], shape["ffn_size"])
    subclone.fill_from_teacher(student, teacher, keep, chosen)
    return {"init": "teacher", "teacher_layers": [i + 1 for i in keep],
            "importance": importance["source"], "teacher_heads": [h + 1 for h in chosen["heads"].tolist()],
            "residual_channels": chosen["hidden"].tolist()}   # 0-based: the layer losses' projections start there


def _random_student(spec: ConfigStudent, teacher, tokenizer, task):
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
    shape = _config_shape(spec, t_arch, teacher.config)
    values = {arch.num_layers_key: shape["num_layers"], arch.hidden_key: shape["hidden_size"],
              arch.heads_key: shape["heads"], arch.ffn_key: shape["ffn_size"]}
    for key, value in values.items():
        setattr(config, key, value)
    labels = task.labels if task.labels is not None else ("score",)
    config.num_labels = task.num_labels
    config.id2label = dict(enumerate(labels))
    config.label2id = {l: i for i, l in enumerate(labels)}
    config.problem_type = "regression" if task.is_regression else "single_label_classification"
    config.architectures = None
    from compressor.core.models import float32_kwargs

    # a teacher's config may say fp16 (as it was stored): a student trains from float32 weights
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager",
                                                           **float32_kwargs())
    return model, tokenizer, {"kind": "config", **{k: v for k, v in values.items()},
                              "model_type": config.model_type}


def same_tokenizer(a, b) -> bool:
    """Whether two tokenizers turn text into the same ids (so hidden states line up)."""
    if a is b:
        return True
    return (type(a).__name__ == type(b).__name__ and a.get_vocab() == b.get_vocab()
            and getattr(a, "do_lower_case", None) == getattr(b, "do_lower_case", None))
