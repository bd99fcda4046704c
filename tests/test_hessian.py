"""Q-BERT's Hessian sensitivity (quantize/hessian.py): power iteration and Hutchinson against Hessians
known exactly, its units against the ONNX graph's, and the order it gives mixed precision."""
import os

import pytest
import torch
import transformers

from compressor.core.data import get_task, load_split
from compressor.core.models import checkpoint_meta, save_checkpoint
from compressor.quantize import OrtMixedConfig, quantize
from compressor.quantize import hessian

from conftest import tiny_config

pytestmark = pytest.mark.integration


def _linear_mse(d=6, k=2, n=40, seed=0):
    """y = W x with loss mean ||W x - t||^2: the Hessian in vec(W) (rows of W in turn) is
    I_k (x) 2 X^T X / n, whatever W is."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * torch.linspace(0.5, 2.0, d)   # unequal directions
    t = torch.randn(n, k, generator=g)
    w = torch.nn.Parameter(torch.randn(k, d, generator=g))
    loss = ((x @ w.T - t) ** 2).sum(dim=1).mean()
    return w, loss, 2 * torch.kron(torch.eye(k), x.T @ x / n)


@pytest.mark.unit
def test_power_iteration_finds_the_top_eigenvalue_of_a_known_quadratic():
    w, loss, exact = _linear_mse()
    grads = torch.autograd.grad(loss, [w], create_graph=True)
    top = float(torch.linalg.eigvalsh(exact).max())
    found = hessian.top_eigenvalue(grads, [w], iterations=200, tol=1e-8,
                                   generator=torch.Generator().manual_seed(1))
    assert found["eigenvalue"] == pytest.approx(top, rel=1e-4)
    assert found["converged"] and found["iterations"] < 200
    capped = hessian.top_eigenvalue(grads, [w], iterations=2, tol=0.0, generator=torch.Generator().manual_seed(1))
    assert capped["iterations"] == 2 and not capped["converged"]   # the fixed count is a cap


@pytest.mark.unit
def test_hutchinson_traces_each_block_close_to_the_exact_traces():
    """Two Linears in a row (cross terms between them in the Hessian): each block's trace against
    the blocks of the Hessian computed in full."""
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(30, 4, generator=g), torch.randn(30, 3, generator=g)
    w1 = torch.nn.Parameter(torch.randn(5, 4, generator=g) * 0.7)
    w2 = torch.nn.Parameter(torch.randn(3, 5, generator=g) * 0.7)

    def loss_of(a, b):
        return ((torch.tanh(x @ a.T) @ b.T - t) ** 2).sum(dim=1).mean()

    full = torch.autograd.functional.hessian(loss_of, (w1.detach(), w2.detach()))
    blocks = {"one": full[0][0].reshape(20, 20), "two": full[1][1].reshape(15, 15)}
    grads = torch.autograd.grad(loss_of(w1, w2), [w1, w2], create_graph=True)
    samples = 1000
    for i, (name, w) in enumerate((("one", w1), ("two", w2))):
        block = blocks[name]
        found = hessian.hutchinson_trace(grads[i:i + 1], [w], samples=samples,
                                         generator=torch.Generator().manual_seed(2))
        # Rademacher vectors: the variance of one sample is 2 * the off-diagonal entries squared
        std = float((2 * (block - torch.diag(block.diag())).pow(2).sum() / samples).sqrt())
        assert abs(found - float(block.trace())) <= 4 * std + 1e-6, (name, found, float(block.trace()), std)
    assert abs(found - float(blocks["two"].trace())) <= 0.05 * float(blocks["two"].trace())
    # and the block's top eigenvalue, with the other block's weights left alone
    values = torch.linalg.eigvalsh(blocks["two"])
    top = float(values[values.abs().argmax()])   # power iteration finds the largest in magnitude
    found = hessian.top_eigenvalue(grads[1:], [w2], iterations=300, tol=1e-9,
                                   generator=torch.Generator().manual_seed(3))
    assert found["eigenvalue"] == pytest.approx(top, rel=1e-3)


@pytest.mark.unit
def test_int8_weight_error_follows_the_preset():
    from compressor.core.presets import resolve_preset

    w = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
    w[0, 0] = 8.0   # one outlier: per-tensor scales every row by it
    vnni, avx2 = resolve_preset("avx512_vnni"), resolve_preset("avx2")
    per_tensor = resolve_preset("avx512_vnni", per_channel=False)
    assert hessian.quantisation_error(w, vnni) < hessian.quantisation_error(w, per_tensor)
    assert hessian.quantisation_error(w, vnni) < hessian.quantisation_error(w, avx2)   # 7-bit weights
    assert hessian.quantisation_error(torch.zeros(4, 4), vnni) == 0.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    """A tiny random BERT SST-2 classifier checkpoint and its ONNX export."""
    from compressor.export import export_onnx

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(20)
    root = tmp_path_factory.mktemp("hessian")
    ckpt = str(root / "ckpt")
    save_checkpoint(model, tokenizer, ckpt, checkpoint_meta(get_task("sst2"), 64, "test"))
    onnx_dir = str(root / "onnx")
    export_onnx(ckpt, onnx_dir, parity=False)
    return {"ckpt": ckpt, "onnx": onnx_dir}


@pytest.fixture(scope="module")
def dev(glue_dir):
    return load_split("sst2", "dev", glue_dir, limit=24)


def test_every_unit_of_the_graph_has_its_weights_and_a_score(tiny, dev):
    from compressor.core.models import load_for_task
    from compressor.core.presets import resolve_preset
    from compressor.export.int8 import quantizable_units

    net, tokenizer = load_for_task(tiny["ckpt"], dev.task, attn_implementation="eager")
    for granularity, per_layer in (("matrix", 4), ("layer", 1)):
        units = quantizable_units(os.path.join(tiny["onnx"], "model.onnx"), granularity)
        params = hessian.unit_parameters(net, list(units))
        assert set(params) == set(units)
        assert sum(len(ps) for n, ps in params.items() if n != "embeddings") == 2 * 6   # q, k, v, o, in, out
        assert len([n for n in units if n.startswith("layer.0")]) == per_layer
    units = quantizable_units(os.path.join(tiny["onnx"], "model.onnx"), "matrix")
    report = hessian.hessian_sensitivity(net, tokenizer, dev, list(units), resolve_preset("avx2"), rows=16,
                                         batch_size=8, iterations=2, trace_samples=1, score="weighted_trace")
    assert report["batches"] == 2 and report["examples"] == 16 and report["split"] == "dev"
    scores = [u["score"] for u in report["units"]]
    assert scores == sorted(scores, reverse=True) and {u["unit"] for u in report["units"]} == set(units)
    qkv = next(u for u in report["units"] if u["unit"] == "layer.0.attention.qkv")
    assert qkv["parameters"] == 3 * 32 * 32 and len(qkv["eigenvalues"]) == 2
    assert qkv["qbert"] == pytest.approx(abs(qkv["eigenvalue_mean"]) + qkv["eigenvalue_std"])
    assert all(p.requires_grad for p in net.parameters())   # left as it was
    again = hessian.hessian_sensitivity(net, tokenizer, dev, list(units), rows=16, batch_size=8, iterations=2,
                                        trace_samples=1)
    first = {u["unit"]: u["eigenvalues"] for u in report["units"]}
    assert {u["unit"]: u["eigenvalues"] for u in again["units"]} == first   # seeded: the same rows and vectors


@pytest.mark.parametrize("source", ["ckpt", "onnx"])
def test_mixed_precision_ordered_by_the_hessian(tiny, dev, tmp_path, source):
    """sensitivity: hessian keeps units FP32 in the Hessian's order, from a checkpoint or from an export
    folder (whose manifest names the checkpoint); the choice and the record say which measure."""
    config = OrtMixedConfig(max_drop=0.0, granularity="matrix", sensitivity="hessian", hessian_rows=8,
                            hessian_batch_size=4, hessian_iterations=4, hessian_trace_samples=1)
    record = quantize(tiny[source], str(tmp_path / "mixed"), config, dev_set=dev)
    search = record["search"]
    assert record["config"]["sensitivity"] == "hessian" and search["sensitivity_measure"] == "hessian"
    order = [u["unit"] for u in search["sensitivity"]["units"]]
    assert search["sensitivity"]["measure"] == "hessian" and len(order) == 1 + 2 * 4
    for step in search["mixed"]["tried"]:
        assert step["fp32_units"] == order[:len(step["fp32_units"])]
    assert "Q-BERT" in open(tmp_path / "mixed" / "sensitivity.md").read()
