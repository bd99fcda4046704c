"""The stages every toolkit install has: fine-tuning and evaluation."""
from __future__ import annotations

from dataclasses import dataclass

from compressor.core.device import resolve_device
from compressor.core.metrics import task_score
from compressor.core.models import count_parameters, load_for_task, read_meta, save_checkpoint
from compressor.engine.scoring import score
from compressor.core.settings import device, positive, setting
from compressor.engine.train import TrainConfig, fit, set_seed
from compressor.core.registry import register_stage


@dataclass
class EvaluateConfig:
    split: str = setting("dev", choices=("dev", "train"))   # the labelled splits a recipe has
    batch_size: int = setting(64, check=positive)
    device: str = setting("auto", check=device)


@register_stage("finetune", TrainConfig)
def finetune_stage(ctx, config: TrainConfig) -> dict:
    """Train the current model on the task's labels (a teacher, or recovery after compression)."""
    set_seed(config.seed)
    net, tokenizer = load_for_task(ctx.model_dir, ctx.task)
    result = fit(net, tokenizer, ctx.split("train"), ctx.split("dev"), config,
                 desc=f"finetune {ctx.task.name}")
    net.to("cpu")
    save_checkpoint(net, tokenizer, ctx.out_dir, ctx.meta("finetune", config.max_length))
    return {"metrics": result["best"]["metrics"], "score": result["best"]["score"], "split": "dev",
            "parameters": count_parameters(net), "history": result["history"]}


@register_stage("evaluate", EvaluateConfig, produces=None)
def evaluate_stage(ctx, config: EvaluateConfig) -> dict:
    """Score the current model on a split of the task."""
    net, tokenizer = load_for_task(ctx.model_dir, ctx.task)
    max_length = read_meta(ctx.model_dir).get("max_length", 128)
    device = resolve_device(config.device)
    net.to(device)
    dataset = ctx.split(config.split)
    metrics = score(net, tokenizer, dataset, max_length, config.batch_size, device,
                    desc=f"evaluate {ctx.task.name}/{config.split}")
    return {"metrics": metrics, "score": task_score(ctx.task, metrics), "split": config.split,
            "examples": len(dataset), "parameters": count_parameters(net)}
