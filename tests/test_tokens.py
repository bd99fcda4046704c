"""Learned token pruning: threshold 0 and keep 1 give the unpruned model's outputs; [CLS], the
separators and both texts of a pair survive every layer; the tokens gathered by index at
inference give what the training masks give; the ONNX graph drops the same tokens and matches
PyTorch, also in INT8; the folder reloads; the stage runs in a chain; bad settings are one line."""
import json
import os

import numpy as np
import onnx
import pytest
import torch
import transformers
from conftest import save_sst2_classifier, tiny_config

from compressor.core.errors import CompressorError
from compressor.tokens import prune_tokens

SEP = 102   # the MiniLM WordPiece tokenizer's [SEP]


def _classifier(arch, layers=3, seed=0):
    torch.manual_seed(seed)
    config = tiny_config(arch)
    config.num_labels, config.num_hidden_layers = 2, layers
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def _pair_batch(arch):
    """Two pairs, the second shorter (padded): [CLS] a.. [SEP] b.. [SEP]."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for first, second in ((9, 8), (3, 2)):
        rows.append([101] + torch.randint(1000, 2000, (first,), generator=g).tolist() + [SEP]
                    + torch.randint(1000, 2000, (second,), generator=g).tolist() + [SEP])
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    batch = {"input_ids": ids, "attention_mask": mask}
    if arch == "bert":
        types = torch.zeros_like(ids)
        for i, (first, _) in enumerate(((9, 8), (3, 2))):
            types[i, first + 2:] = 1
        batch["token_type_ids"] = types * mask
    return batch


def _no_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


@pytest.mark.unit
@pytest.mark.parametrize("arch", ["bert", "mpnet"])
@pytest.mark.parametrize("settings", [{"by": "threshold", "threshold": 0.0},
                                      {"by": "ratio", "keep": 1.0}])
def test_threshold_zero_or_keeping_all_gives_the_unpruned_outputs(arch, settings):
    model = _classifier(arch)
    batch = _pair_batch(arch)
    with torch.no_grad():
        reference = model(**batch).logits
        pruned = prune_tokens(model, {**settings, "learn": False}, separators=[SEP]).eval()
        out = pruned(**batch)
    assert torch.equal(out.logits, reference)
    lengths = batch["attention_mask"].sum(1, keepdim=True).float()
    assert torch.equal(out.kept_tokens, lengths.expand(-1, 3))


@pytest.mark.unit
@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_cls_separators_and_both_segments_survive_every_layer(arch):
    model = _classifier(arch, layers=4)
    batch = _pair_batch(arch)
    # a threshold no token reaches: only what is always kept goes on
    pruned = prune_tokens(model, {"threshold": [1.0, 1.0, 1.0], "learn": False}, separators=[SEP]).eval()
    for row in range(2):
        n = int(batch["attention_mask"][row].sum())
        one = {k: v[row:row + 1, :n] for k, v in batch.items()}
        ids = one["input_ids"][0]
        seps = torch.nonzero(ids == SEP).squeeze(1).tolist()
        with torch.no_grad():
            out = pruned(**one)
        assert out.kept_tokens[0].tolist() == [n, 5, 5, 5]   # [CLS], 2 separators, one token per text
        for positions in out.kept_positions[1:]:
            kept = positions[0].tolist()
            assert kept[0] == 0 and all(s in kept for s in seps)
            assert any(0 < p < seps[0] for p in kept) and any(seps[0] < p < seps[1] for p in kept)
            assert kept == sorted(kept)   # the original order


@pytest.mark.unit
@pytest.mark.parametrize("arch", ["bert", "mpnet"])
@pytest.mark.parametrize("settings", [{"by": "threshold", "threshold": [0.07, 0.1]},
                                      {"by": "ratio", "keep": [0.6, 0.5]}])
def test_gathered_tokens_give_what_the_masks_give_and_rows_are_independent(arch, settings):
    model = _classifier(arch)
    _no_dropout(model)
    batch = _pair_batch(arch)
    pruned = prune_tokens(model, {**settings, "learn": False}, separators=[SEP])
    with torch.no_grad():
        gathered = pruned.eval()(**batch)
        pruned.train()
        pruned.mode = "hard"
        masked = pruned(**batch)
    assert gathered.kept_tokens[0, -1] < batch["attention_mask"][0].sum()   # tokens were dropped
    assert torch.equal(gathered.kept_tokens, masked.kept_tokens)
    assert torch.allclose(gathered.logits, masked.logits, atol=1e-5)
    pruned.eval()
    for row in range(2):
        n = int(batch["attention_mask"][row].sum())
        with torch.no_grad():
            alone = pruned(**{k: v[row:row + 1, :n] for k, v in batch.items()})
        assert torch.allclose(alone.logits[0], gathered.logits[row], atol=1e-5)
        assert torch.equal(alone.kept_tokens[0], gathered.kept_tokens[row])


@pytest.mark.unit
def test_ratio_keeps_its_share_and_soft_masks_train_the_thresholds():
    model = _classifier("bert")
    batch = _pair_batch("bert")
    pruned = prune_tokens(model, {"by": "ratio", "keep": 0.5, "learn": False}, separators=[SEP]).eval()
    with torch.no_grad():
        kept = pruned(**batch).kept_tokens
    assert kept[0].tolist() == [20, 10, 5]   # ceil(20 / 2), then ceil(10 / 2)
    # thresholds near the importance of a token among 20 (1/20): the soft masks are not saturated
    pruned = prune_tokens(_classifier("bert"), {"threshold": [0.05, 0.05]}, separators=[SEP]).train()
    pruned.mode = "soft"
    pruned.thresholds.requires_grad_(True)
    out = pruned(**batch, labels=torch.tensor([0, 1]))
    assert 0 < float(out.kept_share.detach()) < 1
    out.kept_share.backward()
    assert (pruned.thresholds.grad < 0).all()   # higher thresholds keep fewer tokens
    assert pruned.lr_scales() == {"thresholds": 1.0}


@pytest.mark.unit
def test_bad_settings_are_one_line():
    from compressor.core.settings import config_from_dict
    from compressor.tokens.config import TokenPruneConfig

    for values, words in (({"by": "magic"}, "unknown by"),
                          ({"keep": 0}, "keep must be in (0, 1]"),
                          ({"threshold": [0.1, "x"]}, "threshold must be a number"),
                          ({"threshold": -1}, "threshold must be in [0, 1]"),
                          ({"by": "ratio", "keep": 0.5, "learn": True}, "learn trains thresholds"),
                          ({"search_on": "holdout"}, "set search_epochs or search_steps"),
                          ({"search_steps": -1}, "search_steps"),
                          ({"search_on": "holdout", "search_steps": 5, "candidates": [0.1, [0.2]]},
                           "kept_weight values"),
                          ({"augment": "rows", "kd_weight": 0}, "set kd_weight > 0"),
                          ({"augment": "rows", "learn": False, "hard_epochs": 0}, "this stage trains nothing")):
        with pytest.raises(CompressorError) as err:
            config_from_dict(TokenPruneConfig, values, what="token_prune").check()
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    config = config_from_dict(TokenPruneConfig, {"threshold": [0.1]}, what="token_prune")
    with pytest.raises(CompressorError, match="prune after 2 of them"):
        prune_tokens(_classifier("bert"), config, separators=[SEP])


def _mrpc_checkpoint(path, minilm_dir, arch):
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier(arch)
    save_checkpoint(model, tokenizer, str(path), checkpoint_meta(get_task("mrpc"), 64, "test"))
    return str(path)


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_the_folder_reloads_and_its_onnx_graph_drops_the_same_tokens(tmp_path, minilm_dir, glue_dir, arch, capsys):
    from compressor.core.models import load_for_task
    from compressor.export.onnx import export_onnx
    from compressor.export.runtime import Predictor
    from compressor.tokens.model import TokenPrunedModel
    from compressor.tokens.stage import token_prune

    source = _mrpc_checkpoint(tmp_path / "model", minilm_dir, arch)
    out = tmp_path / "tokens"
    record = token_prune(source, str(out), {"threshold": [0.06, 0.09], "learn": False, "hard_epochs": 0},
                         data_dir=glue_dir, train_limit=8, dev_limit=24)
    assert record["kept_tokens"]["layers"][0] == 1.0 and record["kept_tokens"]["layers"][-1] < 0.9
    assert json.load(open(out / "compressor.json"))["kind"] == "token-prune"
    model, _ = load_for_task(str(out))
    assert isinstance(model, TokenPrunedModel) and model.values() == pytest.approx([0.06, 0.09])
    transformers.AutoModelForSequenceClassification.from_pretrained(str(out))   # the unpruned model
    capsys.readouterr()
    manifest = export_onnx(str(out), str(tmp_path / "onnx"), data_dir=glue_dir, parity_limit=40)
    # onnxruntime's optimizer gives up its shape inference on the computed indices and prints so;
    # the export says nothing a user has to read
    assert "failed in shape inference" not in capsys.readouterr().out
    assert manifest["parity"]["identical_predictions"] == 1.0
    assert manifest["parity"]["max_abs_logit_diff"] < 1e-4
    if arch == "mpnet":   # every layer's attention fused, the two deciding ones giving their scores too
        fusion = manifest["optimization"]["attention"]["mpnet_fusion"]
        assert fusion["fused"] == 3 and fusion["probs_output"] == [0, 1]
        ops = [n.op_type for n in onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph.node]
        assert ops.count("MultiHeadAttention") == 3 and ops.count("Softmax") == 2
    predictor = Predictor(str(tmp_path / "onnx"))
    texts = [("the cat sat on the mat and looked around the quiet room", "a dog slept by the door"),
             ("short", "and a much longer second sentence with many more words in it")]
    dropped = 0
    for text in texts:
        feed = predictor.encode([text])
        logits, kept = predictor.session.run(None, feed)
        with torch.no_grad():
            ours = model(**{k: torch.from_numpy(v) for k, v in feed.items()})
        assert np.abs(logits - ours.logits.numpy()).max() < 1e-4
        assert kept.tolist() == ours.kept_tokens.tolist()
        dropped += kept[0, -1] < kept[0, 0]
    assert dropped
    # dynamic INT8 of the same graph still runs, and drops tokens
    from compressor.core.data import get_task, load_data
    from compressor.quantize.api import quantize
    from compressor.quantize.configs import OrtDynamicConfig

    quantize(str(tmp_path / "onnx"), str(tmp_path / "int8"), OrtDynamicConfig(),
             dev_set=load_data(get_task("mrpc"), "dev", glue_dir, 16))
    int8 = Predictor(str(tmp_path / "int8"))
    logits, kept = int8.session.run(None, int8.encode([texts[0]]))
    assert logits.shape == (1, 2) and kept[0, -1] < kept[0, 0]
    if arch == "mpnet":   # static INT8 calibrates every tensor: shape inference must type the qk outputs
        from compressor.quantize.configs import OrtStaticConfig

        quantize(str(tmp_path / "onnx"), str(tmp_path / "static"), OrtStaticConfig(),
                 dev_set=load_data(get_task("mrpc"), "dev", glue_dir, 16))
        static = Predictor(str(tmp_path / "static"))
        logits, kept = static.session.run(None, static.encode([texts[0]]))
        assert logits.shape == (1, 2) and kept[0, -1] < kept[0, 0]


@pytest.mark.integration
def test_the_stage_learns_thresholds_in_a_tiny_chain(tmp_path, minilm_dir, glue_dir):
    from compressor.recipe import run_recipe, validate_recipe

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-tokens
task: sst2
data: {{train_limit: 32, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - distill: {{student: {{kind: layers, num_layers: 2}}, epochs: 1, batch_size: 16, max_length: 32}}
  - token_prune: {{threshold: 0.05, kept_weight: 1.0, hard_epochs: 1, teacher: recipe,
                   train: {{epochs: 1, batch_size: 16, max_length: 32}}}}
  - export: {{}}
  - quantize: {{method: dynamic}}
""")
    assert validate_recipe(str(recipe)) == []
    out = tmp_path / "run"
    manifest = run_recipe(str(recipe), str(out), data_dir=glue_dir, log=lambda m: None)
    names = [s["dir"] for s in manifest["stages"]]
    assert names[2:] == ["02-token_prune", "03-export", "04-quantize"]
    record = json.load(open(out / "02-token_prune" / "record.json"))
    assert record["phases"]["soft"]["steps"] == 2 and record["phases"]["hard"]["steps"] == 2
    assert record["values"] != [0.05]   # learnt
    assert record["kept_tokens"]["layers"][0] == 1.0
    assert os.path.isfile(out / "04-quantize" / "model.onnx")


@pytest.mark.integration
def test_the_command_writes_a_folder_and_refuses_bad_settings(tmp_path, capsys, minilm_dir, glue_dir):
    from test_cli import assert_one_line_error, run_cli

    from compressor.cli import main
    from compressor.core.models import read_meta

    source = save_sst2_classifier(tmp_path / "model", minilm_dir)
    main(["token-prune", source, "--out", str(tmp_path / "tokens"), "--set", "by=ratio",
          "--set", "keep=0.5", "--set", "hard_epochs=0", "--set", "learn=false", "--data-dir", glue_dir,
          "--train-limit", "8", "--dev-limit", "8"])
    assert "token-pruned model:" in capsys.readouterr().out
    assert read_meta(str(tmp_path / "tokens"))["kind"] == "token-prune"
    code, _, err = run_cli(capsys, "token-prune", source, "--out", str(tmp_path / "bad"),
                           "--set", "keep=2", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "keep must be in (0, 1]")
    assert not (tmp_path / "bad").exists()


@pytest.mark.integration
def test_search_chooses_on_the_held_out_rows_the_fewest_tokens_within_the_drop(tmp_path, capsys, tiny_models,
                                                                                glue_dir):
    from test_cli import assert_one_line_error, run_cli

    from compressor.cli import main
    from compressor.tokens.stage import token_prune

    teacher = str(tmp_path / "teacher")
    main(["finetune", tiny_models["bert"], "--task", "sst2", "--out", teacher, "--data-dir", glue_dir,
          "--train-limit", "64", "--dev-limit", "8", "--holdout", "24", "--epochs", "1",
          "--batch-size", "16", "--max-length", "32", "--device", "cpu"])
    settings = {"by": "ratio", "learn": False, "hard_epochs": 0, "search_on": "holdout",
                "candidates": [1.0, 0.5, [0.3]], "train": {"max_length": 32}}
    # any drop tolerated: the candidate computing on the fewest tokens
    loose = token_prune(teacher, str(tmp_path / "loose"), {**settings, "max_drop": 100.0},
                        data_dir=glue_dir, dev_limit=8)
    search = loose["search"]
    assert search["search_on"] == "holdout" and search["search_rows"] == 24
    assert [c["candidate"] for c in search["candidates"]] == [1.0, 0.5, [0.3]]
    shares = [c["mean_share"] for c in search["candidates"]]
    assert shares[0] == 1.0 and min(shares) < 1.0
    assert search["chosen"] == search["candidates"][shares.index(min(shares))]["candidate"]
    assert loose["values"] == search["values"] and loose["kept_tokens"]["mean_share"] < 1.0
    # no drop tolerated: keep 1 (drop 0) qualifies; a candidate with fewer tokens only if it lost nothing
    strict = token_prune(teacher, str(tmp_path / "strict"), {**settings, "max_drop": 0.0},
                         data_dir=glue_dir, dev_limit=8)["search"]
    chosen = next(c for c in strict["candidates"] if c["candidate"] == strict["chosen"])
    assert chosen["drop"] <= 0
    assert all(c["drop"] > 0 for c in strict["candidates"] if c["mean_share"] < chosen["mean_share"])
    # a model without held-out rows, and search with learnt thresholds, are one line each
    capsys.readouterr()
    code, _, err = run_cli(capsys, "token-prune", tiny_models["bert"], "--task", "sst2", "--out",
                           str(tmp_path / "none"), "--set", "by=ratio", "--set", "learn=false",
                           "--set", "search_on=holdout", "--data-dir", glue_dir, "--dev-limit", "8")
    assert_one_line_error(code, err, "needs a model fine-tuned with --holdout N")
    code, _, err = run_cli(capsys, "token-prune", teacher, "--out", str(tmp_path / "bad"),
                           "--set", "search_on=holdout", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "set search_epochs or search_steps")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "none").exists()
    # tuned search (real training, 2 steps a candidate): every candidate and the unpruned model tuned
    tuned = token_prune(teacher, str(tmp_path / "tuned"), {**settings, "search_steps": 2, "max_drop": 100.0},
                        data_dir=glue_dir, train_limit=64, dev_limit=8)["search"]
    assert tuned["unpruned_tuning"]["steps"] == 2 and tuned["tuning_rows"] == 64   # 64 training rows besides the held ones
    assert all(c["tuning"]["steps"] == 2 and "score_before" in c and "score" in c for c in tuned["candidates"])
    assert tuned["order"][0] == 1.0   # least pruning first
    # learnt thresholds: the candidates are kept_weight values, each one's soft phase in the search
    learnt = token_prune(teacher, str(tmp_path / "learnt"),
                         {"threshold": 0.05, "search_on": "holdout", "search_steps": 2, "candidates": [0.1, 2.0],
                          "max_drop": 100.0, "hard_epochs": 0, "train": {"max_length": 32, "batch_size": 16}},
                         data_dir=glue_dir, train_limit=64, dev_limit=8)
    search = learnt["search"]
    assert [c["candidate"] for c in search["candidates"]] == [0.1, 2.0]
    assert all(c["values"] != [0.05] and c["tuning"]["steps"] == 2 for c in search["candidates"])
    assert learnt["phases"]["soft"]["in_search"] and learnt["phases"]["hard"] is None
    assert learnt["values"] == search["values"]


class _FakeTraining:
    """``fit`` and ``score`` stand-ins for the search: tuning notes the weights it started from
    and the rule it tuned under (and moves the classifier's bias); a rule scores ``tuned`` on the
    held-out rows once tuned under, ``untuned`` before; the unpruned model ``unpruned``."""

    def __init__(self, untuned, tuned, unpruned):
        self.untuned, self.tuned, self.unpruned = untuned, tuned, unpruned
        self.calls = []

    def fit(self, model, tokenizer, train_set, dev_set, config, loss_fn, desc="", callbacks=()):
        start = {k: v.clone() for k, v in model.state_dict().items()}
        self.calls.append({"start": start, "values": model.values(), "mode": model.mode,
                           "kept_weight": loss_fn.kept_weight, "steps": config.max_steps, "dev": dev_set})
        model.tuned_under = model.values()
        with torch.no_grad():
            model.backbone.classifier.bias.add_(len(self.calls))
        return {"steps": config.max_steps, "train_time_s": 0.0, "best": None}

    def score(self, model, tokenizer, dataset, max_length, batch_size=64, device=None, desc=None):
        from compressor.tokens.model import TokenPrunedModel

        if not isinstance(model, TokenPrunedModel):
            value = self.unpruned[1 if self.calls else 0]
        else:
            key = tuple(model.values())
            tuned = getattr(model, "tuned_under", None) == model.values()
            value = (self.tuned if tuned else self.untuned)[key]
        return {"accuracy": value / 100}


@pytest.mark.unit
def test_search_tunes_each_candidate_from_the_same_weights_and_keeps_one_that_tuning_recovers(
        monkeypatch, minilm_dir, glue_dir):
    from compressor.core.data import get_task, load_data
    from compressor.engine import scoring, train
    from compressor.tokens.api import search_values
    from compressor.tokens.config import TokenPruneConfig

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    task = get_task("sst2")
    rows = load_data(task, "dev", glue_dir, 12)
    schedules = [[0.8, 1.0], [0.4, 1.0], [0.3, 0.5], [0.5, 0.5]]
    # before tuning every schedule loses 10 points; tuned, 0.8 and 0.5/0.5 recover within 1 point
    # of the tuned unpruned model, 0.4 loses 6 (> search_skip_drop 5), which rules out 0.3/0.5
    fake = _FakeTraining(untuned={tuple(v): 80.0 for v in schedules},
                         tuned={(0.8, 1.0): 90.5, (0.4, 1.0): 85.0, (0.3, 0.5): 91.0, (0.5, 0.5): 90.0},
                         unpruned=(90.0, 91.0))
    monkeypatch.setattr(train, "fit", fake.fit)
    monkeypatch.setattr(scoring, "score", fake.score)
    config = TokenPruneConfig(by="ratio", learn=False, search_on="holdout", candidates=schedules,
                              search_steps=7, max_drop=1.0, search_skip_drop=5.0, train={"max_length": 32})
    config.check()
    pruned = prune_tokens(_classifier("bert"), config, tokenizer)
    record = search_values(pruned, tokenizer, rows, config, task, device="cpu", train_set=rows)
    # least pruning first (the share kept before tuning); the unpruned model tuned first, the same way
    assert record["order"][0] == [0.8, 1.0] and record["order"][-1] in ([0.3, 0.5], [0.5, 0.5])
    tuned = [c for c in record["candidates"] if "tuning" in c]
    assert len(fake.calls) == 1 + len(tuned) == 4   # 0.3/0.5 skipped
    assert fake.calls[0]["values"] == [1.0, 1.0]
    assert [c["values"] for c in fake.calls[1:]] == [c["values"] for c in sorted(
        tuned, key=lambda c: record["order"].index(c["candidate"]))]
    for call in fake.calls:
        assert call["steps"] == 7 and call["mode"] == "hard" and call["kept_weight"] == 0.0
        assert call["dev"] is rows   # tuned runs evaluate on the held-out rows, never dev
        assert all(torch.equal(call["start"][k], fake.calls[0]["start"][k]) for k in call["start"])
    skipped = next(c for c in record["candidates"] if c["candidate"] == [0.3, 0.5])
    assert "skipped" in skipped and not skipped["within"] and "score" not in skipped
    assert record["unpruned_score_before"] == 90.0 and record["unpruned_score"] == 91.0
    by = {tuple(c["candidate"]): c for c in record["candidates"]}
    assert by[(0.8, 1.0)]["score_before"] == 80.0 and by[(0.8, 1.0)]["score"] == 90.5
    assert by[(0.8, 1.0)]["drop_before"] == 10.0 and by[(0.8, 1.0)]["drop"] == 0.5
    assert by[(0.5, 0.5)]["within"] and by[(0.4, 1.0)]["drop"] == 6.0 and not by[(0.4, 1.0)]["within"]
    # kept: the one computing on the fewest tokens within the drop, with its own tuned weights
    assert record["chosen"] == [0.5, 0.5] and pruned.values() == [0.5, 0.5]
    chosen_call = 1 + [c["values"] for c in fake.calls[1:]].index([0.5, 0.5])
    expected = fake.calls[0]["start"]["backbone.classifier.bias"] + chosen_call + 1
    assert torch.allclose(pruned.backbone.classifier.bias, expected)
    # scored untuned (search_steps 0), the same schedules all lose 10 points: none is kept
    fake.calls.clear()
    untuned = search_values(prune_tokens(_classifier("bert"), config, tokenizer), tokenizer, rows,
                            TokenPruneConfig(**{**config.__dict__, "search_steps": 0, "search_skip_drop": 0.0}),
                            task, device="cpu")
    assert untuned["chosen"] is None and not fake.calls
    assert all(c["drop"] == 10.0 for c in untuned["candidates"])


@pytest.mark.unit
def test_learnt_thresholds_search_soft_phases_one_kept_weight_each(monkeypatch, minilm_dir, glue_dir):
    from compressor.core.data import get_task, load_data
    from compressor.engine import train
    from compressor.tokens.api import search_values
    from compressor.tokens.config import TokenPruneConfig

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    task = get_task("sst2")
    rows = load_data(task, "dev", glue_dir, 12)
    calls = []

    def fit(model, tokenizer, train_set, dev_set, config, loss_fn, desc="", callbacks=()):
        calls.append((model.mode, loss_fn.kept_weight, bool(model.thresholds.requires_grad),
                      model.thresholds.detach().tolist()))
        with torch.no_grad():   # "learning": the thresholds rise with the kept_weight
            model.thresholds.add_(0.01 * loss_fn.kept_weight)
        return {"steps": config.max_steps, "train_time_s": 0.0, "best": None}

    monkeypatch.setattr(train, "fit", fit)
    config = TokenPruneConfig(threshold=0.02, search_on="holdout", search_steps=3, candidates=[1.0, 0.2],
                              max_drop=100.0, train={"max_length": 32})
    config.check()
    pruned = prune_tokens(_classifier("bert"), config, tokenizer)
    record = search_values(pruned, tokenizer, rows, config, task, device="cpu", train_set=rows)
    assert record["order"] == [0.2, 1.0]   # the lowest kept_weight (least pruning) first
    assert calls[0][:3] == ("hard", 0.0, False) and calls[0][3] == [0.0, 0.0]   # the unpruned model
    assert [c[:3] for c in calls[1:]] == [("soft", 0.2, True), ("soft", 1.0, True)]
    assert all(c[3] == pytest.approx([0.01, 0.02]) for c in calls[1:])   # the same starting thresholds
    by = {c["candidate"]: c for c in record["candidates"]}
    assert by[1.0]["values"] == pytest.approx([0.02, 0.03]) and by[0.2]["values"] == pytest.approx([0.012, 0.022])
    assert by[1.0]["mean_share"] <= by[0.2]["mean_share"]


@pytest.mark.integration
def test_the_tuned_search_trains_on_the_recipes_augmented_rows(tmp_path, tiny_models, glue_dir):
    """token_prune {augment: recipe} tunes each candidate (and the hard phase) on the training rows
    plus the copies of the recipe's augment stage, made from those rows (none of the held ones)."""
    import yaml

    from compressor.cli import main
    from compressor.recipe import run_recipe

    teacher = str(tmp_path / "teacher")
    main(["finetune", tiny_models["bert"], "--task", "sst2", "--out", teacher, "--data-dir", glue_dir,
          "--train-limit", "40", "--dev-limit", "8", "--holdout", "16", "--epochs", "1",
          "--batch-size", "16", "--max-length", "32", "--device", "cpu"])
    tokens = {"by": "ratio", "learn": False, "search_on": "holdout", "candidates": [0.5, [0.7]],
              "search_epochs": 1, "max_drop": 100.0, "hard_epochs": 1, "augment": "recipe",
              "train": {"batch_size": 16, "max_length": 32}}
    recipe = {"name": "augment-tokens", "task": "sst2", "teacher": teacher, "device": "cpu",
              "data": {"train_limit": 24, "dev_limit": 8},
              "stages": [{"augment": {"copies": 2, "max_length": 32}}, {"token_prune": tokens}]}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    run_recipe(str(path), str(tmp_path / "run"), data_dir=glue_dir, log=lambda m: None)
    record = json.load(open(tmp_path / "run" / "02-token_prune" / "record.json"))
    assert record["config"]["augment"] == "recipe"   # the recipe's words, not a path
    search = record["search"]
    # 24 training rows + 48 copies; the held-out rows are the teacher's 16
    assert search["augmented_rows"] == 48 and search["tuning_rows"] == 72 and search["search_rows"] == 16
    # one epoch over 72 rows at batch 16 is 5 steps (over the 24 rows alone: 2): each candidate's
    # tuning, the unpruned model's and the hard phase
    assert all(c["tuning"]["steps"] == 5 for c in search["candidates"])
    assert search["unpruned_tuning"]["steps"] == 5 and record["phases"]["hard"]["steps"] == 5
    assert record["values"] == search["values"]
