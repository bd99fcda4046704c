"""Vocabulary pruning: drop the word pieces the task's text never uses (embedding rows).

The word-embedding matrix of a small encoder is a large share of its weights (MiniLM-L6:
11.7M of 22.7M parameters), and a task's text uses only a few thousand of its 30k pieces.
This keeps the pieces the training text (and ``corpus`` files) use at least ``min_count``
times, plus every special or added token, and every id the model config names (pad, bos...).

The tokenizer keeps its WordPiece model, with only the kept pieces, renumbered
0..k-1 in their original order (so the embedding rows are ``weight[kept]``). WordPiece
splits a word greedily, longest known piece first; a smaller vocabulary whose pieces
include every piece of a word's split finds that same split, so text made of kept pieces
tokenises exactly as before and the model's logits on it do not change. A word that
used a dropped piece is split again from the kept ones (``playing`` -> ``play ##ing``)
and becomes ``[UNK]`` only where no such split exists, as any word outside a WordPiece
vocabulary does.

Why not keep every piece and point the dropped ones at ``[UNK]``'s id: HF ``tokenizers``
accepts a WordPiece vocab with several pieces on one id, but writes ``tokenizer.json``
from its id-to-piece table, one piece per id, so ``save_pretrained`` would silently lose
the dropped pieces and the saved tokenizer would split differently from the one in memory.
The tokenizer made here is a plain WordPiece tokenizer: ``tokenizer.json`` and
``vocab.txt`` agree, ``AutoTokenizer``, ``load_for_task`` and the torch-free ONNX runtime
read it as they read any other, and decoding works as before.
"""
from __future__ import annotations

import collections
import json
import os
import tempfile
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from compressor.core.errors import CompressorError
from compressor.prune.configs import VocabPruneConfig, register_pruner

TOP_DROPPED = 10        # dropped pieces the record lists, most frequent in the dev text first
_CHUNK = 4096           # lines tokenised at a time


@register_pruner(VocabPruneConfig)
def prune_vocab(job, config: VocabPruneConfig) -> dict:
    """Keep the word pieces the task uses: shrink the word embeddings and the tokenizer, then
    recover as ``config.recover`` says (none by default). Returns the record."""
    tokenizer, model = job.tokenizer, job.model
    spec = wordpiece_spec(tokenizer)
    corpus = [read_corpus(path) for path in config.corpus]     # every file read before anything changes
    embeddings = model.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding):
        raise CompressorError(f"vocabulary pruning needs the model's input embeddings as one "
                              f"nn.Embedding, not {type(embeddings).__name__}")
    if model.get_output_embeddings() is not None:
        raise CompressorError(f"vocabulary pruning works on task models; {type(model).__name__} "
                              "has a language-model head over the vocabulary")
    rows, size = embeddings.num_embeddings, len(tokenizer)    # len() of a fast tokenizer is slow
    if size > rows:
        raise CompressorError(f"the tokenizer has {size} pieces but the model's word "
                              f"embeddings only {rows} rows: they do not belong together")

    encoder = _plain_encoder(tokenizer)
    counts = np.zeros(rows, dtype=np.int64)
    _count(encoder, _texts(job.train_set.examples), counts)
    for lines in corpus:
        _count(encoder, lines, counts)
    always = set(_special_ids(tokenizer)) | set(_config_ids(model.config).values())
    always.add(tokenizer.convert_tokens_to_ids(spec["model"]["unk_token"]))   # WordPiece's own
    if embeddings.padding_idx is not None:
        always.add(int(embeddings.padding_idx))
    keep = np.flatnonzero(counts >= config.min_count).tolist()
    keep = sorted({i for i in keep if i < size} | {i for i in always if 0 <= i < size})
    new_id = {old: new for new, old in enumerate(keep)}

    new_tokenizer = pruned_tokenizer(tokenizer, spec, keep)
    record = {"method": "vocab", "min_count": config.min_count, "corpus": list(config.corpus),
              "pieces_before": size, "pieces_after": len(keep),
              "embedding_rows_before": rows, "embedding_rows_after": len(keep),
              "embedding_parameters_before": embeddings.weight.numel()}
    shrink_embeddings(model, keep, new_id)
    record["embedding_parameters_after"] = model.get_input_embeddings().weight.numel()
    record.update(dev_report(job.dev_set, encoder, _plain_encoder(new_tokenizer), tokenizer,
                             set(keep)))

    if job.teacher is not None and job.teacher_tokenizer is None:
        job.teacher_tokenizer = tokenizer      # the unpruned teacher reads the old ids
    job.model, job.tokenizer = model, new_tokenizer
    recovery = job.recover(desc="recover vocab")
    if recovery is not None:
        record["recover"] = {k: v for k, v in recovery.items() if k != "history"}
    return record


# -- the tokenizer ---------------------------------------------------------

def wordpiece_spec(tokenizer) -> dict:
    """The fast tokenizer's ``tokenizer.json`` as a dict; one line for anything but WordPiece."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else None
    kind = (spec or {}).get("model", {}).get("type") or f"a slow {type(tokenizer).__name__}"
    if kind != "WordPiece":
        raise CompressorError(
            f"vocabulary pruning supports WordPiece tokenizers for now (BERT, DistilBERT, ELECTRA, "
            f"MPNet); this model's tokenizer is {kind} ({type(tokenizer).__name__})")
    return spec


def pruned_tokenizer(tokenizer, spec: dict, keep: Sequence[int]):
    """``tokenizer`` with only the pieces of the old ids ``keep``, renumbered 0..k-1 in order.

    Built the way it will be read again: the tokenizer's files are written to a temporary
    folder, ``tokenizer.json`` rewritten there, and the folder loaded with ``AutoTokenizer``.
    """
    from transformers import AutoTokenizer

    pieces = tokenizer.convert_ids_to_tokens(list(keep))
    new_ids = {piece: i for i, piece in enumerate(pieces)}
    spec = json.loads(json.dumps(spec))
    spec["model"]["vocab"] = {p: new_ids[p] for p in spec["model"]["vocab"] if p in new_ids}
    for token in spec.get("added_tokens") or []:
        token["id"] = new_ids[token["content"]]
    _renumber(spec.get("post_processor"), new_ids)
    padding = spec.get("padding")
    if padding and padding.get("pad_token") in new_ids:
        padding["pad_id"] = new_ids[padding["pad_token"]]
    with tempfile.TemporaryDirectory(prefix=".vocab-prune-") as tmp:
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        vocab_txt = os.path.join(tmp, "vocab.txt")
        if os.path.isfile(vocab_txt):   # the slow tokenizer's copy of the vocab
            with open(vocab_txt, "w", encoding="utf-8") as f:
                f.writelines(p + "\n" for p in pieces)
        _renumber_config(os.path.join(tmp, "tokenizer_config.json"), new_ids)
        new = AutoTokenizer.from_pretrained(tmp)
    new.name_or_path = tokenizer.name_or_path
    got = new.convert_ids_to_tokens(list(range(len(pieces))))
    if len(new) != len(pieces) or got != pieces:
        raise CompressorError(f"the pruned tokenizer came back with {len(new)} pieces, not the "
                              f"{len(pieces)} kept in order: vocabulary pruning cannot handle "
                              f"{type(tokenizer).__name__} as saved")
    return new


def _renumber(processor: Optional[dict], new_ids: Dict[str, int]) -> None:
    """The special-token ids a post-processor (Template, Bert, Roberta or a Sequence) adds."""
    if not processor:
        return
    for inner in processor.get("processors") or []:
        _renumber(inner, new_ids)
    for key in ("cls", "sep"):          # BertProcessing, RobertaProcessing: [token, id]
        if isinstance(processor.get(key), list) and processor[key][0] in new_ids:
            processor[key][1] = new_ids[processor[key][0]]
    for special in (processor.get("special_tokens") or {}).values():   # TemplateProcessing
        special["ids"] = [new_ids[t] for t in special["tokens"]]


def _renumber_config(path: str, new_ids: Dict[str, int]) -> None:
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        config["added_tokens_decoder"] = {str(new_ids[t["content"]]): t for t in decoder.values()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def _plain_encoder(tokenizer):
    """A copy of the backend tokenizer that neither pads nor truncates: every piece counts."""
    from tokenizers import Tokenizer

    encoder = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    encoder.no_padding()
    encoder.no_truncation()
    return encoder


def _special_ids(tokenizer) -> List[int]:
    return list(tokenizer.all_special_ids) + [int(i) for i in tokenizer.added_tokens_decoder]


def _config_ids(config) -> Dict[str, int]:
    """The token ids a model config names (``pad_token_id``, ``bos_token_id``...)."""
    return {key: value for key, value in config.to_dict().items()
            if key.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool)}


# -- counting ----------------------------------------------------------------

def read_corpus(path: str) -> List[str]:
    """The non-empty lines of a text file; one line naming it where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f if line.strip()]
    except FileNotFoundError:
        raise CompressorError(f"vocabulary corpus file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise CompressorError(f"vocabulary corpus file {path} is not UTF-8 text "
                              f"(byte {exc.start})") from None
    except OSError as exc:
        raise CompressorError(f"cannot read vocabulary corpus file {path}: "
                              f"{exc.strerror or type(exc).__name__}") from None


def _texts(examples) -> List[str]:
    return [text for ex in examples for text in ex.texts if text]


def _chunks(encoder, texts: Sequence[str]) -> Iterable[List[List[int]]]:
    for start in range(0, len(texts), _CHUNK):
        encs = encoder.encode_batch(list(texts[start:start + _CHUNK]), add_special_tokens=False)
        yield [enc.ids for enc in encs]


def _encode(encoder, texts: Sequence[str]) -> Iterable[List[int]]:
    for chunk in _chunks(encoder, texts):
        yield from chunk


def _count(encoder, texts: Sequence[str], counts: np.ndarray) -> None:
    for chunk in _chunks(encoder, texts):
        ids = np.fromiter((i for row in chunk for i in row), dtype=np.int64)
        counts += np.bincount(ids, minlength=len(counts))[:len(counts)]


# -- the model ---------------------------------------------------------------

def shrink_embeddings(model: nn.Module, keep: Sequence[int], new_id: Dict[int, int]) -> None:
    """Word-embedding rows ``keep`` only; config ``vocab_size`` and token ids renumbered."""
    from compressor.core.arch import arch_of

    old = model.get_input_embeddings()
    pad = new_id.get(old.padding_idx) if old.padding_idx is not None else None
    weight = old.weight.detach()[torch.as_tensor(list(keep), device=old.weight.device)].clone()
    new = nn.Embedding(len(keep), weight.shape[1], padding_idx=pad,
                       device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
    new.weight.requires_grad_(old.weight.requires_grad)
    new.train(old.training)
    model.set_input_embeddings(new)
    config = model.config
    for key, value in _config_ids(config).items():
        if value in new_id:
            setattr(config, key, new_id[value])
    config.vocab_size = len(keep)
    # RoBERTa-style embeddings count positions past the pad id they hold
    module = arch_of(config).get_embeddings(model)
    held = getattr(module, "padding_idx", None)
    if isinstance(held, int) and not isinstance(held, bool) and held in new_id:
        module.padding_idx = new_id[held]


# -- the record --------------------------------------------------------------

def dev_report(dev_set, old_encoder, new_encoder, old_tokenizer, kept: set) -> dict:
    """How the dev text fares: the share of sentences (examples) that held a dropped piece (so
    tokenise differently now), the share with an ``[UNK]`` more than before, and the dropped
    pieces the dev text uses most."""
    examples = list(getattr(dev_set, "examples", None) or [])
    if not examples:
        return {"dev_sentences": 0}
    unk = old_tokenizer.unk_token
    old_unk = old_encoder.token_to_id(unk) if unk else None
    new_unk = new_encoder.token_to_id(unk) if unk else None
    texts = _texts(examples)
    owner = [row for row, ex in enumerate(examples) for text in ex.texts if text]
    changed = set()
    dropped = collections.Counter()
    old_unks = collections.Counter()
    for row, ids in zip(owner, _encode(old_encoder, texts)):
        gone = [i for i in ids if i not in kept]
        if gone:
            changed.add(row)
            dropped.update(gone)
        old_unks[row] += ids.count(old_unk) if old_unk is not None else 0
    new_unks = collections.Counter()
    for row, ids in zip(owner, _encode(new_encoder, texts)):
        new_unks[row] += ids.count(new_unk) if new_unk is not None else 0
    unknown = {row for row in new_unks if new_unks[row] > old_unks[row]}
    top = [[old_encoder.id_to_token(i), n] for i, n in dropped.most_common(TOP_DROPPED)]
    return {"dev_sentences": len(examples),
            "dev_share_with_dropped_piece": round(len(changed) / len(examples), 6),
            "dev_share_with_new_unknown": round(len(unknown) / len(examples), 6),
            "top_dropped_in_dev": top}
