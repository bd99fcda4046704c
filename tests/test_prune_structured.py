"""Head and FFN pruning: masking equals removing, importance finds dead units, the stage and
the command line write a smaller checkpoint that reloads to the same outputs."""
import json
import os

import numpy as np
import pytest
import torch
import transformers

from conftest import save_sst2_classifier, tiny_config
from test_cli import assert_one_line_error, run_cli

pytestmark = pytest.mark.unit


def _classifier(arch: str, layers: int = 3, heads: int = 4):
    config = tiny_config(arch)
    config.num_hidden_layers, config.num_attention_heads, config.num_labels = layers, heads, 2
    config.vocab_size = 200
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def _inputs():
    torch.manual_seed(1)
    ids = torch.randint(5, 200, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_masking_units_equals_removing_them(arch):
    from compressor.prune.structured import UnitMasks
    from compressor.core.shapes import resize_layers, shape_of

    model = _classifier(arch)
    keep_heads = [[0, 2, 3], [1], [0, 1, 2, 3]]       # non-contiguous, one layer left whole
    keep_ffn = [list(range(0, 64, 2)), list(range(40)), [3, 9, 60]]
    with torch.no_grad(), UnitMasks(model) as masks:
        for i, (h, f) in enumerate(zip(keep_heads, keep_ffn)):
            masks.heads[i].zero_()[h] = 1
            masks.ffn[i].zero_()[f] = 1
        masked = model(**_inputs()).logits
    with torch.no_grad():
        plain = model(**_inputs()).logits   # the hooks are gone
    assert not torch.allclose(masked, plain)
    resize_layers(model, heads=keep_heads, ffn=keep_ffn)
    assert shape_of(model)["heads"] == [3, 1, 4] and shape_of(model)["ffn"] == [32, 40, 3]
    with torch.no_grad():
        removed = model(**_inputs()).logits
    torch.testing.assert_close(removed, masked, atol=1e-5, rtol=1e-4)


class _Job:
    """The parts of a RecoveryJob that importance scoring uses."""

    def __init__(self, model):
        self.model = model
        torch.manual_seed(2)
        self._batches = [{**_inputs(), "labels": torch.tensor([0, 1, 1])} for _ in range(2)]

    def batches(self):
        return iter(self._batches)

    def loss(self, model, batch):
        from compressor.engine.train import task_loss
        return task_loss(model, dict(batch))


@pytest.mark.parametrize("kind", ["gradient", "magnitude"])
def test_importance_scores_a_dead_head_and_neuron_zero(kind):
    from compressor.core.arch import arch_of
    from compressor.prune.structured import gradient_importance, magnitude_importance

    model = _classifier("bert")
    spec = arch_of(model)
    layer = spec.get_layers(model)[1]
    size = 32 // 4
    with torch.no_grad():   # head 2 of layer 1 and FFN neuron 5 of layer 0 contribute nothing
        for linear, _ in spec.qkv_projections(layer):
            linear.weight[2 * size:3 * size] = 0
            linear.bias[2 * size:3 * size] = 0
        spec.attention(layer)["attention_output"].weight[:, 2 * size:3 * size] = 0
        ffn = spec.ffn(spec.get_layers(model)[0])
        ffn["ffn_in"].weight[5] = 0
        ffn["ffn_out"].weight[:, 5] = 0
    scores = gradient_importance(_Job(model), model) if kind == "gradient" else magnitude_importance(model)
    assert [len(s) for s in scores["heads"]] == [4, 4, 4]
    assert scores["heads"][1][2] == pytest.approx(0, abs=1e-9)
    assert scores["ffn"][0][5] == pytest.approx(0, abs=1e-9)
    others = np.delete(scores["heads"][1], 2)
    assert (others > 0).all()
    assert all(p.requires_grad for p in model.parameters())   # left as found


def test_selection_global_keeps_a_minimum_and_layer_scope_cuts_each_layer():
    from compressor.prune.structured import _targets, select

    scores = [np.array([0.1, 0.2, 0.3, 0.4]), np.array([1e-3, 2e-3, 3e-3, 4e-3]), np.array([5.0, 1.0, 4.0, 2.0])]
    # normalised per layer, so layer 1's small raw scores do not all go first
    keep = select(scores, 6, "global", minimum=1)
    assert sum(len(k) for k in keep) == 6 and all(len(k) >= 1 for k in keep)
    assert select(scores, 11, "global", minimum=1) == [[3], [3], [0]]
    remove, per_layer = _targets([4, 4, 4], 0.5, 1, 1, "layer", [4, 4, 4])
    assert remove == 6 and per_layer == [2, 2, 2]
    assert select(scores, remove, "layer", 1, per_layer) == [[2, 3], [2, 3], [0, 2]]
    # the second of two steps reaches the whole share of the original count
    assert _targets([4, 4, 4], 0.5, 2, 2, "global", [3, 3, 3]) == (3, None)


def test_align_rounds_each_layer_to_a_multiple_keeping_the_best_units():
    from compressor.prune.structured import align

    scores = [np.arange(20, dtype=float), np.arange(20, dtype=float)[::-1].copy()]
    keep = [list(range(9, 20)), list(range(0, 13))]          # 11 and 13 kept
    out = align(keep, scores, 8, minimum=4)
    assert [len(k) for k in out] == [8, 16]
    assert out[0] == list(range(12, 20))                      # the lowest-scored kept ones went
    assert out[1] == list(range(0, 16))                       # the best dropped ones came back
    assert align([[0, 1, 2]], [np.ones(20)], 8, minimum=4) == [list(range(8))]   # never below the minimum
    assert [len(k) for k in align([list(range(18))], [np.ones(18)], 8, 1)] == [16]
    assert [len(k) for k in align([list(range(15))], [np.ones(18)], 8, 1)] == [16]
    assert [len(k) for k in align([list(range(17))], [np.ones(17)], 16, 1)] == [16]
    assert [len(k) for k in align([list(range(7))], [np.ones(7)], 8, 1)] == [7]   # capped at the width
    assert align(keep, scores, 1, 4) == keep


@pytest.fixture(scope="module")
def sst2_model(tmp_path_factory, minilm_dir):
    return save_sst2_classifier(tmp_path_factory.mktemp("prune") / "model", minilm_dir)


def test_prune_api_writes_a_smaller_checkpoint_that_reloads_identically(tmp_path, sst2_model, glue_dir):
    from compressor.core.data import get_task
    from compressor.core.models import load_for_task, read_meta
    from compressor.prune.stage import prune
    from compressor.engine.scoring import predict_logits
    from compressor.core.data import load_data

    out = tmp_path / "pruned"
    record = prune(sst2_model, str(out), {"method": "structured", "heads": 0.5, "ffn": 0.5,
                                          "importance_rows": 64, "iterations": 2,
                                          "recover": {"mode": "distill", "train": {"epochs": 1, "batch_size": 16}}},
                   data_dir=glue_dir, train_limit=64, dev_limit=32)
    pruning = record["pruning"]
    assert sum(pruning["heads_before"]) == 8 and sum(pruning["heads_after"]) == 4
    assert sum(pruning["ffn_after"]) == 64
    assert [s["heads_removed"] for s in pruning["steps"]] == [0.25, 0.5]
    assert all("recovered" in s for s in pruning["steps"])
    assert record["parameters"] < record["parameters_before"]
    assert {"importance.md", "importance.png"} <= set(os.listdir(out))
    meta = read_meta(str(out))
    assert meta["shape"]["heads"] == pruning["heads_after"]
    assert json.load(open(out / "metrics.json"))["method"] == "structured"
    dev = load_data(get_task("sst2"), "dev", glue_dir, 32)
    model, tok = load_for_task(str(out))
    again, _ = load_for_task(str(out))
    a = predict_logits(model, tok, dev.examples, 64)
    b = predict_logits(again, tok, dev.examples, 64)
    np.testing.assert_array_equal(a, b)
    assert record["metrics"]["accuracy"] == pytest.approx(
        float((a.argmax(1) == np.array([e.label for e in dev.examples])).mean()))


def test_ffn_multiple_gives_widths_a_multiple_of_it(tmp_path, sst2_model, glue_dir):
    from compressor.prune.stage import prune

    record = prune(sst2_model, str(tmp_path / "aligned"),
                   {"method": "structured", "heads": 0, "ffn": 0.3, "ffn_multiple": 16, "min_ffn": 8,
                    "importance_rows": 32, "recover": {"mode": "none"}},
                   data_dir=glue_dir, train_limit=32, dev_limit=16)
    after = record["pruning"]["ffn_after"]
    assert all(w % 16 == 0 for w in after) and sum(after) < sum(record["pruning"]["ffn_before"]), after


def test_prune_command_and_its_mistakes(tmp_path, capsys, sst2_model, glue_dir):
    from compressor.cli import main

    out = tmp_path / "cli"
    main(["prune", sst2_model, "--out", str(out), "--set", "heads=0.25",
          "--set", "head_importance=magnitude", "--set", "ffn_importance=magnitude",
          "--set", "scope=layer", "--recover", "mode=none", "--data-dir", glue_dir,
          "--train-limit", "32", "--dev-limit", "16"])
    stdout = capsys.readouterr().out
    assert "pruned model:" in stdout and (out / "model.safetensors").exists()
    assert json.load(open(out / "compressor.json"))["shape"]["heads"] == [3, 3]
    code, _, err = run_cli(capsys, "prune", sst2_model, "--out", str(tmp_path / "x"),
                           "--set", "heads=1.5", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "heads must be a fraction in [0, 1), got 1.5")
    code, _, err = run_cli(capsys, "prune", sst2_model, "--out", str(tmp_path / "y"),
                           "--set", "sparsity=0.5", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "sparsity")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_recipe_validate_names_the_line_of_a_bad_prune_setting(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: p\ntask: sst2\nteacher: minilm\nstages:\n"
                      "  - prune:\n      method: structured\n      heads: 0.5\n"
                      "      scope: everywhere\n      recover: {mode: distill, epochs: -1}\n")
    from test_faults_validate import has, validate

    lines = validate(capsys, str(recipe))
    assert has(lines, recipe, 8, "scope"), lines
    assert has(lines, recipe, 9, "epochs"), lines
