"""Running a distillation: the teacher, the student, the losses, on the shared training loop."""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from compressor.core.arch import arch_of
from compressor.core.data import data_for, data_meta, holdout, load_data, unlabelled_text
from compressor.core.data.augmented import joined
from compressor.core.device import resolve_device
from compressor.core.errors import CompressorError
from compressor.core.io import check_output_dir, versions
from compressor.core.metrics import task_score
from compressor.core.models import (checkpoint_meta, count_parameters, load_for_task, resolve_model,
                      save_checkpoint, size_on_disk)
from compressor.engine.scoring import chance_check, predict_logits, score
from compressor.core.settings import check_fields, from_values, not_negative, section_of, setting, stage_folder
from compressor.core import distributed
from compressor.engine.train import TrackerLogs, TrainConfig, fit, set_seed, unwrap
from compressor.engine.train_config import teacher_setting, train_setting
from compressor.engine.losses import KDSettings, Losses, LossSetup, Signals
from compressor.engine.students import (InputStudent, LayersStudent, PretrainedStudent, StudentConfig, build_student,
                                        check_student, same_tokenizer)
from compressor.engine.teacher import resolve_teacher


@dataclass
class DistillConfig:
    """The student, the losses and the training run (``train``); the keys of the ``distill`` stage."""

    train: TrainConfig = train_setting()   # the prediction stage's run (the others start from it)
    student: StudentConfig = field(default_factory=lambda: LayersStudent(num_layers=3))
    losses: Losses = field(default_factory=lambda: Losses(kd=KDSettings()))   # name -> settings
    intermediate_epochs: float = setting(0.0, check=not_negative)   # TinyBERT's two stages: this many epochs of layer losses first
    intermediate_lr: float = 0.0       # its learning rate; 0 = lr
    progressive: bool = False          # MobileBERT: the first stage layer by layer, bottom up, lower layers fixed
    general_epochs: float = setting(0.0, check=not_negative)   # general distillation first: this many epochs of layer losses over unlabelled text
    general_lr: float = 0.0            # its learning rate; 0 = intermediate_lr, else lr
    general_rows: int = setting(0, check=not_negative)   # at most this many sentences of that text (a seeded sample); 0 = all
    general_teacher: str = "teacher"   # the general phase's teacher: the stage's, or a folder (the encoder the task teachers were fine-tuned from, as the papers do)
    general_cache: str = ""            # a folder: the general phase is kept there and reused by any run with the same student, settings, general teacher and text
    cache_teacher_logits: bool = True  # run the teacher once over the train set when only logits are needed
    augment: str = stage_folder("augment")   # a folder of augmented rows (compressor augment; in a recipe, "recipe": its augment stage's): every phase but the general one trains on them too, the teacher's logits their only targets
    teacher: str = teacher_setting()   # input (the model the stage starts from), recipe (the recipe's teacher) or a folder

    def __post_init__(self):
        # mappings (Python callers, --student/--loss KEY=VALUE) become the typed sections
        self.train = section_of(self, "train")
        self.student = from_values(StudentConfig, self.student, "student")
        self.losses = from_values(Losses, self.losses, "losses")

    def check(self) -> None:
        check_fields(self)
        self.train.check()
        self.student.check()
        self.losses.check()
        if self.intermediate_epochs and not self.losses.layer_losses():
            raise CompressorError("intermediate_epochs needs a layer loss (hidden, embedding, "
                                  "attention, cosine or minilm) in losses")
        if self.progressive and not self.intermediate_epochs:
            raise CompressorError("progressive transfer splits the first stage over the student's "
                                  "layers: set intermediate_epochs")
        if self.progressive and not any(hasattr(s, "layers") for _, s in self.losses.active()):
            raise CompressorError("progressive transfer needs a hidden or attention loss in losses")
        if (self.general_teacher != "teacher" or self.general_cache) and not self.general_epochs:
            raise CompressorError("general_teacher and general_cache belong to general distillation: "
                                  "set general_epochs")
        if self.general_epochs and not self.losses.layer_losses():
            raise CompressorError("general_epochs needs a layer loss (hidden, embedding, attention, "
                                  "cosine or minilm) in losses: general distillation matches layers")
        if self.intermediate_epochs and not self.losses.prediction_only().active():
            raise CompressorError("intermediate_epochs needs a prediction-layer loss (kd, task or "
                                  "logits_mse) for the second stage")

    @property
    def shared_general(self) -> bool:
        """A general phase other tasks may reuse: its text must not depend on the task."""
        return bool(self.general_epochs) and (self.general_teacher != "teacher" or bool(self.general_cache))


class Trainee(nn.Module):
    """The student plus the projections that only training needs; ``fit`` trains both."""

    def __init__(self, student: nn.Module, projections: nn.ModuleDict):
        super().__init__()
        self.student = student
        self.projections = projections
        self.config = student.config

    def forward(self, *args, **kwargs):
        return self.student(*args, **kwargs)


def _width(model) -> int:
    return arch_of(model).hidden_size(model.config)


def _layers(model) -> int:
    return arch_of(model).num_layers(model.config)


def make_projections(student, teacher, losses: Losses, channels: Optional[Sequence[int]] = None
                     ) -> nn.ModuleDict:
    """Linear maps from the student's width to the teacher's, one per compared hidden state.

    ``channels``: the teacher's residual channels a student cut out of it kept, in order; each
    map then starts as the cut's inverse (student channel j to teacher channel ``channels[j]``),
    so the layer losses begin by asking for what the student already computes."""
    s_width, t_width = _width(student), _width(teacher)
    projections = nn.ModuleDict()
    if s_width == t_width:
        return projections
    names = [f"layer{layer}" for loss, settings in losses.active() if loss.projected
             for layer in loss.projected(settings, _layers(student), _layers(teacher))]
    for name in dict.fromkeys(names):
        projections[name] = nn.Linear(s_width, t_width)
        if channels is not None:
            with torch.no_grad():
                projections[name].weight.zero_()
                projections[name].weight[list(channels), list(range(s_width))] = 1.0
                projections[name].bias.zero_()
    return projections


class _Capture:
    """Forward hooks that keep the query, key and value vectors of one layer."""

    def __init__(self, model, layer_index: int):
        spec = arch_of(model)
        layer = spec.get_layers(model)[layer_index]
        self.values: Dict[str, torch.Tensor] = {}
        self.handles = [linear.register_forward_hook(self._keep(names))
                        for linear, names in spec.qkv_projections(layer)]

    def _keep(self, names):
        def hook(module, inputs, output):
            self.values.update(zip(names, output.chunk(len(names), dim=-1)))
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


class DistillLoss:
    """``loss_fn(model, batch)`` for ``fit``: runs the teacher (or reads its cached logits)
    and adds up the configured losses, each times its weight."""

    def __init__(self, teacher, student, losses: Losses, cache: Optional[dict] = None,
                 teacher_token_types: bool = False):
        self.teacher, self.losses, self.cache = teacher, losses, cache
        self.teacher_token_types = teacher_token_types
        self.regression = student.config.num_labels == 1
        self.active = losses.active()
        setup = LossSetup(student, teacher, _Capture)
        self.states = {}
        try:
            for loss, settings in self.active:
                if loss.prepare is not None:
                    self.states[loss.name] = loss.prepare(settings, setup)
        except BaseException:
            self.close()
            raise
        self.run_teacher = (losses.uses("hidden_states") or losses.uses("attentions")
                            or losses.uses("teacher") or (losses.needs_teacher_logits and cache is None))

    def close(self):
        for state in self.states.values():
            if hasattr(state, "close"):
                state.close()

    def _cached(self, input_ids, mask, device):
        lengths = mask.sum(-1).tolist()
        rows = input_ids.cpu().tolist()
        try:
            return torch.stack([self.cache[tuple(r[:n])] for r, n in zip(rows, lengths)]).to(device)
        except KeyError:
            raise CompressorError("a training row has no cached teacher logits (was the train set "
                                  "changed during training?)") from None

    def __call__(self, model: Trainee, batch: dict) -> torch.Tensor:
        labels = batch.pop("labels", None)
        mask = batch["attention_mask"]
        extra = {}
        if self.losses.needs_hidden:
            extra["output_hidden_states"] = True
        if self.losses.needs_attentions:
            extra["output_attentions"] = True
        s_out = model(**batch, **extra)   # the wrapped Trainee: data parallel sees the forward
        t_out = None
        if self.run_teacher:
            t_inputs = {k: v for k, v in batch.items()
                        if k != "token_type_ids" or self.teacher_token_types}
            with torch.no_grad():
                t_out = self.teacher(**t_inputs, **extra)
        t_logits = None
        if self.losses.needs_teacher_logits:
            t_logits = (self._cached(batch["input_ids"], mask, s_out.logits.device)
                        if self.cache is not None else t_out.logits)
        signals = Signals(student=s_out, teacher=t_out, teacher_logits=t_logits, labels=labels,
                          mask=mask, regression=self.regression,
                          project=lambda states, layer: self._project(model, states, layer))
        total = s_out.logits.new_zeros((), dtype=torch.float32)
        for loss, settings in self.active:
            signals.state = self.states.get(loss.name)
            value = loss.fn(signals, settings)
            if value is not None:
                total = total + settings.weight * value
        return total

    @staticmethod
    def _project(model: Trainee, states: torch.Tensor, layer: int) -> torch.Tensor:
        model = unwrap(model)
        proj = model.projections[f"layer{layer}"] if f"layer{layer}" in model.projections else None
        return proj(states) if proj is not None else states


def teacher_logits_cache(teacher, teacher_tokenizer, student_tokenizer, examples, max_length: int,
                         device, precision: str = "fp32") -> Dict[tuple, torch.Tensor]:
    """The teacher's logits for every example, keyed by the student's token ids of that example.

    Keying by token ids (what a training batch carries) rather than by row number leaves the
    training loop unchanged; rows that tokenise alike have the same text, so the same logits.
    """
    logits = predict_logits(teacher, teacher_tokenizer, examples, max_length, 256, device,
                            precision=precision, desc="teacher logits")
    return keyed_logits(student_tokenizer, examples, logits, max_length)


def keyed_logits(student_tokenizer, examples, logits, max_length: int) -> Dict[tuple, torch.Tensor]:
    """``logits`` (one row per example, computed elsewhere) keyed as :func:`teacher_logits_cache` keys them."""
    if not len(examples):
        return {}
    logits = torch.as_tensor(logits).reshape(len(examples), -1)
    columns = [list(c) for c in zip(*[ex.texts for ex in examples])]
    ids = student_tokenizer(*columns, truncation=True, max_length=max_length,
                            padding=False)["input_ids"]
    return {tuple(row): logits[i] for i, row in enumerate(ids)}


def distill_model(teacher, teacher_tokenizer, train_set, dev_set, config: DistillConfig,
                  desc: str = "distill", student: Optional[nn.Module] = None,
                  student_tokenizer=None, callbacks: Sequence = (),
                  general_set=None, general_teacher=None,
                  general_teacher_path: str = "", augmented=None) -> Tuple[nn.Module, object, dict]:
    """Build the student ``config.student`` says, train it from ``teacher``; return it, its
    tokenizer, and the training record (the teacher is left unchanged).

    A ``student`` model given (a pruned model recovering, say) is trained as it is, with
    ``student_tokenizer`` (the teacher's by default); ``callbacks`` go to ``fit``.
    ``general_set``: the unlabelled text of ``config.general_epochs``
    (:func:`compressor.core.data.unlabelled_text`); ``general_teacher``: the model the general phase
    learns from (``teacher`` when None), loaded from ``general_teacher_path`` (which, with
    ``config.general_cache``, identifies it: :mod:`compressor.engine.general`).
    ``augmented``: rows without labels and the teacher's logits for them
    (:func:`load_augmented`), trained on with the training rows in every phase but the general
    one; their logits join the teacher-logits cache instead of being computed again.
    """
    config.check()
    if config.general_epochs and general_set is None:
        raise CompressorError("general_epochs needs unlabelled text: set it in a distill stage or "
                              "`compressor distill`, which gather it from the data folder")
    spec, losses = config.student, config.losses
    task = train_set.task
    device = resolve_device(config.train.device)
    set_seed(config.train.seed)
    if student is not None:
        from compressor.engine.students import PretrainedStudent

        spec = PretrainedStudent(model="(given)")
        tokenizer, made = student_tokenizer or teacher_tokenizer, {"kind": "given"}
    else:
        student, tokenizer, made = build_student(
            spec, teacher, teacher_tokenizer, task,
            batches=_init_batches(teacher, teacher_tokenizer, train_set, spec, config.train, device))
    layer_losses = losses.layer_losses()
    if layer_losses and spec.is_small:
        raise CompressorError(f"a {spec.kind} student has no layers to match: losses "
                              f"{', '.join(layer_losses)} need a transformer student; use kd")
    if layer_losses and not same_tokenizer(teacher_tokenizer, tokenizer):
        raise CompressorError(f"losses {', '.join(layer_losses)} compare token by token, but teacher "
                              "and student tokenise differently; use kd (and task) alone")
    teacher.eval().to(device)
    for p in teacher.parameters():
        p.requires_grad_(False)
    teacher_types = (not spec.is_small and "token_type_ids" in _encoded_keys(student)
                     and _uses_types(teacher))
    if _uses_types(teacher) and not teacher_types and len(task.text_fields) > 1:
        config = replace(config, cache_teacher_logits=True)   # the cache tokenises for the teacher
    trainee = Trainee(student, make_projections(student, teacher, losses, made.get("residual_channels"))
                      if layer_losses else nn.ModuleDict())
    base = config.train
    phases = [("predict", losses, base, [])]    # (name, losses, settings, parameters held fixed)
    if config.intermediate_epochs:
        first = replace(base, epochs=config.intermediate_epochs, lr=config.intermediate_lr or base.lr,
                        eval_every=10 ** 9)   # one evaluation at the end: keep the last weights
        phases = [("intermediate", losses.intermediate_only(), first, []),
                  ("predict", losses.prediction_only(), base, [])]
        if config.progressive:
            phases = progressive_phases(losses, first, student, teacher) + phases[1:]
    if config.general_epochs:   # TinyBERT's general distillation: the layer losses on unlabelled text
        phases = [("general", losses.intermediate_only(), general_phase_config(config), [])] + phases
    if general_teacher is not None:
        _check_general_teacher(general_teacher, teacher, general_teacher_path)
        general_teacher.eval().to(device)
        for p in general_teacher.parameters():
            p.requires_grad_(False)
    task_rows = train_set
    if augmented is not None:
        if augmented.max_length != config.train.max_length:
            raise CompressorError(f"the augmented rows were labelled at max_length {augmented.max_length}, "
                                  f"this distillation trains at {config.train.max_length}: augment with the same max_length")
        task_rows = joined(train_set, augmented)
    history, cache, start = [], None, time.perf_counter()
    for name, phase_losses, phase_config, fixed in phases:
        phase_train = general_set if name == "general" else task_rows
        fixed = [p for p in fixed if p.requires_grad]
        for p in fixed:
            p.requires_grad_(False)
        phase_cache = None
        only_logits = not phase_losses.layer_losses()
        if config.cache_teacher_logits and only_logits and phase_losses.needs_teacher_logits:
            if cache is None:
                cache = teacher_logits_cache(teacher, teacher_tokenizer, tokenizer,
                                             train_set.examples, config.train.max_length, device,
                                             config.train.precision)
                if augmented is not None:   # computed when the rows were made; a copy that
                    # tokenises as a training row keeps that row's logits
                    for key, value in keyed_logits(tokenizer, augmented.dataset.examples,
                                                   augmented.logits, config.train.max_length).items():
                        cache.setdefault(key, value)
            phase_cache = cache
        elif only_logits and phase_losses.needs_teacher_logits and _uses_types(teacher) \
                and not teacher_types and len(task.text_fields) > 1:
            raise CompressorError("this student drops segment ids the teacher needs for sentence "
                                  "pairs; keep cache_teacher_logits on")
        phase_teacher = general_teacher if name == "general" and general_teacher is not None else teacher

        def train():   # called within this iteration (here or by the general cache)
            loss_fn = DistillLoss(phase_teacher, student, phase_losses, phase_cache, teacher_types)
            try:
                return fit(trainee, tokenizer, phase_train, dev_set, phase_config, loss_fn,
                           desc=f"{desc} ({name})" if len(phases) > 1 else desc, callbacks=callbacks)
            finally:
                loss_fn.close()

        try:
            if name == "general" and config.general_cache:
                result = _cached_general(train, trainee, config, general_teacher_path, general_set)
            else:
                result = train()
        finally:
            for p in fixed:
                p.requires_grad_(True)
        history.append({"phase": name, "train_examples": len(phase_train), **result})
    student = trainee.student.to("cpu").eval()
    teacher.to("cpu")
    if general_teacher is not None:
        general_teacher.to("cpu")
    final = history[-1]
    return student, tokenizer, {
        "student": made, "metrics": final["best"]["metrics"], "score": final["best"]["score"],
        "best_step": final["best"]["step"], "steps": sum(h["steps"] for h in history),
        "phases": history, "cached_teacher_logits": cache is not None,
        "augmented_rows": len(augmented) if augmented is not None else 0,
        "train_time_s": round(time.perf_counter() - start, 2)}


def _init_batches(teacher, tokenizer, train_set, spec, train: TrainConfig, device):
    """Teacher inputs from ``spec.init_rows`` training rows (drawn with the run's seed) on
    ``device``, for a student cut out of the teacher (``init: teacher``); None otherwise."""
    if getattr(spec, "init", "random") != "teacher":
        return None
    import random

    from compressor.core.batches import encode, iter_batches, to_device

    examples = list(train_set.examples)
    random.Random(train.seed).shuffle(examples)
    items = encode(tokenizer, examples[:spec.init_rows], train.max_length, teacher.config)
    teacher.to(device)
    return [to_device(b, device) for b in iter_batches(items, train.batch_size, tokenizer.pad_token_id or 0,
                                                        train_set.task.is_regression)]


def load_augmented(config: DistillConfig, train_set, teacher_path: str, folder: Optional[str] = None):
    """The augmented rows of ``config.augment`` (or ``folder``), None without them
    (:func:`augmented_rows`)."""
    return augmented_rows(folder or config.augment, train_set, teacher_path)


def augmented_rows(folder: str, train_set, teacher_path: str):
    """The augmented rows in ``folder`` (what ``compressor augment`` wrote), None for "". They must
    have been made from these very training rows (so from no dev or held-out row) and labelled
    by this teacher (``teacher_path``)."""
    from compressor.core.data.augmented import model_digest, read_augmented, rows_digest

    if not folder:
        return None
    if folder == "recipe":
        raise CompressorError("augment: recipe names a recipe's augment stage; outside a recipe give "
                              "the folder compressor augment wrote")
    augmented = read_augmented(folder, train_set.task)
    record = augmented.record
    if record.get("rows_digest") != rows_digest(train_set):
        raise CompressorError(f"{folder} was made from other training rows ({record.get('source_rows')} rows "
                              f"of {record.get('data')}) than this distillation's ({len(train_set)} of "
                              f"{train_set.source}): augment with the same teacher, data and --train-limit")
    if record.get("teacher_digest") != model_digest(teacher_path):
        raise CompressorError(f"{folder} was labelled by another teacher ({record.get('teacher')}) than "
                              f"{teacher_path}: augment with this teacher")
    return augmented


def general_phase_config(config: DistillConfig) -> TrainConfig:
    """The general phase's training settings: ``general_epochs`` at ``general_lr`` (else the
    intermediate rate, else ``lr``), one evaluation at the end."""
    return replace(config.train, epochs=config.general_epochs, eval_every=10 ** 9,
                   lr=config.general_lr or config.intermediate_lr or config.train.lr)


def load_general_teacher(config: DistillConfig, task, teacher_path: str, tokenizer, attn=None):
    """``(model, path)`` of the general phase's teacher: ``(None, teacher_path)`` when it is the
    stage's own teacher; a folder is loaded through the loader registry (a bare encoder gets a
    head it never uses) and must tokenise as the teacher does."""
    if not config.general_epochs or config.general_teacher == "teacher":
        return None, teacher_path
    path = resolve_model(config.general_teacher)
    model, other = load_for_task(path, task, attn_implementation=attn)
    if not same_tokenizer(tokenizer, other):
        raise CompressorError(f"general_teacher {path} tokenises differently from the teacher; "
                              "give the encoder the teacher was fine-tuned from")
    return model, path


def _check_general_teacher(general_teacher, teacher, path: str) -> None:
    """The general teacher stands in for the teacher in the layer losses: same width, depth and
    heads (the projections and layer pairs are the teacher's)."""
    a, b = arch_of(general_teacher), arch_of(teacher)
    mine = (_width(general_teacher), _layers(general_teacher), a.num_heads(general_teacher.config))
    theirs = (_width(teacher), _layers(teacher), b.num_heads(teacher.config))
    if mine != theirs:
        raise CompressorError(f"general_teacher {path}: width, layers and heads {mine} differ from the "
                              f"teacher's {theirs}; give the encoder the teacher was fine-tuned from")


def _cached_general(train, trainee, config: DistillConfig, teacher_path: str, general_set) -> dict:
    """The general phase from ``config.general_cache`` when a run with the same digest kept it,
    else trained (``train()``) and kept there. Under several processes the main one holds the
    lock and decides; all train together or all load."""
    import contextlib

    from compressor.engine import general

    key = general.digest(config, teacher_path or "(the stage's teacher)", general_set)
    lock = general.locked(config.general_cache, key) if distributed.is_main() else \
        contextlib.nullcontext(os.path.join(config.general_cache, key))
    with lock as path:
        hit = distributed.broadcast(general.has(path) if distributed.is_main() else None)
        if hit:
            kept = general.load(path, trainee)
            result = {"cached": os.path.abspath(path), "steps": 0, "trained_by": kept}
        else:
            result = train()
            if distributed.is_main():
                general.save(path, trainee, {
                    "digest": key, "general_teacher": teacher_path, "text": general_set.source,
                    "sentences": len(general_set), **{k: result.get(k) for k in (
                        "steps", "train_time_s", "train_rows", "samples_per_s", "processes", "loss_curve")}})
            result = {**result, "kept": os.path.abspath(path)}
        distributed.barrier()
    return result


def general_text(config: DistillConfig, task, data_dir, train_set, dev_set, train_limit=None):
    """The unlabelled text of ``config.general_epochs`` (None without it): the training rows and the
    data folder's other GLUE training files, the dev rows' sentences left out; ``general_rows``
    sentences at most, else ``train_limit`` (a run limited to N rows trains on N), else all."""
    if not config.general_epochs:
        return None
    return unlabelled_text(task, data_dir, own=train_set, dev=dev_set,
                           rows=config.general_rows or train_limit or 0, seed=config.train.seed,
                           shared=config.shared_general)


def progressive_phases(losses: Losses, config: TrainConfig, student, teacher) -> list:
    """MobileBERT's progressive knowledge transfer: the first stage as one phase per student
    layer, bottom up, each ``1/m`` of its epochs. At layer ``l`` the hidden and attention losses
    count that layer's pairs alone (``layers: [l]``), the embedding loss only at the first layer
    (the embeddings train with it) and the other layer losses only at the last; from layer 2
    on, the embeddings and the layers below ``l`` stay fixed. A layer no pair reaches has no
    phase. Returns ``(name, losses, config, fixed parameters)`` per phase."""
    from compressor.engine.losses import layer_mapping

    spec = arch_of(student)
    m, n = spec.num_layers(student.config), arch_of(teacher).num_layers(teacher.config)
    layers = spec.get_layers(student)
    below = list(spec.get_embeddings(student).parameters())
    first = losses.intermediate_only()
    steps = []
    for layer in range(1, m + 1):
        picked = Losses()
        for name, settings in first.items():
            if hasattr(settings, "layers"):
                if any(s == layer for s, _ in layer_mapping(m, n, settings.mapping)):
                    picked[name] = replace(settings, layers=[layer])
            elif (name == "embedding" and layer == 1) or (name != "embedding" and layer == m):
                picked[name] = settings
        if picked.active():
            steps.append((layer, picked, list(below) if layer > 1 else []))
        below += list(layers[layer - 1].parameters())
    if not steps:
        raise CompressorError("progressive transfer: no student layer is paired with a teacher layer")
    each = replace(config, epochs=config.epochs / len(steps))
    return [(f"progressive layer {layer}", picked, each, fixed) for layer, picked, fixed in steps]


def _encoded_keys(model) -> set:
    from compressor.core.arch import uses_token_type_ids
    return {"token_type_ids"} if uses_token_type_ids(model.config) else set()


def _uses_types(model) -> bool:
    from compressor.core.arch import uses_token_type_ids
    return uses_token_type_ids(model.config)


def student_meta(task, config: DistillConfig, student, **extra) -> dict:
    """``compressor.json`` of a student: small classifiers name their architecture."""
    meta = checkpoint_meta(task, config.train.max_length, "distill", **extra)
    if config.student.is_small:
        meta["architecture"] = student.config.model_type
    return meta


def distill(teacher: str, out: str, task: Optional[str] = None,
            config: Optional[DistillConfig] = None, data_dir: Optional[str] = None,
            train_limit: Optional[int] = None, dev_limit: Optional[int] = None,
            overwrite: bool = False, student: Optional[dict] = None,
            losses: Optional[dict] = None, user_data=None) -> dict:
    """Distil ``teacher`` (a task checkpoint) into a new student written to ``out``.

    ``teacher`` is the input model: the teacher itself unless ``config.teacher`` names a folder
    (then that folder teaches, and ``teacher`` gives the task, the data and a ``student: input``);
    ``student`` and ``losses`` (configs, or mappings as in a recipe) override those of ``config``;
    ``user_data`` (:class:`compressor.core.data.UserData`) trains on the user's own files.
    Returns the record also written to ``out/metrics.json``: the student's dev metrics,
    the teacher's, retention, parameters and size of both, and the training history.
    """
    from compressor.core.models import read_meta
    from compressor.engine.scoring import _task_for

    config = config or DistillConfig()
    if student is not None:
        config = replace(config, student=student)
    if losses is not None:
        config = replace(config, losses=losses)
    config.check()
    input_path = resolve_model(teacher)
    teacher_path = resolve_teacher(config.teacher, input_path, None)
    if isinstance(config.student, InputStudent) and teacher_path != input_path:
        config = replace(config, student=PretrainedStudent(model=input_path))
    task_spec, _ = _task_for(input_path, task)
    check_output_dir(out, overwrite)
    device = resolve_device(config.train.device)
    # a teacher trained on the user's files: those its compressor.json records, unless given
    user_data = data_for(input_path, task_spec, user_data)
    # a teacher fine-tuned with --holdout: its students train without the rows it held out
    train_set = holdout.training_rows(task_spec, data_dir, train_limit, user_data, input_path)
    dev_set = load_data(task_spec, "dev", data_dir, dev_limit, user_data)
    attn = "eager" if config.losses.needs_attentions else None
    net, tokenizer = load_for_task(teacher_path, task_spec, attn_implementation=attn)
    check_student(config.student, net.config)   # before the teacher is scored
    if teacher_path != input_path and getattr(net.config, "num_labels", None) != task_spec.num_labels:
        raise CompressorError(f"teacher {teacher_path} is not a {task_spec.name} classifier")
    teacher_max_length = read_meta(teacher_path).get("max_length", config.train.max_length)
    start = time.perf_counter()
    teacher_metrics = score(net.to(device), tokenizer, dev_set, teacher_max_length,
                            device=device, desc="score teacher")
    teacher_score = task_score(task_spec, teacher_metrics)
    general_set = general_text(config, task_spec, data_dir, train_set, dev_set, train_limit)
    general_net, general_path = load_general_teacher(config, task_spec, teacher_path, tokenizer, attn)
    augmented = load_augmented(config, train_set, teacher_path)
    with TrackerLogs() as logs:   # trackers' logs (report_to) end up in out/runs
        student_net, student_tok, result = distill_model(net, tokenizer, train_set, dev_set, config,
                                                         desc=f"distill {task_spec.name}",
                                                         general_set=general_set, general_teacher=general_net,
                                                         general_teacher_path=general_path,
                                                         augmented=augmented)
    record = {
        "task": task_spec.name, "split": "dev", "teacher": teacher if teacher_path == input_path else teacher_path,
        "metrics": result["metrics"], "score": result["score"],
        "teacher_metrics": teacher_metrics, "teacher_score": teacher_score,
        "retention": round(result["score"] / teacher_score, 4) if teacher_score else None,
        "parameters": count_parameters(student_net), "teacher_parameters": count_parameters(net),
        "teacher_size_bytes": size_on_disk(teacher_path),
        "examples": len(dev_set), "train_examples": len(train_set), "data": train_set.source,
        "seed": config.train.seed, **{k: v for k, v in result.items() if k not in ("metrics", "score")},
        "wall_time_s": round(time.perf_counter() - start, 2),
        "config": asdict(config), "versions": versions(),
    }
    meta = student_meta(task_spec, config, student_net, teacher=os.path.abspath(teacher_path)
                        if os.path.isdir(teacher_path) else teacher_path, **data_meta(user_data),
                        **holdout.carried(teacher_path))
    if distributed.is_main():   # a teacher or student at chance says so (stderr and the record)
        chance_check(record, dev_set, score=teacher_score, prefix="distilled from a teacher at chance: ")
        chance_check(record, dev_set)
    if distributed.is_main():   # every process holds the same student; one writes it
        record["size_bytes"] = save_checkpoint(student_net, student_tok, out, meta,
                                               {"metrics.json": record}, overwrite=True)
        logs.keep(out)
    distributed.barrier()
    return record
