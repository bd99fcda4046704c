"""Cross-layer sharing and factorised embeddings: one tensor in many layers, counted and stored
once (checkpoint and ONNX), identical logits after a round trip, SVD initialisation, bad settings."""
import collections
import copy
import hashlib
import os

import numpy as np
import pytest
import torch
import transformers

from conftest import save_sst2_classifier, tiny_config

from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters
from compressor.core.sharing import factorise_embedding, share_layers

pytestmark = pytest.mark.unit


def _classifier(arch="bert", layers=4, seed=0):
    torch.manual_seed(seed)
    config = tiny_config(arch)
    config.num_labels = 2
    if arch == "distilbert":
        config.n_layers = layers
    else:
        config.num_hidden_layers = layers
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def _layers(model):
    from compressor.core.arch import arch_of
    return arch_of(model).get_layers(model)


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(1, 1000, (3, 9), generator=g),
            "attention_mask": torch.ones(3, 9, dtype=torch.long)}


def test_shared_layers_are_one_parameter_whose_gradient_is_the_sum():
    model = _classifier()
    record = share_layers(model, "all", group=2, init="mean")
    layers = _layers(model)
    q = [layer.attention.self.query for layer in layers]
    assert q[0] is q[1] and q[2] is q[3] and q[0] is not q[2]
    assert q[0].weight is q[1].weight
    assert record["groups"] == [[0, 1], [2, 3]]
    # the same model with layer 1's modules as separate copies of the shared ones
    untied = copy.deepcopy(model)
    lu = _layers(untied)
    for path in ("attention.self.query", "attention.self.key", "attention.self.value",
                 "attention.output.dense", "intermediate.dense", "output.dense"):
        parent, _, leaf = path.rpartition(".")
        setattr(lu[1].get_submodule(parent), leaf, copy.deepcopy(lu[1].get_submodule(path)))
    assert lu[1].attention.self.query is not lu[0].attention.self.query
    batch = _inputs()
    model(**batch).logits.sum().backward()
    untied(**batch).logits.sum().backward()
    expected = lu[0].attention.self.query.weight.grad + lu[1].attention.self.query.weight.grad
    torch.testing.assert_close(q[0].weight.grad, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(q[0].weight.grad, lu[0].attention.self.query.weight.grad)


def test_mean_and_index_initialisation_and_what_is_shared():
    base = _classifier()
    weights = [layer.intermediate.dense.weight.detach().clone() for layer in _layers(base)]
    mean = copy.deepcopy(base)
    share_layers(mean, "ffn", group=2, init="mean")
    ml = _layers(mean)
    torch.testing.assert_close(ml[0].intermediate.dense.weight, (weights[0] + weights[1]) / 2)
    torch.testing.assert_close(ml[3].intermediate.dense.weight, (weights[2] + weights[3]) / 2)
    assert ml[0].attention.self.query is not ml[1].attention.self.query   # ffn only
    picked = copy.deepcopy(base)
    share_layers(picked, "attention", group=0, init="index", index=2)
    pl = _layers(picked)
    assert all(layer.attention.self.query is pl[0].attention.self.query for layer in pl)
    torch.testing.assert_close(pl[0].attention.self.query.weight,
                               _layers(base)[2].attention.self.query.weight)
    assert pl[0].intermediate.dense is not pl[1].intermediate.dense   # attention only


def test_storage_is_counted_once(tmp_path):
    from safetensors import safe_open
    from compressor.core.models import save_model

    model = _classifier()
    per_layer = sum(p.numel() for p in _layers(model)[0].parameters())
    before = count_parameters(model)
    save_model(model, str(tmp_path / "plain"))
    share_layers(model, "all", group=2)
    assert count_parameters(model) == before - 2 * per_layer
    save_model(model, str(tmp_path / "shared"))
    file = tmp_path / "shared" / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        assert not [k for k in f.keys() if ".layer.1." in k or ".layer.3." in k]
        assert sum(f.get_tensor(k).numel() for k in f.keys()) == count_parameters(model)
    plain = os.path.getsize(tmp_path / "plain" / "model.safetensors")
    assert plain - os.path.getsize(file) >= 2 * per_layer * 4


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_save_load_gives_identical_logits(tmp_path, arch, minilm_dir):
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, load_for_task, read_meta, save_checkpoint

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier(arch, layers=3)
    share_layers(model, "all", group=2, init="index", index=1)
    factorise_embedding(model, 8)
    save_checkpoint(model, tok, str(tmp_path / "m"), checkpoint_meta(get_task("sst2"), 32, "test"))
    shape = read_meta(str(tmp_path / "m"))["shape"]
    assert shape["embedding_rank"] == 8 and shape["shared"]
    loaded, _ = load_for_task(str(tmp_path / "m"))
    ll = _layers(loaded)
    assert ll[0].output.dense is ll[1].output.dense and ll[1].output.dense is not ll[2].output.dense
    assert loaded.get_input_embeddings().rank == 8
    batch = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_svd_initialisation_is_exact_at_full_rank_and_improves_with_rank():
    base = _classifier(layers=1)
    batch = _inputs()
    errors = []
    for rank in (4, 8, 16, 32):
        model = copy.deepcopy(base)
        errors.append(factorise_embedding(model, rank)["relative_error"])
        if rank == 32:
            torch.testing.assert_close(model.get_input_embeddings().weight,
                                       base.get_input_embeddings().weight, rtol=1e-4, atol=1e-5)
            with torch.no_grad():
                torch.testing.assert_close(model(**batch).logits, base(**batch).logits,
                                           rtol=1e-4, atol=1e-5)
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-5 < errors[0]
    assert count_parameters(model) == count_parameters(base) + 32 * 32  # full rank: E2 is extra
    small = copy.deepcopy(base)
    factorise_embedding(small, 4)
    assert count_parameters(small) < count_parameters(base) - 30000 * 27


def test_onnx_export_stores_a_shared_weight_once(tmp_path, minilm_dir):
    import onnx
    from onnx import numpy_helper

    from compressor.core.data import Example, get_task
    from compressor.export.onnx import export_onnx
    from compressor.core.models import checkpoint_meta, save_checkpoint

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier(layers=2)
    model.config.vocab_size = tok.vocab_size
    share_layers(model, "all")
    save_checkpoint(model, tok, str(tmp_path / "m"), checkpoint_meta(get_task("sst2"), 32, "test"))
    examples = [Example(texts=(t,), label=0, guid=str(i))
                for i, t in enumerate(("a fine film", "not good at all , sadly"))]
    manifest = export_onnx(str(tmp_path / "m"), str(tmp_path / "onnx"), exporter="torch",
                           examples=examples)
    assert manifest["parity"]["max_abs_logit_diff"] < 1e-4 and manifest["deduplicated_initializers"] >= 1
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph
    seen = collections.Counter()
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if array.size >= 32 * 32:
            seen[hashlib.sha1(array.tobytes()).hexdigest()] += 1
    assert seen and max(seen.values()) == 1
    q = _layers(model)[0].attention.self.query.weight.detach().numpy()
    stored = [numpy_helper.to_array(i) for i in graph.initializer]
    assert sum(1 for a in stored if a.shape in (q.shape, q.T.shape) and
               (np.allclose(a, q) or np.allclose(a, q.T))) <= 1


def test_bad_settings_are_one_line():
    from compressor.core.settings import config_from_dict
    from compressor.share.configs import ShareConfig

    for values, words in (({"share": "everything"}, "unknown share 'everything'"),
                          ({"group": 2, "index": 2}, "index 2 is no layer of a group of 2"),
                          ({"init": "median"}, "unknown init"),
                          ({"embedding_rank": -1}, "must not be negative")):
        with pytest.raises(CompressorError) as err:
            config_from_dict(ShareConfig, values, what="share")
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(CompressorError, match="change nothing"):
        ShareConfig(share="none").check()
    model = _classifier(layers=2)
    with pytest.raises(CompressorError, match="group 3 does not fit a model of 2 layers"):
        share_layers(model, group=3)
    with pytest.raises(CompressorError, match="between 1 and the embedding width 32"):
        factorise_embedding(model, 33)


def test_layers_of_different_shapes_cannot_share():
    from compressor.core.shapes import resize_layers

    model = _classifier(layers=2)
    resize_layers(model, heads=[4, 2])
    with pytest.raises(CompressorError, match="pruned to different shapes"):
        share_layers(model, "attention")


def test_share_api_recovers_and_saves(tmp_path, minilm_dir, glue_dir):
    from compressor.core.models import load_for_task, read_meta
    from compressor.share import share

    source = save_sst2_classifier(tmp_path / "model", minilm_dir)
    record = share(source, str(tmp_path / "shared"),
                   {"share": "all", "group": 2, "init": "mean", "embedding_rank": 16,
                    "recover": {"mode": "distill", "train": {"epochs": 1, "batch_size": 16}}},
                   data_dir=glue_dir, train_limit=32, dev_limit=16)
    assert record["recovery"]["mode"] == "distill"
    assert record["parameters"] < record["parameters_before"]
    assert record["sharing"]["layers"]["groups"] == [[0, 1]]
    meta = read_meta(str(tmp_path / "shared"))
    assert meta["shape"]["embedding_rank"] == 16 and meta["made_by"] == "share"
    model, _ = load_for_task(str(tmp_path / "shared"))
    layers = _layers(model)
    assert layers[0].attention.self.query is layers[1].attention.self.query


def test_adapters_start_from_each_layers_difference_and_round_trip(tmp_path, minilm_dir):
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, load_for_task, read_meta, save_checkpoint
    from compressor.core.sharing import LowRankAdapted

    base = _classifier(layers=2)
    original = [layer.intermediate.dense.weight.detach().clone() for layer in _layers(base)]
    errors = []
    for rank in (2, 32):
        model = copy.deepcopy(base)
        share_layers(model, "ffn", init="mean", adapter_rank=rank)
        layers = _layers(model)
        adapted = [layer.intermediate.dense for layer in layers]
        assert all(isinstance(a, LowRankAdapted) for a in adapted)
        assert adapted[0] is not adapted[1] and adapted[0].base is adapted[1].base
        errors.append(float(torch.linalg.norm(adapted[1].weight.detach() - original[1])))
    assert errors[1] < 1e-4 < errors[0]     # full rank gives each layer its own weight back
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    save_checkpoint(model, tok, str(tmp_path / "m"), checkpoint_meta(get_task("sst2"), 32, "test"))
    assert read_meta(str(tmp_path / "m"))["shape"]["adapter_rank"] == 32
    loaded, _ = load_for_task(str(tmp_path / "m"))
    la = [layer.intermediate.dense for layer in _layers(loaded)]
    assert la[0].base is la[1].base and la[0] is not la[1]
    batch = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)


def test_share_command_writes_a_shared_model_and_refuses_bad_settings(tmp_path, capsys, minilm_dir, glue_dir):
    from compressor.cli import main
    from compressor.core.models import read_meta
    from test_cli import assert_one_line_error, run_cli

    source = save_sst2_classifier(tmp_path / "model", minilm_dir)
    main(["share", source, "--out", str(tmp_path / "shared"), "--set", "share=ffn",
          "--recover", "mode=none", "--data-dir", glue_dir, "--train-limit", "16", "--dev-limit", "16"])
    assert "shared model:" in capsys.readouterr().out
    assert read_meta(str(tmp_path / "shared"))["shape"]["shared"]
    code, _, err = run_cli(capsys, "share", source, "--out", str(tmp_path / "x"),
                           "--set", "share=heads", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "share")
    assert not (tmp_path / "x").exists()
