"""The toolkit never runs code from a folder it is handed. The ``modeling_compressor.py`` a
pruned, shared or factorised folder carries (for plain transformers users) is never imported by
the toolkit's loaders: every kind built on an encoder loads through the toolkit's own classes
even when that file, and ``auto_map`` entries pointing at it, would write a marker when run,
and a user who would answer yes at transformers' "run the custom code?" prompt is never asked.
"""
import builtins
import json
import os

import pytest
import torch
import transformers

from conftest import tiny_config
from compressor.core.data import get_task
from compressor.core.errors import CompressorError
from compressor.core.hub import MODELING_FILE, SHAPE_KEY
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.core.shapes import resize_layers

pytestmark = pytest.mark.unit

SST2 = get_task("sst2")
TEXTS = ["a gripping, funny film", "flat and lifeless", "it is what it is"]
MARKED = "ran.txt"   # what the folder's code writes beside itself when it runs


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(autouse=True)
def a_user_who_says_yes(monkeypatch):
    """transformers' prompt before it runs a folder's code: answered yes, and each asking noted."""
    asked = []

    def answer(prompt=""):
        asked.append(prompt)
        return "y"

    monkeypatch.setattr(builtins, "input", answer)
    return asked


def pruned(tokenizer, arch="bert"):
    config = tiny_config(arch)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    return resize_layers(model, heads=[[0, 2, 3], [1]], ffn=[40, 24])


def folder_of(kind, tokenizer, path):
    """A folder of ``kind`` around a pruned tiny BERT (every one carries the modelling file)."""
    meta = checkpoint_meta(SST2, 32, "test")
    model = pruned(tokenizer)
    if kind == "shared":
        model.bert.encoder.layer[1] = model.bert.encoder.layer[0]
    elif kind == "factorised":
        from compressor.core.sharing import factorise_embedding

        factorise_embedding(model, 8)
    elif kind == "early-exit":
        from compressor.exit.model import EarlyExitModel

        model = EarlyExitModel(model).eval()
    elif kind == "token-prune":
        from compressor.tokens.model import TokenPrunedModel

        model = TokenPrunedModel(model, "ratio", [0.5], [tokenizer.sep_token_id]).eval()
    elif kind == "torch-quantized":
        from compressor.quantize.torch_int8 import save_quantized

        save_quantized(model.half(), tokenizer, str(path), meta, {"method": "fp16"})
        return str(path)
    save_checkpoint(model, tokenizer, str(path), meta)
    return str(path)


def tamper(folder):
    """The folder's modelling file and ``auto_map`` entries made to leave a marker when run."""
    marker = os.path.join(folder, MARKED)
    with open(os.path.join(folder, MODELING_FILE), "w") as f:
        f.write(f"open({marker!r}, 'w').write('ran')\nraise RuntimeError('the folder ran')\n")
    file = os.path.join(folder, "config.json")
    config = json.load(open(file))
    config["auto_map"] = {name: f"{MODELING_FILE[:-3]}.Evil" for name in
                          ("AutoConfig", "AutoModel", "AutoModelForSequenceClassification")}
    json.dump(config, open(file, "w"))
    file = os.path.join(folder, "tokenizer_config.json")
    tokenizer_config = json.load(open(file))
    tokenizer_config["auto_map"] = {"AutoTokenizer": [f"{MODELING_FILE[:-3]}.Evil", None]}
    json.dump(tokenizer_config, open(file, "w"))
    return marker


def logits(model, tokenizer):
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        return model(**enc).logits.float()


@pytest.mark.parametrize("kind", ["hf", "shared", "factorised", "early-exit", "token-prune", "torch-quantized"])
def test_every_kind_loads_through_the_toolkits_classes_never_the_folders_code(
        kind, tokenizer, tmp_path, a_user_who_says_yes):
    folder = folder_of(kind, tokenizer, tmp_path / kind)
    assert os.path.isfile(os.path.join(folder, MODELING_FILE))   # written for plain transformers
    before, _ = load_for_task(folder, SST2)
    marker = tamper(folder)
    after, loaded_tokenizer = load_for_task(folder, SST2)
    assert type(after) is type(before) and type(loaded_tokenizer) is type(tokenizer)
    torch.testing.assert_close(logits(after, tokenizer), logits(before, tokenizer), rtol=0, atol=0)
    assert not os.path.exists(marker) and a_user_who_says_yes == []


def test_a_folder_without_compressor_json_is_built_from_the_shape_config_json_records(tokenizer, tmp_path):
    """What a folder copied from the hub with only the files transformers reads holds: the shape
    that ``modeling_compressor.py`` would read, built by the toolkit's own classes instead."""
    folder = folder_of("shared", tokenizer, tmp_path / "from-hub")
    before, _ = load_for_task(folder, SST2)
    os.remove(os.path.join(folder, "compressor.json"))
    assert json.load(open(os.path.join(folder, "config.json")))[SHAPE_KEY]["heads"] == [3, 3]
    marker = tamper(folder)
    after, _ = load_for_task(folder, SST2)
    torch.testing.assert_close(logits(after, tokenizer), logits(before, tokenizer), rtol=0, atol=0)
    assert after.bert.encoder.layer[1] is after.bert.encoder.layer[0]
    assert not os.path.exists(marker)


@pytest.mark.parametrize("where", ["config", "tokenizer"])
def test_a_folder_that_only_its_own_code_could_load_is_one_line(tokenizer, tmp_path, a_user_who_says_yes,
                                                                 capsys, where):
    """A model type (or tokenizer class) transformers has no class for, with ``auto_map`` naming
    the folder's code: transformers would ask to run it; the toolkit refuses without asking."""
    from compressor.cli import main

    folder = folder_of("hf", tokenizer, tmp_path / "custom")
    marker = tamper(folder)
    if where == "config":
        file, key, value = "config.json", "model_type", "my-own-encoder"
    else:
        file, key, value = "tokenizer_config.json", "tokenizer_class", "MyOwnTokenizer"
    path = os.path.join(folder, file)
    data = json.load(open(path))
    data[key] = value
    json.dump(data, open(path, "w"))
    with pytest.raises(CompressorError, match=f"{file}: auto_map names code in the folder to run"):
        load_for_task(folder, SST2)
    with pytest.raises(SystemExit) as exit:
        main(["eval", folder, "--data-dir", "embedded", "--limit", "4", "--device", "cpu"])
    assert exit.value.code != 0
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "never runs code from a folder" in err and "Traceback" not in err
    assert not os.path.exists(marker) and a_user_who_says_yes == []
