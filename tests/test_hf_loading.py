"""Folders the toolkit writes load in plain transformers: a plain-shape one as it is, one with
per-layer shapes (pruned heads/FFN, shared layers, factorised embeddings, adapters) through
``auto_map`` and the ``modeling_compressor.py`` saved with it (``trust_remote_code=True``), to
the toolkit's own logits; every checkpoint and ONNX folder carries a model card whose metadata
parses as YAML; the toolkit itself never runs the folder's code."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import transformers
import yaml
from conftest import tiny_config

from compressor.core.data import get_task
from compressor.core.hub import (
    CARD_FILE,
    CARD_MARK,
    MODELING_FILE,
    SHAPE_KEY,
    clean_config,
    refresh_card,
    write_model_card,
)
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.core.shapes import resize_layers
from compressor.core.sharing import factorise_embedding, share_layers

pytestmark = pytest.mark.integration

RECORD = {"score": 81.5, "metrics": {"accuracy": 0.815}, "base_model": "sentence-transformers/all-MiniLM-L6-v2"}


def _classifier(arch, vocab, layers=3):
    torch.manual_seed(0)
    config = tiny_config(arch)
    config.num_labels, config.vocab_size = 2, vocab
    if arch == "distilbert":
        config.n_layers = layers
    else:
        config.num_hidden_layers = layers
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 1000, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _save(model, tokenizer, folder, made_by="prune"):
    save_checkpoint(model, tokenizer, str(folder), checkpoint_meta(get_task("sst2"), 32, made_by),
                    {"metrics.json": RECORD})
    return str(folder)


def _logits(model):
    with torch.no_grad():
        return model(**_inputs()).logits


def _card(folder):
    text = open(os.path.join(folder, CARD_FILE), encoding="utf-8").read()
    assert text.startswith("---\n")
    header = yaml.safe_load(text.split("---\n")[1])
    return header, text


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.mark.parametrize("arch", ["bert", "roberta", "mpnet", "distilbert", "modernbert"])
def test_pruned_folder_loads_in_plain_transformers_with_the_toolkits_logits(tmp_path, tokenizer, arch):
    model = _classifier(arch, tokenizer.vocab_size)
    resize_layers(model, heads=[[0, 2, 3], [1], None], ffn=[list(range(0, 64, 2)), 40, None])
    folder = _save(model, tokenizer, tmp_path / f"{arch}-pruned")
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["auto_map"]["AutoModelForSequenceClassification"].startswith("modeling_compressor.")
    assert config[SHAPE_KEY]["heads"] == [3, 1, 4] and config[SHAPE_KEY]["ffn"] == [32, 40, 64]
    source = open(os.path.join(folder, MODELING_FILE)).read()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.startswith(("import ", "from "))}
    assert imports <= {"re", "torch", "transformers", "inspect"}, imports
    assert "prune_heads(" not in source

    ours, _ = load_for_task(folder)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    assert type(theirs).__name__.startswith("Compressor")
    torch.testing.assert_close(_logits(theirs.eval()), _logits(ours), rtol=0, atol=0)
    torch.testing.assert_close(_logits(ours), _logits(model), rtol=0, atol=0)

    header, text = _card(folder)
    assert header["pipeline_tag"] == "text-classification" and header["library_name"] == "transformers"
    assert header["base_model"] == RECORD["base_model"]
    assert "pruned" in header["tags"] and "custom_code" in header["tags"]
    assert header["model-index"][0]["results"][0]["metrics"][0]["value"] == 81.5
    assert "trust_remote_code=True" in text and "3, 1, 4 (of 4)" in text


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_shared_layers_factorised_embedding_and_adapters_load_with_remote_code(tmp_path, tokenizer, arch):
    model = _classifier(arch, tokenizer.vocab_size, layers=4)
    share_layers(model, "all", group=2, init="index", index=1)
    factorise_embedding(model, 8)
    adapted = _classifier(arch, tokenizer.vocab_size, layers=2)
    share_layers(adapted, "ffn", init="mean", adapter_rank=4)
    for name, net in (("shared", model), ("adapters", adapted)):
        folder = _save(net, tokenizer, tmp_path / name, made_by="share")
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        torch.testing.assert_close(_logits(theirs.eval()), _logits(load_for_task(folder)[0]), rtol=0, atol=0)
        torch.testing.assert_close(_logits(theirs), _logits(net), rtol=0, atol=0)
    layers = theirs.base_model.encoder.layer
    assert layers[0].intermediate.dense.base is layers[1].intermediate.dense.base   # still one tensor


def test_plain_folder_loads_in_transformers_alone_and_drops_stale_custom_code_keys(tmp_path, tokenizer):
    pruned = _classifier("bert", tokenizer.vocab_size)
    resize_layers(pruned, heads=[2, None, None])
    loaded, _ = load_for_task(_save(pruned, tokenizer, tmp_path / "pruned"))
    assert getattr(loaded.config, SHAPE_KEY, None)   # the config a pruned folder gave
    torch.manual_seed(0)
    plain = transformers.AutoModelForSequenceClassification.from_config(loaded.config, trust_remote_code=False)
    folder = _save(plain.eval(), tokenizer, tmp_path / "plain", made_by="finetune")
    config = json.load(open(os.path.join(folder, "config.json")))
    assert "auto_map" not in config and SHAPE_KEY not in config
    assert not os.path.exists(os.path.join(folder, MODELING_FILE))
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    assert type(theirs) is transformers.BertForSequenceClassification
    torch.testing.assert_close(_logits(theirs.eval()), _logits(plain), rtol=0, atol=0)
    header, text = _card(folder)
    assert "custom_code" not in header["tags"] and "fine-tuned" in header["tags"]
    assert "trust_remote_code" not in text


def test_the_toolkit_never_runs_the_folders_modelling_file(tmp_path, tokenizer):
    model = _classifier("bert", tokenizer.vocab_size)
    resize_layers(model, heads=[[0, 2, 3], [1], None])
    folder = _save(model, tokenizer, tmp_path / "m")
    with open(os.path.join(folder, MODELING_FILE), "w") as f:
        f.write("raise RuntimeError('the toolkit ran code from a folder')\n")
    ours, _ = load_for_task(folder)
    torch.testing.assert_close(_logits(ours), _logits(model), rtol=0, atol=0)


def test_model_cards_never_replace_a_users_readme(tmp_path, tokenizer):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / CARD_FILE).write_text("my own notes\n")
    assert not write_model_card(str(folder), "---\n---\n")
    assert (folder / CARD_FILE).read_text() == "my own notes\n"
    (folder / CARD_FILE).write_text(f"---\n---\n{CARD_MARK}\nold\n")
    assert write_model_card(str(folder), f"---\n---\n{CARD_MARK}\nnew\n")
    assert (folder / CARD_FILE).read_text().endswith("new\n")
    assert not [f for f in os.listdir(folder) if f.startswith(".tmp-")]   # written atomically


def test_export_folder_card_and_config_name_no_custom_code(tmp_path, tokenizer):
    from compressor.export.onnx import write_export_card

    model = _classifier("bert", tokenizer.vocab_size)
    resize_layers(model, heads=[[0, 2, 3], [1], None])
    source = _save(model, tokenizer, tmp_path / "pruned")
    out = tmp_path / "onnx"
    out.mkdir()
    shutil.copy(os.path.join(source, "config.json"), out)
    meta = {**json.load(open(os.path.join(source, "compressor.json"))), "kind": "onnx", "made_by": "export",
            "source": source}
    meta.pop("shape")
    (out / "compressor.json").write_text(json.dumps(meta))
    manifest = {"source": source, "parameters": 1234, "opset": 17, "precision": "int8-dynamic",
                "quantization": {"method": "dynamic"}, "model_type": "bert"}
    write_export_card(str(out), str(out), manifest)
    config = json.load(open(out / "config.json"))
    assert "auto_map" not in config and SHAPE_KEY not in config
    header, text = _card(str(out))
    assert header["library_name"] == "onnx" and "onnx" in header["tags"] and "int8-dynamic" in header["tags"]
    assert header["metrics"] == ["accuracy"]
    assert "steps: prune → export" in text and "compressor.export.runtime import Predictor" in text
    # a recipe stage writes the card again with its record, under the stage's name
    refresh_card(str(out), "03-export", {"score": 80.0, "metrics": {"accuracy": 0.8}})
    header, text = _card(str(out))
    assert header["model-index"][0]["name"] == "03-export" and "dev score: 80.00" in text
    clean_config(str(out / "config.json"))   # nothing left to take out: unchanged


@pytest.mark.skipif(not os.environ.get("COMPRESSOR_TRANSFORMERS5"),
                    reason="set COMPRESSOR_TRANSFORMERS5 to a folder holding transformers 5.x (pip --target)")
def test_pruned_and_shared_folders_load_in_transformers_5(tmp_path, tokenizer):
    folders, want = [], []
    for arch in ("bert", "mpnet", "distilbert"):
        model = _classifier(arch, tokenizer.vocab_size, layers=4)
        resize_layers(model, heads=[[0, 2, 3], [1], None, None], ffn=[32, 40, None, None])
        if arch != "distilbert":
            factorise_embedding(model, 8)
        folders.append(_save(model, tokenizer, tmp_path / arch))
        want.append(_logits(model).tolist())
    script = ("import json, sys, torch, transformers\n"
              "assert transformers.__version__.startswith('5'), transformers.__version__\n"
              "ids = torch.tensor(json.loads(sys.argv[1])); mask = torch.tensor(json.loads(sys.argv[2]))\n"
              "out = []\n"
              "for folder in sys.argv[3:]:\n"
              "    m = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)\n"
              "    with torch.no_grad():\n"
              "        out.append(m.eval()(input_ids=ids, attention_mask=mask).logits.tolist())\n"
              "print('LOGITS', json.dumps(out))\n")
    inputs = _inputs()
    env = {**os.environ, "PYTHONPATH": os.environ["COMPRESSOR_TRANSFORMERS5"],
           "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(inputs["input_ids"].tolist()),
                           json.dumps(inputs["attention_mask"].tolist()), *folders],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.split("LOGITS", 1)[1])
    for folder, g, w in zip(folders, got, want):
        torch.testing.assert_close(torch.tensor(g), torch.tensor(w), rtol=0, atol=0, msg=folder)
