"""PHASE=seeds with SKIP_COMMITTED runs only the recipe-task pairs not yet committed with the
recipe as it is now."""
import json
import shutil

from bench.experiments.seed_done import committed, main
from compressor.recipe.schema import load_recipe
import pytest

pytestmark = pytest.mark.unit

RECIPE = """name: t
task: sst2
teacher: runs/teacher
stages:
  - distill: {student: {num_layers: 2}}
  - evaluate: {split: dev}
"""


def _commit(folder, recipe, task, teacher, stages):
    digest = load_recipe(str(recipe), task=task, teacher=teacher).digest
    (folder / f"r-{task}").mkdir(parents=True)
    (folder / f"r-{task}" / "manifest.json").write_text(json.dumps(
        {"digest": digest, "task": task, "stages": [{"stage": s} for s in stages]}))


def test_a_pair_is_done_only_when_committed_whole_with_this_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    results = tmp_path / "seeds"
    _commit(results, recipe, "rte", "/root/glue5/rte", ["teacher", "distill", "evaluate"])
    _commit(results, recipe, "mrpc", "/root/glue5/mrpc", ["teacher", "distill"])   # cut off
    assert committed(str(recipe), "rte", "/root/glue5/rte", str(results))
    assert main([str(recipe), "rte", "/root/glue5/rte", str(results)]) == 0
    assert not committed(str(recipe), "mrpc", "/root/glue5/mrpc", str(results))   # a stage missing
    assert not committed(str(recipe), "cola", "/root/glue5/cola", str(results))   # never run
    assert not committed(str(recipe), "rte", "/elsewhere/rte", str(results))      # another teacher
    # the recipe edited since (another schedule, say): its committed run no longer counts
    recipe.write_text(RECIPE.replace("num_layers: 2}", "num_layers: 2}, train: {epochs: 2}"))
    assert not committed(str(recipe), "rte", "/root/glue5/rte", str(results))
    assert main([str(recipe), "rte", "/root/glue5/rte", str(results)]) == 1
    shutil.rmtree(results)
    assert main([str(recipe), "rte"]) == 2
