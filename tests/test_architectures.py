"""ELECTRA, XLM-RoBERTa, CamemBERT and ModernBERT through every step: the registry finds their
parts, then finetune -> distil -> export -> INT8 -> bench on tiny random models, each in seconds
(the bench harness builds each one's teacher, INT8 graph and ort-o2-int8 peer; the benchmark in
worker processes runs for ELECTRA alone: its processes do not depend on the architecture).
Other architectures are refused in one line."""
import copy
import os

import pytest
import torch
import transformers
from torch import nn

from compressor.core.arch import arch_of, uses_token_type_ids
from compressor.core.batches import collate, encode
from compressor.core.data import load_split
from compressor.distill import DistillConfig, distill
from compressor.core.errors import CompressorError
from compressor.core.models import count_parameters, load_for_task
from compressor.quantize import OrtDynamicConfig, quantize
from compressor.quantize.qat import prepare_qat, quantized_linears, strip_qat
from compressor.export.int8 import quantizable_units
from compressor.engine.train import TrainConfig, finetune
from conftest import NEW_ARCHS, tiny_config
from compressor.export import export_onnx
from compressor.export.onnx import example_texts
from compressor.export.runtime import Predictor

pytestmark = pytest.mark.e2e

QUICK = dict(epochs=1, batch_size=16, max_length=32, lr=1e-3, device="cpu")


def classifier(arch, layers=2):
    config = tiny_config(arch)
    config.vocab_size, config.num_labels, config.num_hidden_layers = 200, 2, layers
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def some_ids():
    ids = torch.randint(5, 200, (2, 20))
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def bases(tmp_path_factory, minilm_dir):
    """A saved base encoder per new architecture, with the MiniLM WordPiece tokenizer."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    root = tmp_path_factory.mktemp("new-archs")
    paths = {}
    for arch in NEW_ARCHS + ("albert",):
        config = transformers.AlbertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=64, embedding_size=16) \
            if arch == "albert" else tiny_config(arch)
        config.vocab_size = tokenizer.vocab_size
        torch.manual_seed(0)
        path = root / arch
        transformers.AutoModel.from_config(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[arch] = str(path)
    return paths


@pytest.mark.parametrize("arch", NEW_ARCHS)
def test_the_spec_finds_every_part(arch):
    model = classifier(arch)
    spec = arch_of(model)
    hidden, ffn = spec.hidden_size(model.config), spec.ffn_size(model.config)
    layers = spec.get_layers(model)
    assert len(layers) == spec.num_layers(model.config) == 2 and spec.num_heads(model.config) == 4
    x = torch.randn(3, hidden)
    for layer in layers:
        attn = spec.attention(layer)
        assert set(attn) == ({"qkv", "attention_output"} if arch == "modernbert"
                             else {"query", "key", "value", "attention_output"})
        # q, k and v the same way in both layouts: views of the weights, and the projections' outputs
        weights = spec.qkv_weights(layer)
        outputs = {}
        for linear, names in spec.qkv_projections(layer):
            outputs.update(zip(names, linear(x).chunk(len(names), -1)))
        for part in "qkv":
            w, b = weights[part]
            assert w.shape == (hidden, hidden)
            assert torch.allclose(x @ w.T + (b if b is not None else 0), outputs[part], atol=1e-6)
        parts = spec.ffn_weights(layer)
        assert parts["in"].shape == (ffn, hidden) and parts["out"].shape == (hidden, ffn)
        assert (parts["gate"] is not None) == (arch == "modernbert")
        assert spec.get_classifier(model) is not None
    norms = [spec.norms(layer)["attention_norm"] for layer in layers]
    # ModernBERT's first layer reads the embeddings' norm: it has none of its own
    assert [type(n) for n in norms] == ([nn.Identity, nn.LayerNorm] if arch == "modernbert"
                                        else [nn.LayerNorm] * 2)
    assert uses_token_type_ids(model.config) == (arch == "electra")
    assert spec.get_embeddings(model) is not None
    assert len(spec.get_layers(spec.base_model(model))) == 2
    # QAT fake-quantises the matrices ONNX Runtime quantises: 6 a layer, 4 with a fused qkv
    assert len(quantized_linears(model)) == (8 if arch == "modernbert" else 12)
    with torch.no_grad():
        prepare_qat(model)
        assert model(**some_ids()).logits.shape == (2, 2)
        strip_qat(model)


def test_electra_states_are_hidden_wide_though_its_embeddings_are_narrower():
    model = classifier("electra")
    assert model.config.embedding_size == 16 and model.config.hidden_size == 32
    with torch.no_grad():
        states = model(**some_ids(), output_hidden_states=True).hidden_states
    assert all(s.shape[-1] == 32 for s in states)


def test_modernbert_layers_cut_for_a_student_reload_as_they_ran(tmp_path):
    """A layer is global or local, and has an attention norm or not, by its position; a student
    of teacher layers 1 and 3 runs as it will after saving: layer 3 becomes local at position 2."""
    teacher = classifier("modernbert", layers=4)
    spec = arch_of(teacher)
    student = copy.deepcopy(teacher)
    spec.set_layers(student, nn.ModuleList(spec.get_layers(student)[i] for i in (0, 2)))
    assert student.config.num_hidden_layers == 2
    kept = spec.get_layers(student)[1]
    assert torch.equal(kept.attn.Wqkv.weight, spec.get_layers(teacher)[2].attn.Wqkv.weight)
    batch = some_ids()
    with torch.no_grad():
        before = student(**batch).logits
        student.save_pretrained(tmp_path / "s")
        after = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "s").eval()(
            **batch).logits
    assert torch.allclose(before, after, atol=1e-6)
    for keep in ((1, 2), (0, 0)):
        with pytest.raises(CompressorError, match="keeps layer 1 first, and only there") as err:
            spec.set_layers(copy.deepcopy(teacher),
                            nn.ModuleList(spec.get_layers(teacher)[i] for i in keep))
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("arch", NEW_ARCHS)
def test_finetune_distil_export_quantize_bench(arch, bases, glue_dir, tmp_path):
    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark

    teacher, student = str(tmp_path / "teacher"), str(tmp_path / "student")
    record = finetune(bases[arch], "sst2", teacher, data_dir=glue_dir, train_limit=64, dev_limit=32,
                      config=TrainConfig(**QUICK))
    assert record["steps"] > 0 and "accuracy" in record["metrics"]

    # a 1-layer student of the teacher's first layer, taught by its logits, hidden states,
    # attention probabilities and (MiniLM) query/key/value relations
    record = distill(teacher, student, data_dir=glue_dir, train_limit=64, dev_limit=32,
                     config=DistillConfig(train=QUICK), student={"kind": "layers", "num_layers": 1},
                     losses={"kd": 1.0, "hidden": 1.0, "attention": 1.0, "minilm": 1.0})
    assert record["student"]["teacher_layers"] == [1] and record["steps"] > 0
    assert record["parameters"] < record["teacher_parameters"]
    net, _ = load_for_task(student)
    assert net.config.model_type == arch and arch_of(net).num_layers(net.config) == 1
    assert count_parameters(net) == record["parameters"]

    onnx_dir = str(tmp_path / "onnx")
    manifest = export_onnx(student, onnx_dir, data_dir=glue_dir, parity_limit=32)
    assert manifest["exporter"] == "optimum" and manifest["model_type"] == arch
    assert ("token_type_ids" in manifest["inputs"]) == (arch == "electra")
    parity = manifest["parity"]
    assert parity["identical_predictions"] >= 0.99 and parity["max_abs_logit_diff"] < 1e-4
    fusions = manifest["optimization"]["fusions"]
    assert fusions.get("SkipLayerNormalization", 0) >= 1
    # ONNX Runtime has no fused Attention for ModernBERT's rotary positions
    assert ("Attention" in fusions) == (arch != "modernbert")

    # mixed precision ranks the matrices of each encoder layer together
    units = quantizable_units(os.path.join(onnx_dir, "model.onnx"), "layer")
    assert [u for u in units if "0" in u] == ["layer.0"], list(units)

    dev = load_split("sst2", "dev", glue_dir, limit=32)
    int8_dir = str(tmp_path / "int8")
    record = quantize(onnx_dir, int8_dir, OrtDynamicConfig(), dev_set=dev)
    assert os.path.getsize(os.path.join(int8_dir, "model.onnx")) < \
        os.path.getsize(os.path.join(onnx_dir, "model.onnx"))
    assert record["examples"] == 32 and record["score"] is not None
    fp32, int8 = (Predictor(d).logits(example_texts(dev.examples), batch_size=1)
                  for d in (onnx_dir, int8_dir))
    assert (fp32.argmax(-1) == int8.argmax(-1)).mean() >= 0.9

    # the bench harness builds this architecture's PyTorch teacher and INT8 graph as its workers
    # do (in-process here): they run and give the logits the model and the predictor give
    from compressor.bench.harness import Spec, build

    texts = example_texts(dev.examples)[:8]
    net, tokenizer = load_for_task(teacher)
    feed = collate(encode(tokenizer, dev.examples[:8], QUICK["max_length"], net.config),
                   tokenizer.pad_token_id or 0, False)
    with torch.no_grad():
        direct = net.eval()(**feed).logits.numpy()
    assert abs(build(Spec("teacher", teacher)).logits(texts) - direct).max() < 1e-4
    assert abs(build(Spec("int8", int8_dir, "onnxruntime")).logits(texts, batch_size=1) - int8[:8]).max() < 1e-4
    if arch != NEW_ARCHS[0]:   # the benchmark in worker processes (architecture-blind): ELECTRA's
        from compressor.bench.peers import peer_specs   # the ort-o2-int8 peer (optimum's O2 knows
                                                         # the model type) is built and runs here
        peer, = peer_specs(teacher, str(tmp_path / "peers"), ["ort-o2-int8"], preset="avx2")
        assert os.path.isfile(peer.path) and peer.size_bytes < \
            os.path.getsize(str(tmp_path / "peers" / "ort-fp32" / "model.onnx"))   # the teacher's plain export
        peer_logits = build(peer).logits(texts, batch_size=1)
        assert peer_logits.shape == (8, 2) and (peer_logits.argmax(-1) == direct.argmax(-1)).mean() >= 0.75
        return
    # the teacher is its one PyTorch worker (a second, the student's, would take seconds to start
    # and run the same code: both are checkpoints of this architecture)
    doc = run_benchmark([f"int8={int8_dir}"], teacher=teacher,
                        peers=["ort-o2-int8"], preset="avx2", dev=dev, work_dir=str(tmp_path / "peers"),
                        config=BenchConfig(sentences=6, warmup=1, threads=[1], batch_sizes=[4],
                                           throughput_batches=1, memory=False), log=lambda m: None)
    rows = {(r["name"], r["batch_size"]): r for r in doc["rows"]}
    assert {name for name, _ in rows} == {"teacher", "int8", "ort-o2-int8"}
    assert rows[("ort-o2-int8", 1)]["extra"]["group"] == "peer" and rows[("int8", 1)]["extra"]["group"] != "peer"
    for (name, batch), row in rows.items():
        assert row["value"] is not None
        assert row["latency_ms"]["p50"] > 0 if batch == 1 else row["throughput"] > 0
    assert rows[("int8", 1)]["size_bytes"] < os.path.getsize(os.path.join(onnx_dir, "model.onnx"))


def test_modernbert_student_from_later_layers_is_refused_in_one_line(bases, glue_dir, tmp_path):
    teacher = str(tmp_path / "teacher")
    finetune(bases["modernbert"], "sst2", teacher, data_dir=glue_dir, train_limit=16, dev_limit=16,
             config=TrainConfig(**QUICK))
    with pytest.raises(CompressorError, match="keeps layer 1 first, and only there") as err:
        distill(teacher, str(tmp_path / "s"), data_dir=glue_dir, train_limit=16, dev_limit=16,
                config=DistillConfig(train=QUICK), student={"kind": "layers", "num_layers": 1, "pick": "last"})
    assert "\n" not in str(err.value)
    assert not os.path.exists(tmp_path / "s")


def test_other_architectures_keep_the_one_line_error(bases, glue_dir, tmp_path):
    for step in (lambda: finetune(bases["albert"], "sst2", str(tmp_path / "ft"), data_dir=glue_dir,
                                  train_limit=16, dev_limit=16, config=TrainConfig(**QUICK)),
                 lambda: export_onnx(bases["albert"], str(tmp_path / "onnx"), task="sst2"),
                 lambda: arch_of(transformers.DebertaV2Config())):
        with pytest.raises(CompressorError, match=r"architecture '(albert|deberta-v2)' is not "
                                                  r"supported yet; supported: .*modernbert") as err:
            step()
        assert "\n" not in str(err.value)
    assert not os.path.exists(tmp_path / "ft") and not os.path.exists(tmp_path / "onnx")
