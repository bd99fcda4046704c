"""Vocabulary pruning: fewer embedding rows, a tokenizer renumbered to match, the same logits."""
import copy
from dataclasses import replace
import json

import numpy as np
import pytest
import torch
import transformers

from compressor.core.arch import uses_token_type_ids
from compressor.core.data import get_task, load_split
from compressor.core.errors import CompressorError
from compressor.core.models import checkpoint_meta, load_for_task, save_checkpoint
from compressor.prune.configs import RecoverSettings, VocabPruneConfig, pruner_for
from compressor.engine.job import RecoveryJob
from compressor.engine.teacher import frozen_copy

from conftest import tiny_config

pytestmark = pytest.mark.unit

TRAIN_ROWS, DEV_ROWS = 2000, 120


@pytest.fixture(scope="module")
def sst2(glue_dir):
    return (load_split("sst2", "train", glue_dir, limit=TRAIN_ROWS),
            load_split("sst2", "dev", glue_dir, limit=DEV_ROWS))


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


def classifier(arch: str, tokenizer):
    config = tiny_config(arch)
    config.vocab_size, config.num_labels = len(tokenizer), 2
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config).eval()


def make_job(model, tokenizer, sst2, **settings):
    config = VocabPruneConfig(**settings)
    config.check()
    train, dev = sst2
    return RecoveryJob(model=model, tokenizer=tokenizer, train_set=train, dev_set=dev, config=config,
                    device=torch.device("cpu"))


def run(job):
    return pruner_for(job.config)(job, job.config)


def logits(model, tokenizer, texts):
    enc = tokenizer(list(texts), padding=True, return_tensors="pt",
                    return_token_type_ids=uses_token_type_ids(model.config))
    with torch.no_grad():
        return model(**enc).logits


def ids(tokenizer, text):
    return tokenizer(text)["input_ids"]


@pytest.fixture(scope="module")
def pruned(tokenizer, sst2, tmp_path_factory):
    """The tiny BERT classifier before and after pruning on the SST-2 slice (one corpus file)."""
    corpus = tmp_path_factory.mktemp("corpus") / "extra.txt"
    corpus.write_text("a boxer in a box\n\nsingers sing\n")
    model = classifier("bert", tokenizer)
    before = copy.deepcopy(model)
    job = make_job(model, tokenizer, sst2, corpus=[str(corpus)])
    record = run(job)
    return before, job, record


def kept_texts(tokenizer, new_tokenizer, texts):
    """Texts all of whose pieces the pruned tokenizer still has."""
    vocab = new_tokenizer.get_vocab()
    return [t for t in texts if all(p in vocab for p in tokenizer.tokenize(t))]


def one_line_error(excinfo):
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


# -- the model and its logits ---------------------------------------------

@pytest.mark.parametrize("arch", ["bert", "distilbert", "mpnet", "roberta"])
def test_logits_unchanged_on_kept_pieces(arch, tokenizer, sst2):
    model = classifier(arch, tokenizer)
    before = copy.deepcopy(model)
    job = make_job(model, tokenizer, sst2)
    record = run(job)
    new_tok = job.tokenizer
    assert new_tok is not tokenizer and job.model.config.vocab_size == len(new_tok)
    assert job.model.get_input_embeddings().num_embeddings == len(new_tok) == record["pieces_after"]
    assert record["pieces_before"] == len(tokenizer) and record["pieces_after"] < len(tokenizer) / 4
    # every training sentence keeps its pieces; dev sentences made of kept pieces too
    train_texts = [ex.texts[0] for ex in sst2[0].examples[:24]]
    dev_texts = kept_texts(tokenizer, new_tok, [ex.texts[0] for ex in sst2[1].examples])
    assert len(dev_texts) >= 8
    texts = train_texts + dev_texts[:16]
    old_vocab, new_vocab = tokenizer.get_vocab(), new_tok.get_vocab()
    for text in texts:
        old = ids(tokenizer, text)
        new = ids(new_tok, text)
        assert new_tok.convert_ids_to_tokens(new) == tokenizer.convert_ids_to_tokens(old)
        assert max(new) < len(new_tok)
    # the special ids the model config names (pad; RoBERTa's bos and eos) follow their pieces
    named = {k: v for k, v in before.config.to_dict().items()
             if k.endswith("_token_id") and isinstance(v, int)}
    assert named.get("pad_token_id") == 0 and (arch != "roberta" or named["bos_token_id"] == 101)
    for key, old_id in named.items():
        new_id = getattr(job.model.config, key)
        assert new_tok.convert_ids_to_tokens(new_id) == tokenizer.convert_ids_to_tokens(old_id), key
    assert arch != "roberta" or job.model.config.bos_token_id == new_vocab["[CLS]"] < 101
    # padded batches of mixed lengths: the pad id and positions behave as before
    expected = logits(before, tokenizer, texts)
    got = logits(job.model, new_tok, texts)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    # each piece's row moved with it
    old_rows, new_rows = before.get_input_embeddings().weight, job.model.get_input_embeddings().weight
    for piece in ("[PAD]", "[CLS]", "the", "film", "##s"):
        assert torch.equal(new_rows[new_vocab[piece]], old_rows[old_vocab[piece]])


def test_record(pruned, tokenizer, sst2):
    before, job, record = pruned
    dim = before.config.hidden_size
    assert record["embedding_parameters_before"] == len(tokenizer) * dim
    assert record["embedding_parameters_after"] == record["pieces_after"] * dim
    assert record["dev_sentences"] == DEV_ROWS
    # which dev sentences hold a piece the pruned tokenizer lacks, counted here independently
    vocab = job.tokenizer.get_vocab()
    held = [any(p not in vocab for p in tokenizer.tokenize(ex.texts[0])) for ex in sst2[1].examples]
    assert record["dev_share_with_dropped_piece"] == pytest.approx(np.mean(held), abs=1e-6)
    assert 0 < record["dev_share_with_new_unknown"] <= record["dev_share_with_dropped_piece"] < 1
    top = record["top_dropped_in_dev"]
    assert len(top) == 10 and [n for _, n in top] == sorted((n for _, n in top), reverse=True)
    dev_pieces = [p for ex in sst2[1].examples for p in tokenizer.tokenize(ex.texts[0])]
    for piece, n in top:
        assert piece not in vocab and dev_pieces.count(piece) == n
    assert record["corpus"] and record["min_count"] == 1


def test_corpus_and_specials_kept(pruned, tokenizer, sst2):
    _, job, _ = pruned
    vocab = job.tokenizer.get_vocab()
    train_pieces = {p for ex in sst2[0].examples for p in tokenizer.tokenize(ex.texts[0])}
    assert "boxer" not in train_pieces and "singers" not in train_pieces   # only the corpus has them
    assert {"boxer", "box", "singers", "sing"} <= set(vocab)
    assert train_pieces <= set(vocab)
    for special in tokenizer.all_special_tokens:
        assert special in vocab
    # in the original order: ids rise with the old ids
    kept = sorted(vocab, key=vocab.get)
    assert [tokenizer.convert_tokens_to_ids(p) for p in kept] == sorted(
        tokenizer.convert_tokens_to_ids(p) for p in kept)
    assert list(vocab.values()) and sorted(vocab.values()) == list(range(len(vocab)))


def test_min_count_keeps_fewer(tokenizer, sst2, pruned):
    _, job, record = pruned
    job2 = make_job(classifier("bert", tokenizer), tokenizer, sst2, min_count=3)
    record2 = run(job2)
    assert record2["pieces_after"] < record["pieces_after"]
    counts = {}
    for ex in sst2[0].examples:
        for p in tokenizer.tokenize(ex.texts[0]):
            counts[p] = counts.get(p, 0) + 1
    specials = set(tokenizer.all_special_tokens)
    kept = set(job2.tokenizer.get_vocab())
    assert {p for p, n in counts.items() if n >= 3} <= kept
    assert all(counts.get(p, 0) >= 3 for p in kept - specials)


# -- the tokenizer -----------------------------------------------------------

def test_dropped_pieces(pruned, tokenizer):
    _, job, _ = pruned
    new_tok, vocab = job.tokenizer, job.tokenizer.get_vocab()
    # a piece no text used: the word, which has no other split from kept pieces, is [UNK]
    text = "the film ω was fine"
    assert tokenizer.tokenize(text)[2] == "ω" and "ω" not in vocab
    assert new_tok.tokenize(text) == ["the", "film", "[UNK]", "was", "fine"]
    assert ids(new_tok, text)[3] == new_tok.unk_token_id == vocab["[UNK]"]
    assert tokenizer.unk_token_id not in ids(tokenizer, text)
    # a dropped word whose parts were kept is split into them, as WordPiece splits any new word
    assert tokenizer.tokenize("boxing") == ["boxing"] and "boxing" not in vocab
    assert new_tok.tokenize("boxing") == ["box", "##ing"]
    assert new_tok.decode(ids(new_tok, "the boxer sings"), skip_special_tokens=True) == \
        "the boxer sings"


def test_save_and_load_again(pruned, tokenizer, sst2, tmp_path):
    before, job, _ = pruned
    out = tmp_path / "pruned"
    task = get_task("sst2")
    save_checkpoint(job.model, job.tokenizer, str(out), checkpoint_meta(task, 64, "prune"))
    model, new_tok = load_for_task(str(out), task)
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    slow = transformers.BertTokenizer.from_pretrained(str(out))   # reads vocab.txt only
    with open(out / "config.json") as f:
        assert json.load(f)["vocab_size"] == len(job.tokenizer)
    with open(out / "vocab.txt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == len(job.tokenizer)
    texts = [ex.texts[0] for ex in sst2[1].examples[:32]] + ["the film ω was boxing"]
    for text in texts:
        expected = ids(job.tokenizer, text)
        assert ids(new_tok, text) == ids(auto, text) == ids(slow, text) == expected
    torch.testing.assert_close(logits(model.eval(), new_tok, texts),
                               logits(job.model, job.tokenizer, texts), atol=1e-6, rtol=0)
    # a dev sentence that lost a piece now reads differently from the unpruned model's view
    assert ids(new_tok, texts[-1]) != ids(tokenizer, texts[-1])


def test_onnx_export_runs_the_same(pruned, tmp_path, sst2):
    from compressor.export.onnx import export_onnx
    from compressor.export.runtime import Predictor

    _, job, _ = pruned
    task = get_task("sst2")
    ckpt, out = tmp_path / "pruned", tmp_path / "export"
    save_checkpoint(job.model, job.tokenizer, str(ckpt), checkpoint_meta(task, 64, "prune"))
    dev = sst2[1].examples[:40]
    manifest = export_onnx(str(ckpt), str(out), task="sst2", examples=dev)
    assert manifest["parity"]["identical_predictions"] == 1.0
    predictor = Predictor(str(out))
    texts = [ex.texts[0] for ex in dev] + ["the film ω was boxing"]
    for text in texts:
        assert predictor.tokenizer.encode(text).ids == ids(job.tokenizer, text)
    torch_logits = logits(job.model, job.tokenizer, texts).numpy()
    onnx_logits = predictor.logits(texts, batch_size=1)
    np.testing.assert_allclose(onnx_logits, torch_logits, atol=1e-4)
    labels = task.labels
    assert predictor.predict(texts) == [labels[i] for i in torch_logits.argmax(-1)]


# -- recovery ----------------------------------------------------------------

def test_distill_recovery_gives_the_teacher_its_own_tokenizer(tokenizer, sst2):
    model = classifier("bert", tokenizer)
    few = tuple(replace(split, examples=split.examples[:64]) for split in sst2)
    job = make_job(model, tokenizer, few,
                   recover=RecoverSettings(mode="distill", train={"max_steps": 2, "batch_size": 16,
                                                                   "device": "cpu"}))
    job.teacher = frozen_copy(model)
    record = run(job)
    assert job.teacher_tokenizer is tokenizer and job.tokenizer is not tokenizer
    assert record["recover"]["mode"] == "distill" and record["recover"]["steps"] == 2
    assert job.model.get_input_embeddings().num_embeddings == record["pieces_after"]


# -- refusals ----------------------------------------------------------------

def bpe_tokenizer(tmp_path):
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a gripping and funny film", "flat , lifeless and dull"] * 20,
                            vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(tmp_path))
    return transformers.RobertaTokenizerFast(vocab_file=str(tmp_path / "vocab.json"),
                                             merges_file=str(tmp_path / "merges.txt"))


def test_bpe_tokenizer_refused(tmp_path, sst2):
    tok = bpe_tokenizer(tmp_path)
    config = transformers.RobertaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64, vocab_size=len(tok), num_labels=2)
    model = transformers.RobertaForSequenceClassification(config).eval()
    job = make_job(model, tok, sst2)
    with pytest.raises(CompressorError) as excinfo:
        run(job)
    message = one_line_error(excinfo)
    assert "supports WordPiece tokenizers for now" in message and "BPE" in message
    assert job.tokenizer is tok and model.get_input_embeddings().num_embeddings == len(tok)


def test_missing_corpus_file(tokenizer, sst2, tmp_path):
    model = classifier("bert", tokenizer)
    good = tmp_path / "good.txt"
    good.write_text("fine\n")
    missing = tmp_path / "nowhere" / "corpus.txt"
    job = make_job(model, tokenizer, sst2, corpus=[str(good), str(missing)])
    with pytest.raises(CompressorError) as excinfo:
        run(job)
    assert str(missing) in one_line_error(excinfo)
    assert job.tokenizer is tokenizer and model.config.vocab_size == len(tokenizer)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)


def test_unreadable_corpus_file(tokenizer, sst2, tmp_path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    job = make_job(classifier("bert", tokenizer), tokenizer, sst2, corpus=[str(tmp_path), str(latin)])
    with pytest.raises(CompressorError) as excinfo:
        run(job)
    assert str(tmp_path) in one_line_error(excinfo)
    job.config.corpus = [str(latin)]
    with pytest.raises(CompressorError) as excinfo:
        run(job)
    assert str(latin) in one_line_error(excinfo) and "UTF-8" in str(excinfo.value)
