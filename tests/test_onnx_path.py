"""One ONNX path: every stage that runs a graph runs it through ``compressor.export.runtime.Predictor``,
so one graph has one score wherever it is reported."""
import ast
import json
import os

import numpy as np
import pytest
import torch
import transformers

from conftest import tiny_config
from compressor.core.data import get_task, load_split
from compressor.core.models import checkpoint_meta, save_checkpoint

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PACKAGES = ("compressor", "bench")   # the library, and the studies in bench/experiments
ROWS = 128


@pytest.fixture(scope="module")
def dev():
    return load_split("sst2", "dev", data_dir="embedded", limit=ROWS)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, minilm_dir, dev):
    """A tiny random BERT SST-2 classifier with half the dev rows near its decision boundary,
    so that how a graph is run (padding, say) shows in its score."""
    from compressor.engine.scoring import predict_logits

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    config = tiny_config("bert")
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(20)
        logits = predict_logits(model, tokenizer, dev.examples, 64, batch_size=1)
        model.classifier.bias[1] -= float(np.median(logits[:, 1] - logits[:, 0]))
    path = str(tmp_path_factory.mktemp("onnx-path") / "teacher")
    save_checkpoint(model, tokenizer, path, checkpoint_meta(get_task("sst2"), 64, "test"))
    return path


def test_the_quantize_stage_the_benchmark_and_score_onnx_give_one_score(teacher, dev, tmp_path):
    from compressor.quantize import OrtMixedConfig, quantize
    from compressor.recipe import run_recipe
    from compressor.core.results import read_results
    from compressor.export.onnx import example_texts, score_onnx
    from compressor.export.runtime import Predictor

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""name: one-score
task: sst2
data: {{dir: embedded, dev_limit: {ROWS}}}
teacher: {teacher}
stages:
  - export: {{parity: false}}
  - quantize: {{method: dynamic, preset: auto}}
  - bench: {{sentences: 4, batch_sizes: [2], throughput_batches: 1, peers: [], memory: false}}
""")
    out = str(tmp_path / "run")
    manifest = run_recipe(str(recipe), out, log=lambda m: None)
    assert [s["dir"] for s in manifest["stages"]] == ["00-teacher", "01-export", "02-quantize", "03-bench"]
    stage = json.load(open(os.path.join(out, "02-quantize", "record.json")))
    bench = {r["name"]: r for r in read_results(os.path.join(out, "03-bench", "results.json"))["rows"]
             if r["batch_size"] == 1}
    int8 = os.path.join(out, "02-quantize")
    direct = score_onnx(int8, dev)
    # the INT8 graph's predictions depend on how it is run: padded batches would have scored otherwise
    one, padded = (Predictor(int8).logits(example_texts(dev.examples), batch_size=b) for b in (1, 32))
    assert (one.argmax(-1) != padded.argmax(-1)).any()
    assert stage["metrics"] == bench["02-quantize"]["extra"]["metrics"] == direct
    assert stage["score"] == bench["02-quantize"]["value"] == manifest["stages"][2]["score"]
    export_record = json.load(open(os.path.join(out, "01-export", "record.json")))
    assert export_record["metrics"] == bench["01-export"]["extra"]["metrics"]

    # the sensitivity search scores its every-unit-INT8 graph on the same path: the same graph,
    # quantised the same way, scores what the quantize stage recorded
    mixed = quantize(os.path.join(out, "01-export"), str(tmp_path / "mixed"),
                     OrtMixedConfig(preset="auto", max_drop=100.0, min_agreement=0.0), dev_set=dev)
    assert mixed["search"]["sensitivity"]["all_int8_score"] == stage["score"]
    assert mixed["metrics"] == stage["metrics"]

    # labelling a file gives the labels the scores were computed from, with or without --onnx
    from compressor.cli import main

    sentences = tmp_path / "sentences.tsv"
    sentences.write_text("sentence\n" + "".join(e.texts[0] + "\n" for e in dev.examples))
    names = get_task("sst2").label_names   # predict writes the classes as people read them
    labels = [names[i] for i in one.argmax(-1)]
    for flag in (["--onnx"], []):
        written = tmp_path / f"labels{len(flag)}.tsv"
        main(["predict", int8, "--input", str(sentences), "--output", str(written),
              "--text-column", "sentence"] + flag)
        rows = [line.split("\t")[1] for line in written.read_text().splitlines()[1:]]
        assert rows == labels, flag


def _uses(tree: ast.AST, name: str):
    """(line, enclosing class) of every mention of ``name`` as a name, attribute or import."""
    found = []

    def visit(node, cls):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            hit = (isinstance(child, ast.Name) and child.id == name) or \
                (isinstance(child, ast.Attribute) and child.attr == name) or \
                (isinstance(child, (ast.Import, ast.ImportFrom)) and
                 any(a.name.split(".")[-1] == name for a in child.names))
            if hit:
                found.append((child.lineno, cls))
            visit(child, inner)

    visit(tree, None)
    return found


def test_only_the_predictor_makes_onnxruntime_sessions():
    """A graph run anywhere else would be tokenised, batched or configured its own way."""
    stray = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                tree = ast.parse(open(path).read(), rel)
                for line, cls in _uses(tree, "InferenceSession"):
                    if not (rel == os.path.join("compressor", "export", "runtime.py") and cls == "Predictor"):
                        stray.append(f"{rel}:{line}")
    assert stray == [], "onnxruntime sessions outside compressor.export.runtime.Predictor: " + ", ".join(stray)


def test_a_session_without_a_thread_count_takes_omp_num_threads(teacher, tmp_path, monkeypatch):
    """Several jobs on one machine each cap their sessions with OMP_NUM_THREADS (onnxruntime's own
    default is every core); an explicit thread count still wins."""
    from compressor.export.onnx import export_onnx
    from compressor.export.runtime import Predictor

    folder = str(tmp_path / "onnx")
    export_onnx(teacher, folder)
    teacher = folder
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert Predictor(teacher).session.get_session_options().intra_op_num_threads == 1
    assert Predictor(teacher, threads=2).session.get_session_options().intra_op_num_threads == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "not-a-number")
    assert Predictor(teacher).session.get_session_options().intra_op_num_threads == 0   # onnxruntime's default
