"""Recipe stages of this package (registered with ``compressor.core.registry.register_stage``)."""
from __future__ import annotations

from dataclasses import replace

from compressor.core.data import holdout
from compressor.core.models import count_parameters
from compressor.core.registry import register_stage
from compressor.engine.distiller import (DistillConfig, distill_model, general_text, load_augmented,
                                        load_general_teacher, student_meta)
from compressor.engine.students import InputStudent, PretrainedStudent
from compressor.engine.teacher import load_teacher


@register_stage("distill", DistillConfig)
def distill_stage(ctx, config: DistillConfig) -> dict:
    """Train a student (fewer layers, narrower, another encoder, BiLSTM/CNN, or the input) from the teacher."""
    from compressor.core.models import save_checkpoint

    if isinstance(config.student, InputStudent):
        # the stage's input model is the student (say, recovering a pruned model from the teacher)
        config = replace(config, student=PretrainedStudent(model=ctx.model_dir))
    attn = "eager" if config.losses.needs_attentions else None
    # teacher: input (the stage's input model), recipe (the recipe's teacher) or a folder
    teacher, tokenizer, teacher_dir = load_teacher(config.teacher, None, ctx.task, ctx.teacher_dir,
                                                   ctx.model_dir, attn, frozen=False)
    general_set = general_text(config, ctx.task, ctx.data_dir, ctx.split("train"), ctx.split("dev"),
                               ctx.recipe.train_limit)
    general_teacher, general_path = load_general_teacher(config, ctx.task, teacher_dir, tokenizer, attn)
    augmented = load_augmented(config, ctx.split("train"), teacher_dir)   # the runner resolved augment: recipe
    student, student_tok, result = distill_model(teacher, tokenizer, ctx.split("train"),
                                                 ctx.split("dev"), config,
                                                 desc=f"distill {ctx.task.name}", general_set=general_set,
                                                 general_teacher=general_teacher,
                                                 general_teacher_path=general_path, augmented=augmented)
    meta = student_meta(ctx.task, config, student, recipe=ctx.recipe.name, **holdout.carried(ctx.teacher_dir))
    save_checkpoint(student, student_tok, ctx.out_dir, meta)
    return {"metrics": result["metrics"], "score": result["score"], "split": "dev",
            "parameters": count_parameters(student), "student": result["student"],
            "teacher_parameters": count_parameters(teacher), "phases": [
                {k: v for k, v in p.items()} for p in result["phases"]],
            "cached_teacher_logits": result["cached_teacher_logits"],
            "augmented_rows": result["augmented_rows"]}
