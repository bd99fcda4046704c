"""bench/experiments/token_prune_chain_shape.py rebuilds its token graphs when the chain's shape,
the schedule or the INT8 choice changes (the work folder is rebuilt in place for another run)."""
import os

import pytest

from bench.experiments.token_prune_chain_shape import TOKEN_FOLDERS, _fresh

pytestmark = pytest.mark.unit


def test_token_graphs_of_another_plan_are_dropped_and_the_same_plans_kept(tmp_path):
    folder = str(tmp_path)
    plan = {"chain": {"shape": {"heads": [6, 6]}}, "keep": [1, 0.6], "int8": {"method": "static"}}
    _fresh(folder, plan)
    for name in TOKEN_FOLDERS + ("chain-int8",):
        os.makedirs(os.path.join(folder, name))
    _fresh(folder, dict(plan))                       # the same plan: every graph kept
    assert all(os.path.isdir(os.path.join(folder, n)) for n in TOKEN_FOLDERS)
    _fresh(folder, {**plan, "chain": {"shape": {"heads": [9, 9]}}})   # another run's shape
    assert not any(os.path.exists(os.path.join(folder, n)) for n in TOKEN_FOLDERS)
    assert os.path.isdir(os.path.join(folder, "chain-int8"))   # not the token script's to drop


def test_a_folder_without_a_stamp_is_treated_as_stale(tmp_path):
    os.makedirs(tmp_path / "tokens-hf")   # built before the stamp existed: its shape is unknown
    _fresh(str(tmp_path), {"keep": [1]})
    assert not (tmp_path / "tokens-hf").exists() and (tmp_path / "tokens-plan.json").is_file()
