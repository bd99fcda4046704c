"""What every pruning method works on: the model, its data, and recovery training.

A method (``@register_pruner``) gets a :class:`RecoveryJob`, changes ``job.model`` in place
(or puts a new model there, as vocabulary pruning does with the tokenizer too), calls
``job.recover()`` after each pruning step as its config says, and returns a record. The
unpruned model stays available as ``job.teacher`` for distillation recovery.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Sequence

import torch
from torch import nn

from compressor.core.batches import encode, iter_batches, to_device
from compressor.core.errors import CompressorError
from compressor.core.metrics import task_score
from compressor.engine.scoring import score
from compressor.engine.layerdrop import LayerDrop
from compressor.engine.teacher import load_teacher
from compressor.engine.train import Callback, fit, set_seed, task_loss
from compressor.engine.recovery import RecoveringConfig


@dataclass
class RecoveryJob:
    model: nn.Module                 # pruned in place (a method may put a new model here)
    tokenizer: object
    train_set: object                # compressor.core.data datasets
    dev_set: object
    config: RecoveringConfig         # a pruning or sharing config
    device: torch.device
    teacher: Optional[nn.Module] = None       # the unpruned model (distillation recovery)
    teacher_tokenizer: Optional[object] = None
    teacher_path: Optional[str] = None        # where the teacher was loaded from (augmented rows name theirs)
    out_dir: Optional[str] = None             # where a method writes report files (tables, images)
    callbacks: List[Callback] = field(default_factory=list)   # added to every recovery run
    recoveries: List[dict] = field(default_factory=list)      # one record per recovery run

    @property
    def task(self):
        return self.train_set.task

    # -- data for importance scores -------------------------------------------
    def sample_examples(self) -> list:
        """``importance_rows`` training examples, drawn with the config's seed."""
        examples = list(self.train_set.examples)
        random.Random(self.config.seed).shuffle(examples)
        return examples[:self.config.importance_rows]

    def batches(self, examples: Optional[Sequence] = None) -> Iterator[dict]:
        """Padded batches of ``examples`` (the importance sample by default) on the job's device,
        labels included."""
        examples = self.sample_examples() if examples is None else examples
        if not examples:
            raise CompressorError(f"{self.train_set.source}: no training rows to score importance on")
        items = encode(self.tokenizer, examples, self.config.max_length, self.model.config)
        pad_id = self.tokenizer.pad_token_id or 0
        for batch in iter_batches(items, self.config.batch_size, pad_id, self.task.is_regression):
            yield to_device(batch, self.device)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """The task loss of ``model`` on one batch (what gradient importance differentiates)."""
        return task_loss(model, dict(batch))

    # -- scores and recovery ---------------------------------------------------
    def evaluate(self, desc: str = "score") -> dict:
        """Dev metrics of the current model, and its score."""
        self.model.to(self.device).eval()
        metrics = score(self.model, self.tokenizer, self.dev_set, self.config.max_length,
                        device=self.device, desc=desc)
        return {"metrics": metrics, "score": task_score(self.task, metrics)}

    def recover(self, callbacks: Sequence[Callback] = (), desc: str = "recover") -> Optional[dict]:
        """Train the current model as ``config.recover`` says (nothing for mode none).

        ``callbacks`` (a pruning schedule's, say) join the job's own; the checkpoint
        that ``fit`` keeps is one every callback allows. Returns the training record.
        """
        settings = self.config.recover
        if settings.mode == "none":
            return None
        train = self.config.recovery_train()   # the stage's device, seed and max_length where it sets none
        set_seed(train.seed)   # dropout draws as the shuffle: from the recovery's seed, in either mode
        callbacks = list(self.job_callbacks()) + list(callbacks)
        if settings.mode == "finetune":
            result = fit(self.model, self.tokenizer, self.train_set, self.dev_set, train,
                         task_loss, desc=desc, callbacks=callbacks)
            record = {"mode": "finetune", "metrics": result["best"]["metrics"],
                      "score": result["best"]["score"], "best_step": result["best"]["step"],
                      "steps": result["steps"], "history": result["history"],
                      "train_time_s": result["train_time_s"]}
        else:
            from compressor.engine.distiller import DistillConfig, distill_model

            if self.teacher is None:
                raise CompressorError("distillation recovery needs the unpruned model as teacher")
            # DistillConfig caches the teacher's logits, computed from the teacher's own
            # tokenizer, so a student whose tokenizer changed (vocabulary pruning) never feeds the
            # teacher its ids; layer losses with two tokenizers are refused by distill_model
            from compressor.engine.distiller import augmented_rows

            config = DistillConfig(train=train, losses=settings.losses)
            augmented = augmented_rows(settings.augment, self.train_set, self.teacher_path or "")
            student, _, result = distill_model(self.teacher, self.teacher_tokenizer or self.tokenizer,
                                               self.train_set, self.dev_set, config, desc=desc,
                                               student=self.model, student_tokenizer=self.tokenizer,
                                               callbacks=callbacks, augmented=augmented)
            self.model = student
            record = {"mode": "distill", "metrics": result["metrics"], "score": result["score"],
                      "best_step": result["best_step"], "steps": result["steps"],
                      "history": result["phases"][-1]["history"],
                      "augmented_rows": result["augmented_rows"], "train_time_s": result["train_time_s"]}
        self.model.to(self.device)
        self.recoveries.append(record)
        return record

    def job_callbacks(self) -> List[Callback]:
        callbacks = list(self.callbacks)
        if self.config.recover.layerdrop:
            callbacks.append(LayerDrop(self.config.recover.layerdrop))
        return callbacks


def load_with_teacher(model_dir: str, task, config, teacher_dir: Optional[str] = None):
    """``(model, tokenizer, teacher, teacher_tokenizer, teacher_path)`` for a method that recovers
    as ``config.recover`` says: the teacher (for distillation only) is an unchanged copy of the
    model (``config.teacher`` input), the recipe's teacher (recipe, ``teacher_dir``) or a folder
    (:func:`compressor.engine.teacher.load_teacher`)."""
    from compressor.core.models import load_for_task

    distill = config.recover.mode == "distill"
    attn = "eager" if distill and config.recover.losses.needs_attentions else None
    model, tokenizer = load_for_task(model_dir, task, attn_implementation=attn)
    if not distill:
        return model, tokenizer, None, None, None
    teacher, teacher_tok, path = load_teacher(config.teacher, model, task, teacher_dir, model_dir, attn)
    return model, tokenizer, teacher, teacher_tok or tokenizer, path


def change_and_recover(model_dir: str, task, train_set, dev_set, config: RecoveringConfig, out_dir: str,
                       meta: dict, change: Callable[[RecoveryJob], dict], what: str, changed: str,
                       teacher_dir: Optional[str] = None, desc: str = "recover") -> dict:
    """The body of a method that changes a trained model and then recovers it (sharing, low-rank
    factorisation): load ``model_dir`` with its teacher (``config.teacher``), score it,
    ``change(job)`` in place (the method's record), score the changed model, recover as
    ``config.recover`` says, score it again and save it to ``out_dir``. Returns the stage record:
    the method's record under ``what`` and the changed model's score as ``score_<changed>``."""
    from compressor.core.device import resolve_device
    from compressor.core.models import count_parameters, save_checkpoint
    from compressor.engine.train import set_seed

    config.check()
    set_seed(config.seed)
    device = resolve_device(config.device)
    model, tokenizer, teacher, teacher_tok, teacher_path = load_with_teacher(model_dir, task, config, teacher_dir)
    job = RecoveryJob(model=model.to(device), tokenizer=tokenizer, train_set=train_set, dev_set=dev_set,
                      config=config, device=device, teacher=teacher, teacher_tokenizer=teacher_tok,
                      teacher_path=teacher_path)
    start = time.perf_counter()
    parameters_before = count_parameters(model)
    before = job.evaluate(desc="score before")
    record = change(job)
    after_change = job.evaluate(desc=f"score {changed}")
    recovery = job.recover(desc=desc)
    after = job.evaluate(desc="score recovered") if recovery else after_change
    job.model.to("cpu")
    size = save_checkpoint(job.model, job.tokenizer, out_dir, meta)
    return {"metrics": after["metrics"], "score": after["score"], "split": "dev",
            "parameters": count_parameters(job.model), "parameters_before": parameters_before,
            "score_before": before["score"], "metrics_before": before["metrics"],
            f"score_{changed}": after_change["score"], what: record, "recovery": recovery,
            "size_bytes": size, "train_time_s": round(time.perf_counter() - start, 2)}
