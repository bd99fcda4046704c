"""Padding-free batches (issue 33, item 1): rows grouped by token count give the predictions and
logits of padded batches (within float rounding), in input order; batch 1 is unchanged."""
import numpy as np
import pytest
import torch
import transformers

from conftest import save_sst2_classifier, tiny_config

pytestmark = pytest.mark.integration

LENGTHS = [5, 40, 3, 17, 17, 60, 2, 9, 33, 8, 12, 1, 70]
PAIRS = [("a short one", "and its pair"),
         ("a much longer premise that goes on for quite a few words before it ends", "short"),
         ("x", "the hypothesis is the longer text here, by a good many words in all")]


def _texts(n=40):
    """Sentences of very different lengths, in no length order."""
    words = "the film was good and long but the ending felt flat and tired to me".split()
    return [" ".join(words[: 1 + (7 * i) % len(words)] * (1 + i % 4)) for i in range(n)]


@pytest.mark.unit
@pytest.mark.parametrize("batching", ["padded", "sorted", "bucketed"])
@pytest.mark.parametrize("batch_size", [1, 4, 32])
def test_the_two_grouping_rules_agree_and_cover_every_row_once(batching, batch_size):
    from compressor.core.batches import length_groups
    from compressor.export.runtime import batch_groups

    assert length_groups is batch_groups   # one rule for the PyTorch and the ONNX paths
    groups = batch_groups(LENGTHS, batch_size, batching, window=2)
    assert groups == length_groups(LENGTHS, batch_size, batching, window=2)
    assert sorted(i for g in groups for i in g) == list(range(len(LENGTHS)))
    assert all(len(g) == batch_size for g in groups[:-1])
    if batch_size == 1 or batching == "padded":   # batch 1: input order, whatever the way
        assert [i for g in groups for i in g] == list(range(len(LENGTHS)))
    if batching == "sorted" and batch_size > 1:
        flat = [LENGTHS[i] for g in groups for i in g]
        assert flat == sorted(flat)


@pytest.mark.unit
def test_sorted_batches_compute_less_padding_and_bucketed_sorts_within_windows():
    from compressor.export.runtime import batch_groups

    def padded_tokens(groups):
        return sum(len(g) * max(LENGTHS[i] for i in g) for g in groups)

    padded, sorted_ = batch_groups(LENGTHS, 4, "padded"), batch_groups(LENGTHS, 4, "sorted")
    assert padded_tokens(sorted_) < padded_tokens(padded)
    bucketed = batch_groups(LENGTHS, 2, "bucketed", window=2)   # windows of 4 rows
    assert sorted(bucketed[0] + bucketed[1]) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="batching"):
        batch_groups(LENGTHS, 4, "packed")


def test_pytorch_padded_and_sorted_batches_give_one_set_of_logits_in_input_order(minilm_dir):
    from compressor.core.data import Example
    from compressor.engine.scoring import predict_logits

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config("mpnet")   # relative positions: padding must not leak into them either
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    examples = [Example((t,), 0, str(i)) for i, t in enumerate(_texts())]
    examples += [Example(p, 0, f"p{i}") for i, p in enumerate(PAIRS)]
    one = predict_logits(model, tokenizer, examples, 64, batch_size=1)
    for batching in ("padded", "sorted", "bucketed"):
        many = predict_logits(model, tokenizer, examples, 64, batch_size=8, batching=batching)
        np.testing.assert_allclose(many, one, atol=1e-5)   # row i is row i: the order restored
        assert (many.argmax(-1) == one.argmax(-1)).all()
    assert (predict_logits(model, tokenizer, examples, 64, batch_size=1, batching="padded") == one).all()


@pytest.fixture(scope="module")
def exports(tmp_path_factory, minilm_dir):
    """A tiny random BERT SST-2 classifier's FP32 export and its dynamic INT8 graph."""
    from compressor.export.onnx import export_onnx
    from compressor.quantize import OrtDynamicConfig, quantize

    root = tmp_path_factory.mktemp("padding-free")
    ckpt = save_sst2_classifier(root / "ckpt", minilm_dir)
    fp32, int8 = str(root / "fp32"), str(root / "int8")
    export_onnx(ckpt, fp32, data_dir="embedded", parity_limit=16)
    quantize(fp32, int8, OrtDynamicConfig(preset="auto"), data_dir="embedded")
    return fp32, int8


def test_onnx_padded_sorted_and_bucketed_batches_give_the_same_logits_in_input_order(exports):
    from compressor.export.runtime import Predictor

    p = Predictor(exports[0], threads=1)
    texts = _texts() + PAIRS
    one = p.logits(texts, batch_size=1)
    assert np.array_equal(one, p.logits(texts, batch_size=1, batching="sorted"))   # batch 1 unchanged
    assert np.array_equal(one[3], p.logits([texts[3]], batch_size=32)[0])
    for batching in ("padded", "sorted", "bucketed"):
        many = p.logits(texts, batch_size=8, batching=batching)
        np.testing.assert_allclose(many, one, atol=1e-5)
        assert p.predict(texts, batch_size=8, batching=batching) == p.predict(texts, batch_size=1)
    feeds = p.feeds(texts, batch_size=8, batching="sorted")
    widths = [f["input_ids"].shape[1] for _, f in feeds]
    assert widths == sorted(widths) and sorted(i for idx, _ in feeds for i in idx) == list(range(len(texts)))


def test_dynamic_int8_logits_depend_on_the_batch_so_it_is_scored_one_row_at_a_time(exports):
    """ORT's dynamic INT8 takes each activation's range over the whole batch, padded positions
    included: a row's logits move with the rows beside it. Scoring (``score_onnx``) runs one row
    at a time, which no batching changes."""
    from compressor.export.runtime import Predictor

    p = Predictor(exports[1], threads=1)
    texts = _texts()
    one = p.logits(texts, batch_size=1)
    assert np.array_equal(one, p.logits(texts, batch_size=1, batching="sorted"))
    padded = p.logits(texts, batch_size=8, batching="padded")
    assert np.abs(padded - one).max() > 1e-4          # batch composition shows in the logits


def test_the_bench_worker_times_padding_free_batches_of_the_same_rows(exports):
    from compressor.bench.harness import throughput_fields
    from compressor.bench.worker import _Session

    s = _Session()
    s.build({"name": "fp32", "path": exports[0], "engine": "onnxruntime"}, threads=1)
    texts = _texts(16)
    padded = s.feeds_op("p", texts, batch_size=8, batching="padded")
    free = s.feeds_op("s", texts, batch_size=8, batching="sorted")
    assert padded["rows"] == [list(range(8)), list(range(8, 16))]
    assert sorted(free["rows"][0] + free["rows"][1]) == list(range(16))
    assert free["padded_tokens"] < padded["padded_tokens"] and free["tokens"] == padded["tokens"]
    out = s.time_op("s", [0, 1], outputs=True)
    assert len(out["times"]) == 2 and len(out["outputs"][0]) == 8
    fields = throughput_fields({"padded": 100.0, "sorted": 150.0}, {"padded": 0.4, "sorted": 0.02})
    assert fields["throughput"] == 100.0 and fields["batching"] == "padded"
    assert fields["padding_free_speedup"] == 1.5


def test_the_benchmark_times_padded_and_padding_free_batches_side_by_side(exports):
    from compressor.bench.harness import BenchConfig, Spec, benchmark
    from compressor.core.data import load_split

    dev = load_split("sst2", "dev", data_dir="embedded", limit=40)
    config = BenchConfig(sentences=4, warmup=1, batch_sizes=[8], throughput_batches=3, score=False,
                         memory=False, pause_s=0.0, batching=["padded", "sorted"])
    rows = benchmark([Spec("fp32", exports[0], "onnxruntime")], dev.task, dev, config, log=lambda m: None)
    row = next(r for r in rows if r["batch_size"] == 8)
    assert row["batching"] == "padded" and row["throughput"] == row["throughput_by_batching"]["padded"]
    assert row["throughput_by_batching"]["sorted"] > 0 and row["padding_free_speedup"] > 0
    assert row["padding_share"]["sorted"] < row["padding_share"]["padded"]


@pytest.mark.unit
def test_the_bench_command_reads_its_batching_list():
    import click

    from compressor.cli.bench import _batching

    assert _batching("padded,sorted") == ["padded", "sorted"]
    for bad in ("packed", "sorted,sorted", "none"):
        with pytest.raises(click.BadParameter, match="--batching|padded"):
            _batching(bad)
