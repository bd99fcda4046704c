"""Is a seed recipe's run on a task already among the committed results? (``PHASE=seeds`` with
``SKIP_COMMITTED=FOLDER`` skips those, so a session runs only the pairs still missing.)

A pair is done when ``FOLDER/RECIPE-TASK/manifest.json`` holds every stage of the recipe (the
teacher's scoring first) and the digest of the recipe as it is now: the same file text, task and
teacher argument. A recipe edited since (a new phase, a changed rule) runs again.

    python -m bench.experiments.seed_done RECIPE TASK TEACHER FOLDER   # exit 0 done, 1 not
"""
from __future__ import annotations

import json
import os
import sys


def committed(recipe_path: str, task: str, teacher: str, folder: str) -> bool:
    from compressor.recipe.schema import load_recipe

    name = os.path.splitext(os.path.basename(recipe_path))[0]
    manifest_file = os.path.join(folder, f"{name}-{task}", "manifest.json")
    if not os.path.isfile(manifest_file):
        return False
    with open(manifest_file) as f:
        manifest = json.load(f)
    recipe = load_recipe(recipe_path, task=task, teacher=teacher)
    return (manifest.get("digest") == recipe.digest
            and len(manifest.get("stages") or []) == len(recipe.stages) + 1)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    return 0 if committed(*args) else 1


if __name__ == "__main__":
    sys.exit(main())
