"""Early exit: each rule stops where it should on constructed logits; a threshold that never
exits gives the model without exits; segments that really stop (PyTorch, and ONNX chained by
the torch-free runtime) give the early-exit model's predictions; training, calibration, the
checkpoint, the recipe stages and the command."""
import json
import os

import numpy as np
import onnx
import pytest
import torch
import transformers

from compressor.core.errors import CompressorError
from conftest import save_sst2_classifier, tiny_config


def _logits(probs):
    """Logits whose softmax is ``probs`` (rows)."""
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


# -- rules on constructed cases --------------------------------------------------

def test_entropy_exits_at_the_first_exit_below_the_threshold():
    from compressor.exit.rules import exit_points, uncertainty

    sure, unsure, middling = [0.99, 0.01], [0.5, 0.5], [0.9, 0.1]
    exits = [_logits([sure, unsure, unsure]),      # exit 0: row 0 is sure
             _logits([unsure, middling, unsure]),  # exit 1: row 1 is fairly sure
             _logits([unsure, unsure, unsure])]    # the model's own: everyone left stops
    u_mid = float(uncertainty(_logits([middling]))[0])
    where, chosen = exit_points(exits, "entropy", u_mid + 1e-3)
    assert where.tolist() == [0, 1, 2]
    np.testing.assert_allclose(chosen[1], exits[1][1])
    where, _ = exit_points(exits, "entropy", u_mid - 1e-3)   # middling is not sure enough now
    assert where.tolist() == [0, 2, 2]
    where, _ = exit_points(exits, "entropy", 0.0)            # never before the last
    assert where.tolist() == [2, 2, 2]
    assert uncertainty(_logits([unsure]))[0] == pytest.approx(1.0)
    assert uncertainty(_logits([[1 - 1e-9, 1e-9]]))[0] < 1e-6


def test_max_prob_exits_when_a_class_is_likely_enough():
    from compressor.exit.rules import exit_points

    exits = [_logits([[0.7, 0.2, 0.1], [0.4, 0.3, 0.3]]),
             _logits([[0.3, 0.3, 0.4], [0.1, 0.85, 0.05]]),
             _logits([[0.3, 0.3, 0.4], [0.3, 0.3, 0.4]])]
    assert exit_points(exits, "max_prob", 0.69)[0].tolist() == [0, 1]
    assert exit_points(exits, "max_prob", 0.8)[0].tolist() == [2, 1]
    assert exit_points(exits, "max_prob", 2.0)[0].tolist() == [2, 2]
    assert exit_points(exits, "max_prob", 0.3)[0].tolist() == [0, 0]


def test_patience_exits_after_that_many_agreeing_exits_in_a_row():
    from compressor.exit.rules import exit_points

    a, b = [0.6, 0.4], [0.4, 0.6]
    # predictions per exit: row 0 a a a a (final), row 1 a b b b, row 2 a b a b, row 3 b b a a
    per_exit = [[a, a, a, b], [a, b, b, b], [a, b, a, a], [a, b, b, a], [a, a, b, a]]
    exits = [_logits(rows) for rows in per_exit]
    assert exit_points(exits, "patience", 1)[0].tolist() == [1, 2, 4, 1]
    assert exit_points(exits, "patience", 2)[0].tolist() == [2, 3, 4, 4]
    assert exit_points(exits, "patience", 0)[0].tolist() == [0, 0, 0, 0]
    assert exit_points(exits, "patience", 4)[0].tolist() == [4, 4, 4, 4]   # never early


def test_regression_exits_on_patience_within_the_tolerance_and_refuses_other_rules():
    from compressor.core.errors import CompressorError
    from compressor.exit.rules import RuleState, exit_points

    exits = [np.array([[1.0], [1.0]], np.float32), np.array([[1.05], [2.0]], np.float32),
             np.array([[3.0], [2.02]], np.float32), np.array([[0.0], [0.0]], np.float32)]
    assert exit_points(exits, "patience", 1, regression=True, tolerance=0.1)[0].tolist() == [1, 2]
    with pytest.raises(CompressorError, match="regression task exits on patience"):
        RuleState("entropy", 0.5, 3, regression=True)


def test_rows_leaving_the_batch_keep_their_own_patience():
    """The runtime drops rows that stopped; the survivors' counts must stay theirs."""
    from compressor.exit.rules import RuleState

    a, b = [0.6, 0.4], [0.4, 0.6]
    state = RuleState("patience", 1, 4)
    assert state.step(_logits([a, a, b])).tolist() == [False, False, False]
    stop = state.step(_logits([a, b, b]))      # rows 0 and 2 agreed once
    assert stop.tolist() == [True, False, True]
    state.keep(~stop)                           # row 1 alone is left
    assert state.step(_logits([b])).tolist() == [True]


def test_calibration_picks_the_cheapest_threshold_that_keeps_the_target():
    from compressor.exit.rules import calibrate

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    onehot = np.eye(2)[labels]
    # exit 0 is sure and right on the first half, unsure and wrong on the rest; the last is right
    first = np.where(np.arange(400)[:, None] < 200, onehot * 0.98 + 0.01, (1 - onehot) * 0.2 + 0.4)
    exits = [_logits(first), _logits(onehot * 0.98 + 0.01)]
    costs = np.tile([1.0, 2.0], (400, 1))

    def accuracy(preds, y):
        return float(np.mean(preds == y))

    record = calibrate(exits, labels, "entropy", 0.99, accuracy, costs)
    chosen = record["chosen"]
    assert chosen["retention"] >= 0.99 and chosen["mean_exit"] == pytest.approx(1.5)
    assert chosen["relative_cost"] == pytest.approx(0.75)
    # a threshold letting the unsure half out too would cost less but keep too little
    assert min(t["relative_cost"] for t in record["tried"]) == pytest.approx(0.5)
    never = calibrate(exits, labels, "entropy", 1.0, accuracy, np.tile([1.0, 2.0], (400, 1)))
    assert never["chosen"]["retention"] == 1.0


# -- the model, its segments and their ONNX graphs ---------------------------------

def _classifier(arch: str, layers: int = 3, vocab: int = 200, labels: int = 2):
    config = tiny_config(arch)
    if arch == "distilbert":
        config.n_layers = layers
    else:
        config.num_hidden_layers = layers
    config.num_labels, config.vocab_size = labels, vocab
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(
        config, attn_implementation="eager").eval()


def _inputs(rows=5):
    torch.manual_seed(1)
    ids = torch.randint(5, 200, (rows, 11))
    ids[:, 0] = 101
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[3, 4:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _spread_heads(model):
    """Heads with large random weights, so rows differ in how sure each exit is."""
    torch.manual_seed(2)
    for head in model.heads:
        torch.nn.init.normal_(head.out.weight, std=3.0)


@pytest.mark.parametrize("arch", ["bert", "mpnet", "distilbert", "modernbert"])
def test_a_threshold_that_never_exits_gives_the_model_without_exits(arch):
    from compressor.exit.model import EarlyExitModel, run_segments
    from compressor.exit.rules import never_exits

    net = _classifier(arch)
    ids, mask = _inputs()
    with torch.no_grad():
        plain = net(input_ids=ids, attention_mask=mask).logits.numpy()
    model = EarlyExitModel(net).eval()
    _spread_heads(model)
    assert model.exit_layers == [1, 2] and model.exits == [1, 2, 3]
    for rule in ("entropy", "max_prob", "patience"):
        threshold = never_exits(rule, len(model.exits))
        model.set_rule(rule, threshold)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask)
        np.testing.assert_array_equal(out.logits.numpy(), plain)
        assert out.exit_index.tolist() == [2] * 5
        logits, where = run_segments(model, ids, mask)
        np.testing.assert_allclose(logits, plain, atol=1e-5)
        assert where.tolist() == [2] * 5


@pytest.mark.parametrize("arch", ["bert", "mpnet", "electra"])
def test_segments_that_stop_give_the_early_exit_predictions(arch):
    from compressor.exit.model import EarlyExitModel, run_segments
    from compressor.exit.rules import uncertainty

    model = EarlyExitModel(_classifier(arch)).eval()
    _spread_heads(model)
    ids, mask = _inputs(8)
    with torch.no_grad():
        every, _ = model.all_logits(ids, mask)
    first = uncertainty(every[:, 0].numpy())
    model.set_rule("entropy", float(np.median(first)))   # about half leave at the first exit
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    where = out.exit_index.numpy()
    assert 0 < (where == 0).sum() < len(where)
    logits, stopped = run_segments(model, ids, mask)   # rows leave the batch at their exits
    assert stopped.tolist() == where.tolist()
    np.testing.assert_allclose(logits, out.logits.numpy(), atol=1e-5)


def _train_tiny(tmp_path, minilm_dir, glue_dir, **settings):
    from compressor.exit import early_exit

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    config = {"train": {"epochs": 1, "batch_size": 16, "max_length": 32, "device": "cpu"},
              "calibrate": {"rows": 32}, **settings}
    out = str(tmp_path / "ee")
    record = early_exit(teacher, out, config, data_dir=glue_dir, train_limit=96, dev_limit=24)
    return out, record


def test_the_checkpoint_reloads_and_the_onnx_segments_give_the_pytorch_predictions(
        tmp_path, minilm_dir, glue_dir):
    from compressor.core.data import get_task, load_data
    from compressor.exit import export_exits
    from compressor.exit.model import EarlyExitModel
    from compressor.exit.runtime import SegmentChain
    from compressor.export.onnx import example_texts
    from compressor.core.models import load_for_task

    out, record = _train_tiny(tmp_path, minilm_dir, glue_dir)
    assert record["calibration_rows"] == 32 and record["train_rows"] == 64
    assert record["training"]["cached_rows"] > 0 and record["rule"] == "entropy"
    meta = json.load(open(os.path.join(out, "compressor.json")))
    assert meta["kind"] == "early-exit" and meta["shape"]["layers"] == 2
    model, tokenizer = load_for_task(out)
    assert isinstance(model, EarlyExitModel) and model.threshold == record["threshold"]
    # transformers alone still loads the model without exits from the same folder
    plain = transformers.AutoModelForSequenceClassification.from_pretrained(out)
    assert plain.config.num_hidden_layers == 2
    # a threshold that makes rows leave at both exits
    dev = load_data(get_task("sst2"), "dev", glue_dir, 24)
    _spread_heads(model)
    from compressor.exit.train import all_exit_logits
    from compressor.exit.rules import uncertainty
    every, _ = all_exit_logits(model, tokenizer, dev.examples, 32, 8, torch.device("cpu"))
    model.set_rule("entropy", float(np.median(uncertainty(every[0]))))
    model.save_pretrained(out)   # the heads and rule the export reads
    with open(os.path.join(out, "exits.json")) as f:
        assert json.load(f)["threshold"] == model.threshold
    manifest = export_exits(out, str(tmp_path / "seg"), {"int8": False}, data_dir=glue_dir,
                            dev_limit=24)
    assert [s["layers"] for s in manifest["segments"]] == [[1, 1], [2, 2]]
    assert all(s["optimization"]["fusions"].get("Attention") == 1 for s in manifest["segments"])
    parity = manifest["parity"]
    assert parity["identical_predictions"] == 1.0 and parity["identical_exits"] == 1.0
    assert parity["max_abs_logit_diff"] < 1e-4
    chain = SegmentChain(str(tmp_path / "seg"))
    texts = example_texts(dev.examples)
    one, where_one = chain.logits(texts, batch_size=1, exits=True)
    assert 0 < (where_one == 0).sum() < len(texts)
    many, where_many = chain.logits(texts, batch_size=8, exits=True)   # rows leave mid-batch
    assert where_many.tolist() == where_one.tolist()
    np.testing.assert_allclose(many, one, atol=1e-4)
    # kind early-exit-onnx scores through the loader like any export
    net, tok = load_for_task(str(tmp_path / "seg"), pytorch=False)
    assert tok.pad_token_id == chain.pad_id and net.config.num_labels == 2
    # the one ONNX scorer, predict --onnx and the benchmark run the chain, not segment 0 alone
    # (whose first output is the hidden states and whose logits are the first exit's)
    from compressor.bench.harness import build
    from compressor.bench.suite import specs_for
    from compressor.export.onnx import predict_file, score_onnx
    from compressor.export.runtime import open_graph
    from compressor.core.metrics import compute_metrics

    opened = open_graph(str(tmp_path / "seg"), spinning=True)
    assert isinstance(opened, SegmentChain)
    # sessions run back to back: an idle one spinning would take the next one's cores
    assert all(sess.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
               for sess in opened.sessions)
    labels = [ex.label for ex in dev.examples]
    assert score_onnx(str(tmp_path / "seg"), dev) == compute_metrics(dev.task, one.argmax(-1), labels)
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\n" + "\n".join(texts) + "\n")
    predict_file(str(tmp_path / "seg"), str(rows), str(tmp_path / "labels.tsv"))
    got = [line.split("\t")[1] for line in (tmp_path / "labels.tsv").read_text().splitlines()[1:]]
    names = dict(zip(dev.task.labels, dev.task.label_names))   # predict writes the classes' names
    assert got == [names[label] for label in chain.predict(texts, batch_size=1)]
    spec, = specs_for(str(tmp_path / "seg"))
    assert spec.engine == "onnxruntime" and spec.size_bytes == manifest["onnx_size_bytes"]
    runner = build(spec, threads=1)
    np.testing.assert_allclose(runner.run(runner.encode([texts[0]])), one[:1], atol=1e-5)
    # INT8 segments export and run
    int8 = export_exits(out, str(tmp_path / "seg8"), {"int8": True, "parity_rows": 8},
                        data_dir=glue_dir, dev_limit=8)
    assert int8["precision"] == "int8-dynamic" and int8["dev"]["examples"] == 8
    # the second encoder layer (layer.1, alone in segment-1) kept FP32, Q-BERT-style
    mixed = export_exits(out, str(tmp_path / "mixed"), {"fp32_units": ["layer.1"], "parity_rows": 8},
                         data_dir=glue_dir, dev_limit=8)
    assert mixed["quantization"]["method"] == "mixed" and mixed["quantization"]["fp32_units"] == ["layer.1"]
    assert mixed["segments"][0]["fp32_nodes"] == 0 < mixed["segments"][1]["fp32_nodes"]

    def integer_ops(folder, k):
        graph = onnx.load(os.path.join(folder, f"segment-{k}.onnx"), load_external_data=False).graph
        return sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention") for n in graph.node)

    # the layer's matrices (fused Q/K/V, attention output, FFN in and out) stay float; the
    # pooler and classifier after it are still INT8
    kept = mixed["segments"][1]["fp32_nodes"]
    assert kept >= 3 and integer_ops(tmp_path / "mixed", 1) == integer_ops(tmp_path / "seg8", 1) - kept > 0
    assert integer_ops(tmp_path / "mixed", 0) == integer_ops(tmp_path / "seg8", 0) > 0
    assert mixed["parity"]["int8"]["examples"] == 8
    for settings, says in (({"fp32_units": ["layer.2"]}, r"has 2 encoder layers \(layer.0 to layer.1\)"),
                           ({"fp32_units": ["layer.0"], "int8": False}, "needs int8 on"),
                           ({"fp32_units": ["layer7"]}, "as a mixed-precision search names them")):
        with pytest.raises(CompressorError, match=says):
            export_exits(out, str(tmp_path / "bad"), settings, data_dir=glue_dir, dev_limit=8)
        assert not os.path.exists(tmp_path / "bad")


@pytest.mark.parametrize("training", ["self_distill", "joint"])
def test_self_distillation_and_joint_training_move_what_they_should(training, minilm_dir, glue_dir):
    from compressor.core.data import get_task, load_data
    from compressor.exit.configs import EarlyExitConfig
    from compressor.exit.model import EarlyExitModel
    from compressor.exit.train import train_exits

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    net = _classifier("bert", vocab=tokenizer.vocab_size)
    task = get_task("sst2")
    train, held = load_data(task, "train", glue_dir, 48), load_data(task, "dev", glue_dir, 16)
    if training == "self_distill":   # the model's own soft targets: no labels needed
        from dataclasses import replace
        train = replace(train, examples=[replace(ex, label=None) for ex in train.examples])
    model = EarlyExitModel(net)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = EarlyExitConfig(training=training, train={"epochs": 1, "batch_size": 16, "max_length": 32,
                                                       "device": "cpu", "lr": 1e-3})
    record = train_exits(model, tokenizer, train, held, config)
    after = model.state_dict()
    heads_moved = any(not torch.equal(after[k], before[k]) for k in after if k.startswith("heads."))
    backbone_moved = any(not torch.equal(after[k], before[k]) for k in after if k.startswith("backbone."))
    assert heads_moved
    assert backbone_moved == (training == "joint")
    assert record["cached_rows"] == (None if training == "joint" else 48)
    assert all(p.requires_grad for p in model.parameters())


# -- recipes and the command ---------------------------------------------------------

def test_the_stages_run_in_a_recipe_and_impossible_orders_are_refused(tmp_path, minilm_dir,
                                                                      glue_dir, capsys):
    from compressor.recipe import run_recipe, validate_recipe

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-exit
task: sst2
data: {{train_limit: 64, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - early_exit: {{train: {{epochs: 1, batch_size: 16, max_length: 32}}, rule: max_prob, calibrate: {{rows: 16}}}}
  - early_exit_export: {{parity_rows: 8, fp32_units: [layer.0]}}
  - bench: {{sentences: 4, warmup: 1, batch_sizes: [4], throughput_batches: 1, memory: false, peers: []}}
""")
    assert validate_recipe(str(recipe)) == []
    out = tmp_path / "run"
    manifest = run_recipe(str(recipe), str(out), data_dir=glue_dir, log=lambda m: None)
    assert [s["kind"] for s in manifest["stages"][1:3]] == ["early-exit", "early-exit-onnx"]
    # the bench stage times the segment chain beside the teacher and scores it as its stage did
    rows = json.load(open(out / "03-bench" / "results.json"))["rows"]
    chain = [r for r in rows if r["name"].startswith("02-early_exit_export") and r.get("batch_size") == 1]
    assert chain and chain[0]["engine"] == "onnxruntime" and chain[0]["latency_ms"]["p50"] > 0
    export_score = json.load(open(out / "02-early_exit_export" / "record.json"))["score"]
    assert chain[0]["value"] == pytest.approx(export_score)
    capsys.readouterr()   # the bench's progress lines
    record = json.load(open(out / "02-early_exit_export" / "record.json"))
    assert record["examples"] == 16 and sum(record["exit_histogram"].values()) == 16
    assert os.path.isfile(out / "02-early_exit_export" / "segment-1.onnx")
    assert record["fp32_units"] == ["layer.0"] and record["precision"] == "int8-dynamic"

    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: t\ntask: sst2\nteacher: {teacher}\nstages:\n"
                   "  - early_exit: {rule: sideways}\n  - prune: {method: structured}\n"
                   "  - export: {}\n")
    from test_faults_validate import has, validate

    lines = validate(capsys, str(bad))
    assert has(lines, bad, 5, "sideways"), lines
    assert has(lines, bad, 6, "cannot follow stage 'early_exit'"), lines

    # a rule the task cannot use is refused with its line before anything runs, also when
    # --task turns a classification recipe into a regression one
    from compressor.recipe.schema import RecipeError, load_recipe

    entropy = tmp_path / "entropy.yaml"
    entropy.write_text(f"name: t\ntask: stsb\nteacher: {teacher}\nstages:\n  - early_exit:\n"
                       "      train: {epochs: 1}\n      rule: entropy\n  - early_exit_export: {}\n")
    assert has(validate(capsys, str(entropy)), entropy, 7, "stsb: a regression task exits on patience"), lines
    entropy.write_text(entropy.read_text().replace("task: stsb", "task: sst2"))
    load_recipe(str(entropy))
    with pytest.raises(RecipeError, match="regression task exits on patience"):
        load_recipe(str(entropy), task="stsb")
    entropy.write_text(entropy.read_text().replace("rule: entropy", "rule: auto"))
    load_recipe(str(entropy), task="stsb")


def test_the_command_writes_the_model_and_refuses_a_rule_a_regression_task_cannot_use(
        tmp_path, minilm_dir, glue_dir, capsys):
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint
    from test_cli import assert_one_line_error, run_cli

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    from compressor.cli import main

    main(["early-exit", teacher, "--out", str(tmp_path / "ee"), "--data-dir", glue_dir,
          "--train-limit", "64", "--dev-limit", "16", "--set", "epochs=1",
          "--set", "calibrate.rows=16", "--set", "max_length=32", "--set", "rule=patience"])
    out = capsys.readouterr().out
    assert "rule patience" in out and "early-exit model:" in out
    code, _, err = run_cli(capsys, "export", str(tmp_path / "ee"), "--out", str(tmp_path / "x"),
                           "--data-dir", glue_dir)
    assert_one_line_error(code, err, "export it as segments with compressor early-exit-export")
    code, _, err = run_cli(capsys, "early-exit-export", str(tmp_path / "ee"), "--out", str(tmp_path / "x"),
                           "--fp32-unit", "layer.5", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "fp32_units ['layer.5']: the model has 2 encoder layers")
    assert not os.path.exists(tmp_path / "x")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    stsb = _classifier("bert", vocab=tokenizer.vocab_size, labels=1)
    save_checkpoint(stsb, tokenizer, str(tmp_path / "stsb"), checkpoint_meta(get_task("stsb"), 32, "test"))
    code, out, err = run_cli(capsys, "early-exit", str(tmp_path / "stsb"),
                             "--out", str(tmp_path / "ee2"), "--data-dir", glue_dir,
                             "--train-limit", "16", "--dev-limit", "8", "--set", "rule=entropy")
    assert_one_line_error(code, err, "a regression task exits on patience")
    assert not os.path.exists(tmp_path / "ee2")
    # the default rule, auto, is the one the task can use: patience here (entropy on SST-2 above
    # would need no flag either)
    main(["early-exit", str(tmp_path / "stsb"), "--out", str(tmp_path / "ee3"), "--data-dir", glue_dir,
          "--train-limit", "48", "--dev-limit", "8", "--set", "epochs=1", "--set", "calibrate.rows=16",
          "--set", "max_length=32"])
    assert "rule patience" in capsys.readouterr().out
    assert json.load(open(tmp_path / "ee3" / "exits.json"))["rule"] == "patience"


def test_a_pruned_student_with_exits_saves_reloads_and_exports_its_own_shape(tmp_path, minilm_dir):
    """Per-layer head and FFN counts (structured pruning) survive the early-exit folder, and each
    segment's attention fuses with its own layers' head counts."""
    from compressor.core.data import get_task
    from compressor.exit.configs import ExitExportConfig
    from compressor.exit.model import EarlyExitModel
    from compressor.exit.segments import export_segments
    from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
    from compressor.core.shapes import resize_layers

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    net = _classifier("bert", vocab=tokenizer.vocab_size)
    resize_layers(net, heads=[2, 4, 1], ffn=[16, 64, 8])
    model = EarlyExitModel(net, layers=[1, 2]).eval()
    _spread_heads(model)
    model.set_rule("max_prob", 0.8)
    out = str(tmp_path / "ee")
    save_checkpoint(model, tokenizer, out, checkpoint_meta(get_task("sst2"), 32, "test"))
    again, _ = load_for_task(out)
    assert again.compressor_shape["heads"] == [2, 4, 1] and again.rule == "max_prob"
    ids, mask = _inputs()
    with torch.no_grad():   # (reloaded with the default attention, not eager: not bit for bit)
        a, b = again(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
    np.testing.assert_allclose(a.logits.numpy(), b.logits.numpy(), atol=1e-5)
    assert a.exit_index.tolist() == b.exit_index.tolist()
    texts = [("a gripping , funny film",), ("flat and lifeless",), ("it is what it is",)]
    from compressor.core.data.readers import Example
    examples = [Example(t, 1, str(i)) for i, t in enumerate(texts)]
    manifest = export_segments(out, str(tmp_path / "seg"), ExitExportConfig(int8=False),
                               examples=examples)
    heads = [s["optimization"]["attention"]["fused"] for s in manifest["segments"]]
    assert heads == [[2], [4], [1]]
    assert manifest["parity"]["identical_predictions"] == 1.0
    assert manifest["parity"]["identical_exits"] == 1.0
