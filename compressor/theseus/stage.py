"""BERT-of-Theseus as a recipe stage (``theseus``) and as one call (:func:`theseus`).

Phase 1 (replacing): each group of predecessor layers is replaced by its successor with
probability p at every step, the predecessor frozen; dev scores use the successors alone.
Phase 2 (fine-tuning): the successors alone, an ordinary ``num_layers``-layer model, are
fine-tuned. The loss is the task's, plus ``kd.weight`` times soft targets from the
teacher where that weight is not 0: the predecessor (the input model, ``teacher: input``), the
recipe's teacher (``recipe``) or a folder.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from compressor.core.arch import arch_of
from compressor.core.device import resolve_device
from compressor.core.metrics import task_score
from compressor.core.models import count_parameters
from compressor.core.registry import register_stage
from compressor.engine.scoring import score
from compressor.engine.teacher import TeacherLoss, load_teacher
from compressor.engine.train import fit, set_seed
from compressor.theseus.config import TheseusConfig
from compressor.theseus.replace import Replacing, group_sizes, successor_model, theseus_model


class TheseusLoss(TeacherLoss):
    """``loss_fn(model, batch)``: the task loss, plus soft targets from the frozen predecessor
    (the toolkit's one teacher loss, :class:`compressor.engine.teacher.TeacherLoss`)."""

    def __init__(self, teacher=None, weight: float = 0.0, temperature: float = 1.0):
        super().__init__(teacher, kd_weight=weight, temperature=temperature)

    def __call__(self, model, batch: dict) -> torch.Tensor:
        loss = super().__call__(model, batch)
        if not loss.requires_grad:
            # a replacing step that drew no successor: nothing trainable ran, no weight moves
            loss = loss.detach().requires_grad_(True)
        return loss


def run_theseus(model, tokenizer, train_set, dev_set, config: TheseusConfig, desc: str = "theseus",
                recipe_teacher: Optional[str] = None):
    """Compress the task ``model`` (changed in place) into its successors; return the
    ``num_layers``-layer model and the record. ``recipe_teacher``: the recipe's teacher folder
    (``teacher: recipe``)."""
    config.check()
    set_seed(config.train.seed)
    device = resolve_device(config.train.device)
    spec = arch_of(model)
    layers_before = spec.num_layers(model.config)
    sizes = group_sizes(layers_before, config.num_layers)
    parameters_before = count_parameters(model)
    start = time.perf_counter()
    model.to(device)
    before = score(model, tokenizer, dev_set, config.train.max_length, max(64, config.train.batch_size), device,
                   desc="score predecessor")
    teacher = None
    if config.kd.weight:   # a frozen copy of the predecessor (teacher: input), or the folder loaded
        teacher = load_teacher(config.teacher, model, dev_set.task, recipe_teacher,
                               tokenizer=tokenizer)[0].to(device)
    loss_fn = TheseusLoss(teacher, config.kd.weight, config.kd.temperature)
    theseus_model(model, config.num_layers, config.init, config.freeze_shared)
    replacing = Replacing(config.schedule, config.rate, config.k, config.b)
    phases = []
    result = fit(model, tokenizer, train_set, dev_set, config.phase_config("replacing"), loss_fn,
                 desc=f"{desc} (replacing)", callbacks=[replacing])
    phases.append({"phase": "replacing", "replacing": replacing.summary(), **result})
    model = successor_model(model)
    if config.finetune_epochs or config.train.max_steps:
        set_seed(config.train.seed)
        result = fit(model, tokenizer, train_set, dev_set, config.phase_config("finetune"), loss_fn,
                     desc=f"{desc} (finetune)")
        phases.append({"phase": "finetune", **result})
    model.to("cpu").eval()
    if teacher is not None:
        teacher.to("cpu")
    best = phases[-1]["best"]
    return model, {
        "metrics": best["metrics"], "score": best["score"], "split": "dev",
        "parameters": count_parameters(model), "parameters_before": parameters_before,
        "layers": config.num_layers, "layers_before": layers_before, "groups": sizes,
        "metrics_before": before, "score_before": task_score(dev_set.task, before),
        "phases": phases, "train_time_s": round(time.perf_counter() - start, 2)}


@register_stage("theseus", TheseusConfig)
def theseus_stage(ctx, config: TheseusConfig) -> dict:
    """BERT-of-Theseus: replace groups of layers by one successor layer each, then fine-tune those."""
    from compressor.engine.methods import model_to_model

    run = model_to_model(run_theseus, "theseus")
    return run(ctx.model_dir, ctx.task, ctx.split("train"), ctx.split("dev"), config, ctx.out_dir,
               ctx.meta("theseus", config.train.max_length), recipe_teacher=ctx.teacher_dir)


def theseus(model: str, out: str, config=None, task: Optional[str] = None,
            data_dir: Optional[str] = None, train_limit: Optional[int] = None,
            dev_limit: Optional[int] = None, overwrite: bool = False, user_data=None,
            **settings) -> dict:
    """Compress the task checkpoint ``model`` by module replacing into a new checkpoint ``out``.

    ``config`` is a :class:`TheseusConfig` (or a mapping such as ``{"num_layers": 3,
    "schedule": "linear", "kd": {"weight": 1}}``); keyword ``settings`` are merged into a
    mapping. Writes ``out/metrics.json`` (scores before and after, each phase's history)
    and returns that record.
    """
    from compressor.engine.methods import model_to_model, on_checkpoint

    run = model_to_model(run_theseus, "theseus")

    return on_checkpoint(model, out, TheseusConfig, config, settings, "theseus", run,
                         task, data_dir, train_limit, dev_limit, overwrite, user_data)
