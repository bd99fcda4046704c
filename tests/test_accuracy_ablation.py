"""Issue 32's ablation variants (bench/experiments/accuracy_ablation.py): each edits the chain's
recipe into one the recipe schema takes, and the variants that build on another name one that
exists."""
import copy

import pytest
import yaml

from bench.experiments.accuracy_ablation import VARIANTS, apply_variant
from compressor.recipe.schema import validate_recipe

pytestmark = pytest.mark.unit

BASES = ("recipes/mpnet/chain-augmented.yaml", "recipes/mpnet/chain-augmented-sst2.yaml")


@pytest.mark.parametrize("base", BASES)
def test_every_variant_is_a_valid_recipe(base, tmp_path):
    with open(base) as f:
        doc = yaml.safe_load(f)
    problems = {}
    for name in VARIANTS:
        edited = copy.deepcopy(doc)
        apply_variant(edited, name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(edited, sort_keys=False))
        found = validate_recipe(str(path))
        if found:
            problems[name] = found
    assert problems == {}


def test_variants_build_on_variants_that_exist():
    for name, (_, _, compared, _, dep) in VARIANTS.items():
        for other in filter(None, compared.split("|")):
            assert other in VARIANTS, f"{name} is compared with unknown {other}"
        if dep is not None:
            assert dep[0] in VARIANTS, f"{name} waits for unknown {dep[0]}"


def test_redistill_trains_the_pruned_student_again_without_attention_scores():
    with open(BASES[0]) as f:
        doc = yaml.safe_load(f)
    apply_variant(doc, "task2-redistill")
    kinds = [next(iter(stage)) for stage in doc["stages"]]
    assert kinds[kinds.index("prune") + 1] == "distill"
    again = doc["stages"][kinds.index("prune") + 1]["distill"]
    assert again["student"] == {"kind": "input"} and "attention" not in again["losses"]
    assert again["losses"]["task"] == 1.0
    assert doc["stages"][kinds.index("prune")]["prune"]["recover"] == {"mode": "none"}
