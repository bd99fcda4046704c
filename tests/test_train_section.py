"""Every method's training settings are one composed ``train:`` section (issue 31): built from a
mapping on the method's own defaults, filled by the flat command-line options, and still taken
flat from older recipes (moved in, one deprecation line per stage)."""
import dataclasses
import os
import warnings

import pytest

from compressor.core.errors import CompressorError
from compressor.core.settings import config_from_dict
from compressor.engine.train_config import TrainConfig

pytestmark = pytest.mark.unit

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def recipe(stage: str, name: str = "r.yaml"):
    from compressor.recipe.schema import recipe_from_text

    return recipe_from_text("task: sst2\ndevice: cpu\nseed: 7\nteacher: {model: m}\nstages:\n" + stage, name)


def problems(stage: str):
    from compressor.recipe.schema import RecipeError

    with pytest.raises(RecipeError) as err:
        recipe(stage)
    return err.value.problems


def test_the_train_section_builds_from_a_mapping_on_the_methods_own_defaults():
    from compressor.engine.distiller import DistillConfig
    from compressor.exit.configs import EarlyExitConfig
    from compressor.prune.configs import StructuredPruneConfig
    from compressor.quantize.configs import quantize_config

    pruned = config_from_dict(StructuredPruneConfig, {"recover": {"train": {"lr": 1e-4}}})
    assert (pruned.recover.train.lr, pruned.recover.train.epochs, pruned.recover.train.warmup) == (1e-4, 1.0, 0.06)
    exits = config_from_dict(EarlyExitConfig, {"train": {"batch_size": 8}})
    assert (exits.train.batch_size, exits.train.epochs, exits.train.lr, exits.train.warmup) == (8, 2.0, 5e-4, 0.0)
    qat = quantize_config("onnxruntime", "qat", train={"max_steps": 4})
    assert (qat.train.max_steps, qat.train.lr, qat.train.epochs, qat.train.weight_decay) == (4, 1e-5, 1.0, 0.0)
    # Python: a TrainConfig, or a plain mapping (on the same defaults)
    assert DistillConfig(train=TrainConfig(epochs=2)).train.epochs == 2
    assert DistillConfig(train={"epochs": 2}).train == TrainConfig(epochs=2)
    assert EarlyExitConfig(train={"lr": 1e-3}).train.epochs == 2.0
    assert not any(issubclass(c, TrainConfig) for c in (DistillConfig, EarlyExitConfig, type(qat)))


def test_a_recipe_stage_reads_train_and_its_defaults_reach_it():
    stages = recipe("  - distill: {train: {epochs: 2, lr: 1e-4}}\n"
                    "  - prune: {recover: {mode: finetune, train: {epochs: 0.5}}}\n").stages
    train = stages[0].config.train
    assert (train.epochs, train.lr, train.device, train.seed) == (2.0, 1e-4, "cpu", 7)   # the recipe's device, seed
    assert stages[1].config.recover.train.epochs == 0.5


def test_flat_training_keys_are_moved_with_one_line_per_stage():
    flat = recipe("  - distill: {epochs: 2, lr: 1e-4, intermediate_epochs: 0}\n"
                  "  - evaluate: {split: dev}\n"
                  "  - prune: {heads: 0.5, recover: {mode: distill, epochs: 1, batch_size: 8}}\n")
    canonical = recipe("  - distill: {train: {epochs: 2, lr: 1e-4}, intermediate_epochs: 0}\n"
                       "  - evaluate: {split: dev}\n"
                       "  - prune: {heads: 0.5, recover: {mode: distill, train: {epochs: 1, batch_size: 8}}}\n")
    assert [s.config for s in flat.stages] == [s.config for s in canonical.stages]
    assert flat.warnings == [
        "r.yaml, stage 1 (distill): put epochs, lr under train: — flat training keys are deprecated",
        "r.yaml, stage 3 (prune): put epochs, batch_size under recover.train: — flat training keys are deprecated"]
    assert canonical.warnings == []


def test_flat_keys_through_the_python_api_warn_once():
    from compressor.theseus.config import TheseusConfig

    with pytest.warns(FutureWarning, match=r"^theseus: put lr, batch_size under train: — flat training keys") as seen:
        config = config_from_dict(TheseusConfig, {"lr": 1e-3, "batch_size": 8, "num_layers": 2}, what="theseus")
    assert len(seen) == 1 and (config.train.lr, config.train.batch_size) == (1e-3, 8)


def test_a_key_set_flat_and_under_train_is_one_error_at_its_line():
    assert problems("  - distill:\n      train: {lr: 1e-4}\n      lr: 2e-4\n") == [
        "r.yaml:8: stage 'distill': lr is set twice, flat and under train: keep train.lr only"]


def test_a_typo_inside_train_is_named_with_its_path_and_line():
    found = problems("  - distill:\n      train:\n        epochs: 1\n        lrr: 1e-4\n")
    assert len(found) == 1 and found[0].startswith("r.yaml:9: stage 'distill': train has no setting 'lrr'")
    found = problems("  - prune:\n      recover:\n        train: {batch_sise: 8}\n")
    assert len(found) == 1 and found[0].startswith("r.yaml:8: stage 'prune': recover.train has no setting "
                                                   "'batch_sise'")
    found = problems("  - early_exit: {train: {epochs: -1}}\n")
    assert found == ["r.yaml:6: stage 'early_exit': epochs must be positive (or set max_steps)"]


def test_theseus_refuses_train_epochs_in_every_form():
    from compressor.theseus.config import TheseusConfig

    why = "train.epochs: theseus trains in two phases: set replacing_epochs and finetune_epochs"
    for stage in ("  - theseus: {train: {epochs: 3, lr: 1e-4}}\n", "  - theseus:\n      lr: 1e-4\n      epochs: 3\n"):
        found = problems(stage)
        assert len(found) == 1 and why in found[0] and found[0].startswith(
            "r.yaml:6: " if "{" in stage else "r.yaml:8: "), found
    with pytest.raises(CompressorError, match=why):
        TheseusConfig(train=TrainConfig(epochs=5)).check()
    with pytest.raises(CompressorError, match=why):
        TheseusConfig(train={"epochs": 3})
    config = TheseusConfig(replacing_epochs=2, finetune_epochs=1, finetune_lr=1e-5, train={"lr": 1e-4})
    assert (config.phase_config("replacing").epochs, config.phase_config("replacing").lr) == (2.0, 1e-4)
    assert (config.phase_config("finetune").epochs, config.phase_config("finetune").lr) == (1.0, 1e-5)


def test_the_command_line_keeps_flat_options_and_fills_the_section():
    from compressor.cli import in_sections
    from compressor.cli.methods import recover_settings
    from compressor.exit.configs import EarlyExitConfig

    assert in_sections(EarlyExitConfig, {"lr": 1e-3, "rule": "entropy"}) == {"rule": "entropy", "train": {"lr": 1e-3}}
    assert recover_settings(["mode=finetune", "epochs=2", "losses.kd=1"]) == {
        "mode": "finetune", "losses": {"kd": 1}, "train": {"epochs": 2}}
    with pytest.raises(CompressorError, match="lr is set twice"):
        in_sections(EarlyExitConfig, {"lr": 1e-3, "train": {"lr": 1e-4}})


def test_quantize_offers_qat_s_training_settings_as_flat_options():
    from click.testing import CliRunner

    from compressor.cli import cli

    result = CliRunner().invoke(cli, ["quantize", "--help"], terminal_width=120)
    assert result.exit_code == 0 and "--epochs FLOAT" in result.output
    assert "qat: learning rate.  [default: 1e-05]" in result.output


def test_committed_recipes_use_the_train_section():
    """Every recipe in the checkout is in the canonical form: loading one says nothing deprecated."""
    import glob

    from compressor.recipe.demo import demo_recipe_path
    from compressor.recipe.schema import load_recipe

    files = [demo_recipe_path()] + sorted(glob.glob(os.path.join(ROOT, "recipes", "**", "*.yaml"), recursive=True)
                                          + glob.glob(os.path.join(ROOT, "bench", "experiments", "**", "*.yaml"),
                                                      recursive=True))
    assert len(files) > 40
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        noisy = {f: load_recipe(f).warnings for f in files}
    assert {f: w for f, w in noisy.items() if w} == {}


def test_the_settings_reference_documents_train_once():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.render()
    assert page.count("| `train.lr` |") == 1
    assert page.count("takes the settings of [`train`") >= 4   # distill, early_exit, prune's recover, qat, ...
    assert dataclasses.fields(TrainConfig)
