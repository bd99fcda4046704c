"""Low-rank factorisation of Linear layers: the original outputs at full rank, ranks that grow
with the energy kept and shrink with the tolerance, folders that reload identically (toolkit and
plain transformers), an ONNX graph with the two MatMuls per factorised Linear, the stage in a
recipe and the command."""
import copy

import pytest
import torch
import transformers
from conftest import save_sst2_classifier, tiny_config

from compressor.core.errors import CompressorError
from compressor.core.lowrank import FactorisedLinear, factorised, rank_for_energy
from compressor.lowrank import factorise_

pytestmark = pytest.mark.integration

ENERGIES = (0.6, 0.8, 0.9, 0.95, 1.0)


def _classifier(arch="bert", vocab=None, init=None, seed=0):
    torch.manual_seed(seed)
    config = tiny_config(arch)
    config.num_labels = 2
    if vocab:
        config.vocab_size = vocab
    if init:
        config.initializer_range = init
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def _inputs(seed=1, high=1000):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(1, high, (3, 9), generator=g),
            "attention_mask": torch.ones(3, 9, dtype=torch.long)}


def _logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.unit
def test_a_factorised_linear_at_full_rank_gives_the_original_outputs():
    torch.manual_seed(0)
    for shape in ((64, 32), (32, 64), (32, 32)):
        linear = torch.nn.Linear(shape[1], shape[0])
        x = torch.randn(5, 7, shape[1])
        full = factorised(linear, min(shape))
        assert isinstance(full, FactorisedLinear) and full.down.bias is None
        torch.testing.assert_close(full(x), linear(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(full.weight, linear.weight, rtol=1e-5, atol=1e-5)


@pytest.mark.unit
@pytest.mark.parametrize("arch", ["bert", "distilbert", "mpnet"])
def test_every_linear_at_full_rank_gives_the_models_outputs(arch):
    model = _classifier(arch, init=0.2)
    batch = _inputs()
    ref = _logits(model, batch)
    full = copy.deepcopy(model)
    record = factorise_(full, {"linears": "all", "ratio": 1.0, "only_if_smaller": False})
    assert record["factorised"] == 2 * 6 and record["kept_dense"] == 0
    assert all(r["energy"] == pytest.approx(1.0) for r in record["linears"])
    assert sum(isinstance(m, FactorisedLinear) for m in full.modules()) == 12
    torch.testing.assert_close(_logits(full, batch), ref, rtol=1e-4, atol=1e-5)
    low = copy.deepcopy(model)
    factorise_(low, {"linears": "all", "ratio": 0.25, "only_if_smaller": False})
    assert not torch.allclose(_logits(low, batch), ref, atol=1e-5)   # a low rank does change them


@pytest.mark.unit
def test_energy_picks_ranks_monotonically():
    singular = torch.tensor([4.0, 2.0, 1.0, 1.0, 0.5, 0.1])
    power = singular ** 2
    for energy in (0.1, 0.5, 0.76, 0.9, 0.99, 1.0):
        rank = rank_for_energy(singular, energy)
        assert power[:rank].sum() / power.sum() >= energy - 1e-6
        assert rank == 1 or power[:rank - 1].sum() / power.sum() < energy
    model = _classifier()
    ranks = []
    for energy in ENERGIES:
        net = copy.deepcopy(model)
        record = factorise_(net, {"energy": energy, "only_if_smaller": False, "min_rank": 1})
        ranks.append([r["rank"] for r in record["linears"]])
        assert all(r["energy"] >= energy - 1e-6 for r in record["linears"])
    for lower, higher in zip(ranks, ranks[1:]):
        assert all(a <= b for a, b in zip(lower, higher)), (lower, higher)
    assert ranks[0] != ranks[-1] and ranks[-1] == [32] * 12


@pytest.mark.unit
def test_which_linears_min_rank_and_only_if_smaller():
    model = _classifier()
    ffn = copy.deepcopy(model)
    record = factorise_(ffn, {"linears": "ffn", "rank": 4, "layers": [1]})
    assert [(r["layer"], r["role"]) for r in record["linears"]] == [(1, "ffn_in"), (1, "ffn_out")]
    layer = ffn.bert.encoder.layer
    assert isinstance(layer[1].intermediate.dense, FactorisedLinear)
    assert isinstance(layer[0].intermediate.dense, torch.nn.Linear)
    assert isinstance(layer[1].attention.self.query, torch.nn.Linear)
    assert record["parameters_after"] < record["parameters_before"]
    floor = factorise_(copy.deepcopy(model), {"linears": ["query"], "energy": 0.01, "min_rank": 6})
    assert [r["rank"] for r in floor["linears"]] == [6, 6]
    # rank 20 of a 32x32 matrix holds 1280 weights against 1024: left dense unless asked
    dense = copy.deepcopy(model)
    record = factorise_(dense, {"linears": "attention", "rank": 20})
    assert record["factorised"] == 0 and record["parameters_after"] == record["parameters_before"]
    with pytest.raises(CompressorError, match="no plain Linear"):
        factorise_(ffn, {"linears": "ffn", "rank": 4, "layers": [1]})   # factorised already


@pytest.mark.unit
def test_sensitivity_ranks_grow_as_the_tolerance_tightens():
    model = _classifier(init=0.3)
    batches = [_inputs(seed) for seed in (1, 2)]
    ranks = []
    for tolerance in (1.0, 1e-2, 1e-4):
        record = factorise_(copy.deepcopy(model), {"by": "sensitivity", "tolerance": tolerance,
                                                   "only_if_smaller": False}, batches=batches)
        assert all(r["divergence"] <= tolerance or r["rank"] == r["full_rank"] for r in record["linears"])
        ranks.append([r["rank"] for r in record["linears"]])
    assert sum(ranks[0]) <= sum(ranks[1]) <= sum(ranks[2]) and sum(ranks[0]) < sum(ranks[2])
    with pytest.raises(CompressorError, match="give batches"):
        factorise_(copy.deepcopy(model), {"by": "sensitivity"})


@pytest.mark.unit
def test_bad_settings_are_one_line():
    from compressor.core.settings import config_from_dict
    from compressor.lowrank.config import LowRankConfig

    for values, words in (({"linears": "mlp"}, "unknown linears 'mlp'"),
                          ({"linears": ["query", "gate"]}, "unknown linears 'gate'"),
                          ({"energy": 1.5}, "energy must be in (0, 1]"),
                          ({"ratio": 2}, "ratio must be in"),
                          ({"by": "magic"}, "unknown by"),
                          ({"rank": 4, "ratio": 0.5}, "rank or ratio, not both")):
        with pytest.raises(CompressorError) as err:
            config_from_dict(LowRankConfig, values, what="lowrank")
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_a_factorised_folder_reloads_identically_and_exports_two_matmuls(tmp_path, minilm_dir, arch):
    import onnx
    from onnx import numpy_helper

    from compressor.core.data import Example, get_task
    from compressor.core.models import (
        checkpoint_meta,
        load_for_task,
        read_meta,
        save_checkpoint,
    )
    from compressor.export.onnx import export_onnx

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = _classifier(arch, vocab=tok.vocab_size, init=0.1)
    record = factorise_(model, {"linears": ["value", "ffn_in"], "rank": 5})
    assert record["factorised"] == 4
    folder = str(tmp_path / "m")
    save_checkpoint(model, tok, folder, checkpoint_meta(get_task("sst2"), 32, "lowrank"))
    shape = read_meta(folder)["shape"]
    assert set(shape["linear_rank"].values()) == {5} and len(shape["linear_rank"]) == 4
    batch = _inputs(high=tok.vocab_size)
    loaded, _ = load_for_task(folder)
    assert sum(isinstance(m, FactorisedLinear) for m in loaded.modules()) == 4
    torch.testing.assert_close(_logits(loaded, batch), _logits(model, batch), rtol=0, atol=0)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    torch.testing.assert_close(_logits(theirs.eval(), batch), _logits(model, batch), rtol=0, atol=0)
    card = open(f"{folder}/README.md").read()
    assert "4 Linear layers factorised" in card

    examples = [Example(texts=(t,), label=0, guid=str(i))
                for i, t in enumerate(("a fine film", "not good at all , sadly", "dull"))]
    manifest = export_onnx(folder, str(tmp_path / "onnx"), exporter="torch", examples=examples)
    assert manifest["parity"]["max_abs_logit_diff"] < 1e-4
    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx")).graph
    weights = {i.name: numpy_helper.to_array(i).shape for i in graph.initializer}
    matmuls = [n for n in graph.node if n.op_type == "MatMul"]
    by_output = {n.output[0]: n for n in matmuls}

    def weight_shape(node):
        return next((weights[i] for i in node.input if i in weights), None)

    pairs = [(weight_shape(by_output[n.input[0]]), weight_shape(n)) for n in matmuls
             if n.input[0] in by_output]
    pairs = [p for p in pairs if None not in p]
    # down (in x 5) then up (5 x out): value 32 -> 5 -> 32 and FFN in 32 -> 5 -> 64, in each layer
    assert pairs.count(((32, 5), (5, 32))) == 2 and pairs.count(((32, 5), (5, 64))) == 2, pairs


def test_the_stage_runs_in_a_recipe(tmp_path, minilm_dir, glue_dir):
    import json
    import os

    from compressor.core.models import load_for_task
    from compressor.recipe import run_recipe, validate_recipe

    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: tiny-lowrank
task: sst2
data: {{train_limit: 32, dev_limit: 16}}
teacher: {teacher}
device: cpu
stages:
  - lowrank: {{linears: ffn, energy: 0.6, only_if_smaller: false, max_length: 32,
               recover: {{mode: distill, train: {{epochs: 1, batch_size: 16}}}}}}
  - evaluate: {{split: dev}}
""")
    assert validate_recipe(str(recipe)) == []
    out = tmp_path / "run"
    manifest = run_recipe(str(recipe), str(out), data_dir=glue_dir, log=lambda m: None)
    stage = manifest["stages"][1]
    assert stage["dir"] == "01-lowrank"
    record = json.load(open(out / "01-lowrank" / "record.json"))
    assert record["lowrank"]["factorised"] == 4 and record["recovery"]["mode"] == "distill"
    assert json.load(open(out / "01-lowrank" / "compressor.json"))["shape"]["linear_rank"]
    assert manifest["stages"][2]["score"] == pytest.approx(record["score"])
    model, _ = load_for_task(str(out / "01-lowrank"))
    assert sum(isinstance(m, FactorisedLinear) for m in model.modules()) == 4
    assert os.path.exists(out / "01-lowrank" / "model.safetensors")


def test_the_command_writes_a_factorised_model_and_refuses_bad_settings(tmp_path, capsys, minilm_dir,
                                                                       glue_dir):
    import json

    from test_cli import assert_one_line_error, run_cli

    from compressor.cli import main
    from compressor.core.models import read_meta

    source = save_sst2_classifier(tmp_path / "model", minilm_dir)
    main(["lowrank", source, "--out", str(tmp_path / "low"), "--set", "linears=[query,key]",
          "--set", "rank=2", "--recover", "mode=none", "--data-dir", glue_dir,
          "--train-limit", "16", "--dev-limit", "16"])
    assert "factorised model:" in capsys.readouterr().out
    ranks = read_meta(str(tmp_path / "low"))["shape"]["linear_rank"]
    assert len(ranks) == 4 and set(ranks.values()) == {2}
    main(["lowrank", source, "--out", str(tmp_path / "measured"), "--set", "linears=ffn",
          "--set", "by=sensitivity", "--set", "importance_rows=16", "--set", "only_if_smaller=false", "--recover", "mode=none",
          "--data-dir", glue_dir, "--train-limit", "16", "--dev-limit", "16"])
    record = json.load(open(tmp_path / "measured" / "metrics.json"))["lowrank"]
    assert record["rule"] == "sensitivity" and all("divergence" in r for r in record["linears"])
    capsys.readouterr()   # the random model's at-chance note
    code, _, err = run_cli(capsys, "lowrank", source, "--out", str(tmp_path / "bad"),
                           "--set", "energy=2", "--data-dir", glue_dir)
    assert_one_line_error(code, err, "energy must be in (0, 1]")
    assert not (tmp_path / "bad").exists()


def test_pruning_heads_after_factorising_is_refused_in_one_line(tmp_path):
    """Stages in an impossible order: structured pruning would slice the factors as if dense."""
    import transformers

    from conftest import tiny_config
    from compressor.core.errors import CompressorError
    from compressor.lowrank import factorise_
    from compressor.lowrank.config import LowRankConfig
    from compressor.prune.structured import prune_structured

    model = transformers.BertForSequenceClassification(tiny_config("bert")).eval()
    factorise_(model, LowRankConfig(linears="ffn", rank=8))

    class Job:   # the part of a RecoveryJob that the check reads
        pass

    job = Job()
    job.model = model
    with pytest.raises(CompressorError, match="prune first, then factorise"):
        prune_structured(job, None)
