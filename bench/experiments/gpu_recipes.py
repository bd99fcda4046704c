"""A recipe copied for one GPU-session run (seed_systems_gpu.sh, accuracy_ablation_gpu.sh):
the committed file with the session's paths put in, and for a CPU dry run smaller data.

    python3 -m bench.experiments.gpu_recipes SRC DST [--variant NAME] [--glue DIR] [--data "train_limit: 64, dev_limit: 32"]
        [--augment-cache DIR] [--general-teacher DIR] [--general-cache DIR] [--shrink] [--until STAGE]

- ``--augment-cache``: every augment stage keeps its copies there (by digest), so the systems of
  one task augment once; ``--general-teacher`` / ``--general-cache``: the pre-trained encoder and
  the folder where TinyBERT's and MiniLM's general phase is kept for every task.
- ``--data``: the recipe's data section (``dir`` is ``--glue``), as the other GPU scripts'
  RECIPE_DATA (train_limit also bounds the general text); ``--shrink`` (dry runs on a CPU): every
  phase one epoch, two augmented copies, FP32 (bf16 is emulated on most CPUs), students of their
  own shape 24 wide, shared embeddings at rank 8 (the tiny teacher of a dry run is 48 wide).
- ``--until``: the stages up to the first STAGE only (a chain's student: ``--until distill``).
- ``--variant``: one of issue 32's ablation variants of the recipe
  (:data:`bench.experiments.accuracy_ablation.VARIANTS`).
"""
from __future__ import annotations

import argparse
import os

import yaml


def stages_of(doc: dict):
    """(name, settings) of each stage, settings a dict that edits the document in place."""
    for stage in doc["stages"]:
        (name, settings), = stage.items()
        if settings is None:
            settings = stage[name] = {}
        yield name, settings


def shrink(doc: dict) -> None:
    for name, settings in stages_of(doc):
        recover = settings.get("recover") or {}
        for block in (settings.get("train") or {}, recover.get("train") or {}):
            if block.get("precision") == "bf16":
                block["precision"] = "fp32"
            if block.get("epochs", 0) > 1:
                block["epochs"] = 1
        for key in [k for k in settings if k.endswith("_epochs")]:
            settings[key] = min(settings[key], 1)
        if name == "augment":
            settings["copies"] = min(settings.get("copies", 20), 2)
            settings["precision"] = "fp32"
        student = settings.get("student") or {}
        if student.get("kind") == "config":      # narrower than a tiny teacher, as the papers' are
            student.update(hidden_size=24, ffn_size=32)
        if name == "share" and settings.get("embedding_rank"):
            settings["embedding_rank"] = 8


def prepare(src: str, dst: str, variant: str = "", glue: str = "", data: str = "", augment_cache: str = "",
            general_teacher: str = "", general_cache: str = "", shrunk: bool = False, until: str = "") -> str:
    with open(src) as f:
        doc = yaml.safe_load(f)
    if variant:
        from bench.experiments.accuracy_ablation import apply_variant
        apply_variant(doc, variant)
    if until:   # after the variant, whose edits may touch the later stages
        names = [name for name, _ in stages_of(doc)]
        if until not in names:
            raise SystemExit(f"{src} has no {until} stage (its stages: {', '.join(names)})")
        doc["stages"] = doc["stages"][:names.index(until) + 1]
    for name, settings in stages_of(doc):
        if name == "augment" and augment_cache:
            settings["cache"] = augment_cache
        if settings.get("general_epochs"):
            if general_teacher:
                settings["general_teacher"] = general_teacher
            if general_cache:
                settings["general_cache"] = general_cache
    if shrunk:
        shrink(doc)
    if data or glue:
        doc["data"] = {**({"dir": glue} if glue else {}), **(yaml.safe_load("{" + data + "}") if data else {})}
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst + ".tmp", "w") as f:
        f.write(f"# made by bench/experiments/gpu_recipes.py from {src}" + (f", variant {variant}" if variant else "") + "\n")
        yaml.safe_dump(doc, f, sort_keys=False)
    os.replace(dst + ".tmp", dst)
    return dst


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--variant", default="")
    p.add_argument("--glue", default="")
    p.add_argument("--data", default="")
    p.add_argument("--augment-cache", default="")
    p.add_argument("--general-teacher", default="")
    p.add_argument("--general-cache", default="")
    p.add_argument("--shrink", action="store_true")
    p.add_argument("--until", default="")
    a = p.parse_args(argv)
    print(prepare(a.src, a.dst, a.variant, a.glue, a.data, a.augment_cache, a.general_teacher,
                  a.general_cache, a.shrink, a.until))


if __name__ == "__main__":
    main()
