"""One loader for every model shape: save -> load gives the same logits, for every kind.

Plain Hugging Face encoders, per-layer heads and FFN widths, shared layers, the
BiLSTM/CNN students, torchao INT8, ONNX exports and a kind this file registers
itself; each folder's compressor.json says its kind, and eval/predict take them all.
"""
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import transformers
from safetensors import safe_open

from conftest import tiny_config
from compressor.cli import main
from compressor.core.data import get_task
from compressor.core.errors import CompressorError
from compressor.core.loaders import register_loader
from compressor.core.models import checkpoint_meta, count_parameters, load_for_task, save_checkpoint
from compressor.core.shapes import resize_layers

pytestmark = pytest.mark.unit

SST2 = get_task("sst2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDED_DEV = os.path.join(ROOT, "compressor", "core", "data", "embedded", "sst2", "dev.tsv")
TEXTS = ["a gripping, funny film", "flat and lifeless", "it is what it is, and no more than that"]


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


def classifier(arch, tokenizer, seed=0):
    config = tiny_config(arch)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(seed)
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def logits(model, tokenizer, texts=TEXTS):
    types = getattr(model.config, "type_vocab_size", 0) > 1 and model.config.model_type == "bert"
    enc = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=types)
    with torch.no_grad():
        return model(**enc).logits.float()


def hidden_states(model, tokenizer, texts=TEXTS):
    """The encoder's last hidden states: where a wrong head or unit shows more than in tiny logits."""
    enc = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        return model.base_model(**enc).last_hidden_state


def meta_of(path):
    return json.load(open(os.path.join(path, "compressor.json")))


def save(model, tokenizer, path, **extra):
    save_checkpoint(model, tokenizer, str(path), checkpoint_meta(SST2, 64, "test", **extra))
    return str(path)


def round_trip(model, tokenizer, path):
    """Save, load through the registry, and check the logits are the very same."""
    save(model, tokenizer, path)
    loaded, _ = load_for_task(str(path), SST2)
    assert torch.equal(logits(loaded, tokenizer), logits(model, tokenizer))
    return loaded


# -- plain Hugging Face ----------------------------------------------------------

def test_a_plain_folder_is_kind_hf_and_loads_with_transformers_alone(tokenizer, tmp_path):
    model = classifier("bert", tokenizer)
    round_trip(model, tokenizer, tmp_path / "plain")
    meta = meta_of(tmp_path / "plain")
    assert meta["kind"] == "hf" and meta["shape"] == {"layers": 2, "heads": [4, 4], "ffn": [64, 64]}
    alone = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "plain")).eval()
    assert torch.equal(logits(alone, tokenizer), logits(model, tokenizer))


def test_a_folder_without_kind_loads_as_before(tokenizer, tmp_path):
    model = classifier("roberta", tokenizer)
    path = save(model, tokenizer, tmp_path / "old")
    meta = meta_of(path)
    del meta["kind"], meta["shape"]  # what earlier versions wrote
    (tmp_path / "old" / "compressor.json").write_text(json.dumps(meta))
    loaded, _ = load_for_task(path, SST2)
    assert torch.equal(logits(loaded, tokenizer), logits(model, tokenizer))


# -- per-layer shapes (what pruning leaves) ---------------------------------------

KEEP_HEADS = [[0, 2, 3], [1]]          # layer 0 drops head 1, layer 1 keeps only head 1
KEEP_FFN = [list(range(0, 64, 2)), 48]  # every other unit; the first 48


def _zero_dropped(model, heads, ffn):
    """The same model with the dropped heads' values and FFN units zeroed: what pruning removes."""
    from compressor.core.arch import arch_of

    spec = arch_of(model)
    size = spec.hidden_size(model.config) // spec.num_heads(model.config)
    with torch.no_grad():
        for layer, keep_heads, keep_ffn in zip(spec.get_layers(model), heads, ffn):
            value = spec.attention(layer)["value"]
            for h in set(range(spec.num_heads(model.config))) - set(keep_heads):
                value.weight[h * size:(h + 1) * size] = 0
                value.bias[h * size:(h + 1) * size] = 0
            keep_ffn = range(keep_ffn) if isinstance(keep_ffn, int) else keep_ffn
            ffn_in = spec.ffn(layer)["ffn_in"]
            dropped = sorted(set(range(ffn_in.out_features)) - set(keep_ffn))
            ffn_in.weight[dropped] = 0
            ffn_in.bias[dropped] = 0
    return model


def _strong_shared_bias(model):
    """MPNet's relative position bias, large enough that a layer given another head's column shows."""
    from compressor.core.arch import arch_of

    for name in arch_of(model).shared_layer_params:
        with torch.no_grad():
            model.get_parameter(name + ".weight").normal_(0, 3, generator=torch.Generator().manual_seed(1))
    return model


@pytest.mark.parametrize("arch", ["bert", "mpnet", "roberta", "distilbert"])
def test_heads_and_ffn_width_per_layer_round_trip(arch, tokenizer, tmp_path):
    model = _strong_shared_bias(classifier(arch, tokenizer))
    masked = _zero_dropped(_strong_shared_bias(classifier(arch, tokenizer)), KEEP_HEADS, KEEP_FFN)
    before = count_parameters(model)
    resize_layers(model, heads=KEEP_HEADS, ffn=KEEP_FFN)
    # the resized model computes what the full one computes with those heads and units at zero
    # (for MPNet: each layer takes its own kept heads' columns of the shared position bias)
    torch.testing.assert_close(hidden_states(model, tokenizer), hidden_states(masked, tokenizer),
                               atol=1e-5, rtol=1e-5)
    assert count_parameters(model) < before
    loaded = round_trip(model, tokenizer, tmp_path / arch)
    shape = meta_of(tmp_path / arch)["shape"]
    assert shape["heads"] == [3, 1] and shape["ffn"] == [32, 48]
    assert ("head_index" in shape) == (arch == "mpnet")  # MPNet's shared bias: which columns each layer takes
    assert count_parameters(loaded) == count_parameters(model)
    with pytest.raises(Exception):  # config.json alone cannot say this shape
        transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / arch))


def test_resize_layers_keeps_what_transformers_prune_heads_keeps(tokenizer):
    if not hasattr(transformers.BertModel, "prune_heads"):
        pytest.skip("this transformers has no prune_heads")
    pruned = classifier("bert", tokenizer)
    pruned.prune_heads({0: [1], 1: [0, 2, 3]})
    resized = resize_layers(classifier("bert", tokenizer), heads=KEEP_HEADS)
    assert torch.equal(logits(resized, tokenizer), logits(pruned, tokenizer))


# -- shared layers (what sharing leaves) -------------------------------------------

def test_shared_layers_are_saved_once_as_safetensors_and_tied_again(tokenizer, tmp_path):
    model = classifier("bert", tokenizer)
    model.bert.encoder.layer[1] = model.bert.encoder.layer[0]                     # a layer used twice
    model.bert.pooler.dense.bias = model.bert.encoder.layer[0].output.dense.bias  # one tensor, two modules
    loaded = round_trip(model, tokenizer, tmp_path / "shared")
    folder = tmp_path / "shared"
    assert sorted(f for f in os.listdir(folder) if f.endswith((".bin", ".pt", ".pkl"))) == []
    assert meta_of(folder)["shape"]["shared"] == {
        "bert.encoder.layer.1": "bert.encoder.layer.0",
        "bert.pooler.dense.bias": "bert.encoder.layer.0.output.dense.bias"}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert not any(n.startswith("bert.encoder.layer.1.") for n in names) and "bert.pooler.dense.bias" not in names
    assert loaded.bert.encoder.layer[1] is loaded.bert.encoder.layer[0]
    assert loaded.bert.pooler.dense.bias is loaded.bert.encoder.layer[0].output.dense.bias
    assert count_parameters(loaded) == count_parameters(model) < count_parameters(classifier("bert", tokenizer))


# -- students, quantised models, exports ------------------------------------------

@pytest.mark.parametrize("kind", ["bilstm", "cnn"])
def test_small_students_round_trip(kind, tokenizer, tmp_path):
    from compressor.core.small import build_small

    torch.manual_seed(0)
    student = build_small(kind, tokenizer, SST2).eval()
    round_trip(student, tokenizer, tmp_path / kind)
    assert meta_of(tmp_path / kind)["kind"] == "small" and "shape" not in meta_of(tmp_path / kind)
    # a folder of an earlier version: no kind, compressor.json names the class
    meta = meta_of(tmp_path / kind)
    del meta["kind"]
    meta["architecture"] = kind
    (tmp_path / kind / "compressor.json").write_text(json.dumps(meta))
    loaded, _ = load_for_task(str(tmp_path / kind))
    assert torch.equal(logits(loaded, tokenizer), logits(student, tokenizer))


@pytest.mark.parametrize("shaped", [False, True], ids=["plain", "per-layer"])
def test_torchao_int8_round_trips(shaped, tokenizer, tmp_path):
    from compressor.quantize import resolve_preset
    from compressor.quantize.torch_int8 import quantize_torchao, save_quantized

    model = classifier("bert", tokenizer)
    if shaped:
        resize_layers(model, heads=KEEP_HEADS, ffn=KEEP_FFN)
    preset = resolve_preset("avx512_vnni")
    quantize_torchao(model, preset)
    info = {"method": "dynamic", "backend": "torchao", "preset": preset.to_dict(), "exclude": []}
    out = str(tmp_path / "int8")
    save_quantized(model, tokenizer, out, checkpoint_meta(SST2, 64, "test"), info)
    assert meta_of(out)["kind"] == "torch-quantized"
    assert meta_of(out)["shape"]["heads"] == ([3, 1] if shaped else [4, 4])
    loaded, _ = load_for_task(out, SST2)
    assert torch.equal(logits(loaded, tokenizer), logits(model, tokenizer))


def test_an_onnx_export_loads_for_scoring_not_for_training(tokenizer, tmp_path):
    from compressor.export import export_onnx

    model = classifier("bert", tokenizer)
    resize_layers(model, heads=KEEP_HEADS, ffn=KEEP_FFN)
    source = save(model, tokenizer, tmp_path / "ckpt")
    export_onnx(source, str(tmp_path / "onnx"), parity=False)
    assert meta_of(tmp_path / "onnx")["kind"] == "onnx" and meta_of(tmp_path / "onnx")["task"] == "sst2"
    graph, _ = load_for_task(str(tmp_path / "onnx"), SST2, pytorch=False)
    assert graph.engine == "onnxruntime"
    torch.testing.assert_close(logits(graph, tokenizer), logits(model, tokenizer), atol=1e-4, rtol=0)
    with pytest.raises(CompressorError, match="is an ONNX export, not a PyTorch checkpoint") as exc:
        load_for_task(str(tmp_path / "onnx"), SST2)
    assert source in str(exc.value) and "\n" not in str(exc.value)


# -- a kind registered by a test ---------------------------------------------------

class MeanOfEmbeddings(torch.nn.Module):
    """A new kind of model: the mean of its word vectors, then a linear layer."""

    compressor_kind = "test-mean-of-embeddings"

    def __init__(self, vocab_size, num_labels=2):
        super().__init__()
        self.config = SimpleNamespace(model_type="mean-of-embeddings", vocab_size=vocab_size,
                                      num_labels=num_labels, type_vocab_size=1)
        self.embedding = torch.nn.Embedding(vocab_size, 16)
        self.head = torch.nn.Linear(16, num_labels)

    def forward(self, input_ids, attention_mask=None, **_):
        from transformers.modeling_outputs import SequenceClassifierOutput

        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        mean = (self.embedding(input_ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return SequenceClassifierOutput(logits=self.head(mean))

    def save_pretrained(self, path):
        from safetensors.torch import save_model

        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(vars(self.config), f)
        save_model(self, os.path.join(path, "model.safetensors"))


@register_loader(MeanOfEmbeddings.compressor_kind)
def load_mean_of_embeddings(path, task=None, **_):
    from safetensors.torch import load_model

    from compressor.core.models import load_tokenizer

    config = json.load(open(os.path.join(path, "config.json")))
    model = MeanOfEmbeddings(config["vocab_size"], config["num_labels"])
    load_model(model, os.path.join(path, "model.safetensors"))
    return model.eval(), load_tokenizer(path)


def test_a_kind_registered_by_a_test_round_trips_and_is_evaluated(tokenizer, tmp_path, capsys):
    torch.manual_seed(0)
    model = MeanOfEmbeddings(tokenizer.vocab_size).eval()
    round_trip(model, tokenizer, tmp_path / "mean")
    assert meta_of(tmp_path / "mean")["kind"] == "test-mean-of-embeddings"
    main(["eval", str(tmp_path / "mean"), "--data-dir", "embedded", "--limit", "16", "--device", "cpu"])
    assert "sst2 dev: accuracy" in capsys.readouterr().out


def test_an_unknown_kind_is_one_line(tokenizer, tmp_path, capsys):
    path = save(classifier("bert", tokenizer), tokenizer, tmp_path / "future")
    meta = {**meta_of(path), "kind": "exit-heads-v9"}
    (tmp_path / "future" / "compressor.json").write_text(json.dumps(meta))
    with pytest.raises(CompressorError, match=r"compressor.json: unknown kind 'exit-heads-v9'.*known: .*onnx"):
        load_for_task(path)
    with pytest.raises(SystemExit):
        main(["eval", path, "--data-dir", "embedded", "--limit", "8"])
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "unknown kind 'exit-heads-v9'" in err and "Traceback" not in err


# -- eval and predict take every kind ----------------------------------------------

@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    """One folder of each kind and shape, all of the same tiny BERT classifier."""
    from compressor.quantize import resolve_preset
    from compressor.quantize.torch_int8 import quantize_torchao, save_quantized
    from compressor.core.small import build_small
    from compressor.export import export_onnx

    root = tmp_path_factory.mktemp("kinds")
    paths = {"hf": save(classifier("bert", tokenizer), tokenizer, root / "hf")}
    pruned = resize_layers(classifier("bert", tokenizer), heads=KEEP_HEADS, ffn=KEEP_FFN)
    paths["per-layer"] = save(pruned, tokenizer, root / "per-layer")
    shared = classifier("bert", tokenizer)
    shared.bert.encoder.layer[1] = shared.bert.encoder.layer[0]
    paths["shared"] = save(shared, tokenizer, root / "shared")
    torch.manual_seed(0)
    paths["small"] = save(build_small("bilstm", tokenizer, SST2), tokenizer, root / "small")
    int8 = quantize_torchao(classifier("bert", tokenizer), resolve_preset("avx512_vnni"))
    info = {"method": "dynamic", "backend": "torchao", "preset": resolve_preset("avx512_vnni").to_dict()}
    paths["torch-quantized"] = str(root / "int8")
    save_quantized(int8, tokenizer, paths["torch-quantized"], checkpoint_meta(SST2, 64, "test"), info)
    paths["onnx"] = str(root / "onnx")
    export_onnx(paths["per-layer"], paths["onnx"], parity=False)
    return paths


@pytest.mark.parametrize("kind", ["hf", "per-layer", "shared", "small", "torch-quantized", "onnx"])
def test_eval_and_predict_take_every_kind(kind, folders, tmp_path):
    record, predictions = str(tmp_path / "eval.json"), str(tmp_path / "p.tsv")
    main(["eval", folders[kind], "--data-dir", "embedded", "--limit", "24", "--device", "cpu",
          "--out", record])
    result = json.load(open(record))
    assert result["examples"] == 24 and 0 <= result["metrics"]["accuracy"] <= 1
    assert result["engine"] == ("onnxruntime" if kind == "onnx" else "pytorch")
    main(["predict", folders[kind], "--input", EMBEDDED_DEV, "--output", predictions, "--device", "cpu"])
    rows = open(predictions).read().splitlines()
    assert rows[0] == "index\tprediction" and len(rows) == 873


def test_the_export_scores_as_its_source_does_and_as_score_onnx_does(folders, tmp_path):
    from compressor.core.data import load_split
    from compressor.export.onnx import score_onnx

    scores = {}
    for kind in ("per-layer", "onnx"):
        out = str(tmp_path / f"{kind}.json")
        main(["eval", folders[kind], "--data-dir", "embedded", "--limit", "64", "--out", out])
        scores[kind] = json.load(open(out))["metrics"]
    assert scores["onnx"] == pytest.approx(scores["per-layer"])
    assert scores["onnx"] == score_onnx(folders["onnx"], load_split("sst2", "dev", data_dir="embedded", limit=64))


def test_reading_a_kind_imports_no_torch_and_models_does_not_import_the_students():
    code = ("import sys\n"
            "from compressor.core.loaders import kind_of\n"
            "kind_of('.')\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "import compressor.core.small\n"      # was a cycle through compressor.core.models
            "import compressor.core.models\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    source = open(os.path.join(ROOT, "compressor", "core", "models.py")).read()
    assert "distill" not in source
