"""Recipe stage of this package (registered with ``compressor.core.registry.register_stage``)."""
from __future__ import annotations

from compressor.augment.api import dev_rows, make_augmented
from compressor.augment.config import AugmentConfig
from compressor.core.errors import CompressorError
from compressor.core.registry import register_stage
from compressor.engine.teacher import resolve_teacher


@register_stage("augment", AugmentConfig, produces=None)
def augment_stage(ctx, config: AugmentConfig) -> dict:
    """TinyBERT's task data augmentation: copies of the training rows with words replaced, labelled by the teacher."""
    teacher_dir = resolve_teacher(config.teacher, ctx.model_dir, ctx.teacher_dir)
    try:
        held = ctx.split("holdout")
    except CompressorError:   # the teacher held no rows out
        held = None
    # every dev row is kept out, not only the ones the recipe scores on
    exclude = (dev_rows(ctx.task, ctx.data_dir, ctx.recipe.user_data), held)
    record = make_augmented(teacher_dir, ctx.split("train"), config, ctx.out_dir, exclude)
    return {k: record[k] for k in ("digest", "rows", "source_rows", "augmented_from", "skipped_rows",
                                   "dropped_copies", "replaced_share", "candidates_from") if k in record} | \
        ({"reused": record["reused"]} if record.get("reused") else {})
