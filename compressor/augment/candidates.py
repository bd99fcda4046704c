"""Where replacement words come from: a masked language model's guesses for a masked word, or
the nearest whole words in an encoder's word-piece embedding table (cosine similarity)."""
from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from compressor.augment.forms import same_form
from compressor.core.errors import CompressorError

Span = Tuple[int, int]   # a word's [start, end) in its sentence
_SPARE = 8               # neighbours kept beyond K, for those dropped as the word itself in another case
_FORM_SPARE = 85         # with keep_form: K + 85 = 100 at K = 15, since the form filter drops most of them


def depth(k: int, keep_form: bool = False) -> int:
    """How many nearest words (or guesses) are looked at to find K candidates."""
    return k + (_FORM_SPARE if keep_form else _SPARE)


def _fits(word: str, candidate: str, picked: List[str], keep_form: bool) -> bool:
    """Whether ``candidate`` may join ``picked``, the candidates of ``word`` so far."""
    return (not _same_word(candidate, word) and candidate not in picked
            and (not keep_form or same_form(word, candidate)))


def _markers(vocab: Sequence[str]) -> Tuple[str, str]:
    """``(continuation prefix, word-start prefix)`` of a vocabulary: WordPiece marks the pieces
    that continue a word (``##``), SentencePiece and byte-level BPE the ones that start one."""
    if sum(t.startswith("##") for t in vocab) > 100:
        return "##", ""
    for start in ("\u2581", "\u0120"):   # SentencePiece's "▁", byte-level BPE's "Ġ"
        if sum(t.startswith(start) for t in vocab) > 100:
            return "", start
    return "##", ""


def whole_words(tokenizer) -> Dict[str, int]:
    """The vocabulary's entries that are whole alphabetic words (no word pieces, no special
    tokens, two letters or more), as ``{word: token id}``."""
    vocab = tokenizer.get_vocab()
    continuation, start = _markers(list(vocab))
    special = set(tokenizer.all_special_tokens)
    words = {}
    for token, index in sorted(vocab.items(), key=lambda kv: kv[1]):
        if token in special or (continuation and token.startswith(continuation)):
            continue
        if start:
            if not token.startswith(start):
                continue
            word = token[len(start):]
        else:
            word = token
        if len(word) >= 2 and word.isalpha():
            words.setdefault(word, index)
    return words


def _same_word(a: str, b: str) -> bool:
    return a.lower() == b.lower()


class EmbeddingNeighbours:
    """The K nearest whole words of a vocabulary word by cosine similarity of the embedding
    rows. A word the vocabulary splits into pieces has none (it is kept): the mean of its
    pieces' rows lies next to its first piece ("heartwarming": heart, hearts, war), not next to
    words of its meaning. A vocabulary word's neighbours are found once, in batches as sentences ask for them, and
    kept in ``cache_dir`` (a file per table, named by the table's digest): a later run over the
    same vocabulary and weights reads them, and finds only the words it has not seen. With
    ``keep_form`` a candidate must have the word's form and not its stem
    (:mod:`compressor.augment.forms`), and more neighbours are kept to find K such words."""

    def __init__(self, model, tokenizer, k: int, cache_dir: Optional[str] = None, keep_form: bool = False):
        self.k, self.keep_form = k, keep_form
        words = whole_words(tokenizer)
        weight = model.get_input_embeddings().weight.detach().float().cpu()
        words = {w: i for w, i in words.items() if i < weight.shape[0]}
        if len(words) <= k:
            raise CompressorError(f"the vocabulary has {len(words)} whole words: too few for "
                                  f"{k} candidates each")
        self.words = list(words)
        self.depth = min(depth(k, keep_form), len(self.words) - 1)   # nearest words looked at
        self.index = {w: n for n, w in enumerate(self.words)}
        self.table = torch.nn.functional.normalize(weight[list(words.values())], dim=-1)
        self.digest = self._digest()
        self.path = os.path.join(cache_dir, f"neighbours-{self.digest}.npz") if cache_dir else None
        self.known: Dict[int, np.ndarray] = self._read()

    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update("\n".join(self.words).encode())
        h.update(self.table.numpy().tobytes())
        h.update(str(self.depth).encode())
        return h.hexdigest()[:20]

    def _read(self) -> Dict[int, np.ndarray]:
        if not (self.path and os.path.isfile(self.path)):
            return {}
        try:
            with np.load(self.path) as kept:
                words, top = kept["words"], kept["top"]
        except (OSError, ValueError, KeyError):
            return {}
        if top.ndim != 2 or top.shape[1] != self.depth:
            return {}
        return {int(w): row for w, row in zip(words, top)}

    def prepare(self, words) -> None:
        """Find the neighbours of every vocabulary word of ``words`` not found yet (and keep them)."""
        wanted = {self.index[key] for key in (self._key(w) for w in words) if key is not None}
        missing = sorted(wanted - set(self.known))
        if not missing:
            return
        with torch.no_grad():
            for start in range(0, len(missing), 1024):
                part = torch.tensor(missing[start:start + 1024])
                sim = self.table[part] @ self.table.T
                sim[torch.arange(len(part)), part] = -float("inf")   # a word is not its own neighbour
                top = sim.topk(self.depth, dim=-1).indices.numpy().astype(np.int32)
                self.known.update(zip(part.tolist(), top))
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp-{os.getpid()}.npz"
            words = np.array(sorted(self.known), dtype=np.int32)
            np.savez(tmp, words=words, top=np.stack([self.known[w] for w in words.tolist()]))
            os.replace(tmp, self.path)

    def _key(self, word: str) -> Optional[str]:
        return word if word in self.index else word.lower() if word.lower() in self.index else None

    def _pick(self, word: str, order) -> List[str]:
        out = []
        for n in order:
            candidate = self.words[int(n)]
            if _fits(word, candidate, out, self.keep_form):
                out.append(candidate)
                if len(out) == self.k:
                    break
        return out

    def for_word(self, word: str) -> List[str]:
        """The K candidates of ``word`` (any case), nearest first; none for a word the
        vocabulary does not hold whole."""
        key = self._key(word)
        if key is None:
            return []
        self.prepare([key])
        return self._pick(word, self.known[self.index[key]])

    def __call__(self, sentences: Sequence[str], spans: Sequence[Sequence[Span]]) -> List[List[List[str]]]:
        self.prepare(text[s:e] for text, sentence_spans in zip(sentences, spans) for s, e in sentence_spans)
        return [[self.for_word(text[s:e]) for s, e in sentence_spans]
                for text, sentence_spans in zip(sentences, spans)]


def masked_lm(path: str):
    """``(model, tokenizer)`` of the masked language model in folder ``path``, or None where
    it has no masked-LM head: loading one that way would give a head of random weights, which
    ``from_pretrained`` reports as missing from the checkpoint."""
    import transformers

    from compressor.core.models import load_tokenizer

    try:
        model, info = transformers.AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True,
                                                                         trust_remote_code=False)
    except Exception:   # noqa: BLE001 -- a probe: a folder that does not load as a masked LM has no head
        return None
    prefix = f"{model.base_model_prefix}."
    missing = [k for k in (info.get("missing_keys") or []) if not k.startswith(prefix)]
    if missing:
        return None
    tokenizer = load_tokenizer(path)
    if tokenizer.mask_token_id is None:
        return None
    return model.float().eval(), tokenizer


class MaskedLMCandidates:
    """TinyBERT's candidates: the word is masked and the masked language model's K likeliest
    whole words there are its candidates. A word of several pieces is masked by one mask too
    (the paper takes GloVe neighbours for those; none ships offline). ``keep_form`` filters the
    guesses as it does the embedding neighbours."""

    def __init__(self, model, tokenizer, k: int, device, batch_size: int = 32, max_length: int = 128,
                 keep_form: bool = False):
        self.model, self.tokenizer, self.k = model.to(device), tokenizer, k
        self.keep_form, self.depth = keep_form, depth(k, keep_form)
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        words = whole_words(tokenizer)
        self.allowed = torch.zeros(model.get_output_embeddings().weight.shape[0], dtype=torch.bool)
        self.allowed[[i for i in words.values() if i < self.allowed.shape[0]]] = True
        self.token_word = {i: w for w, i in words.items()}

    @torch.no_grad()
    def _guesses(self, masked: List[str], words: List[str]) -> List[List[str]]:
        out = []
        for start in range(0, len(masked), self.batch_size):
            enc = self.tokenizer(masked[start:start + self.batch_size], truncation=True,
                                 max_length=self.max_length, padding=True, return_tensors="pt")
            enc = {k: v.to(self.device) for k, v in enc.items()}
            logits = self.model(**enc).logits
            for row, word in zip(range(logits.shape[0]), words[start:start + self.batch_size]):
                where = (enc["input_ids"][row] == self.tokenizer.mask_token_id).nonzero()
                if not len(where):   # the word lies past max_length
                    out.append([])
                    continue
                scores = logits[row, where[0, 0]].float().cpu().masked_fill(~self.allowed, -float("inf"))
                picked = []
                for index in scores.topk(min(self.depth, int(self.allowed.sum()))).indices.tolist():
                    candidate = self.token_word[index]
                    if _fits(word, candidate, picked, self.keep_form):
                        picked.append(candidate)
                    if len(picked) == self.k:
                        break
                out.append(picked)
        return out

    def __call__(self, sentences: Sequence[str], spans: Sequence[Sequence[Span]]) -> List[List[List[str]]]:
        result = [[[] for _ in sentence_spans] for sentence_spans in spans]
        masked, words, slots = [], [], []
        for n, (text, sentence_spans) in enumerate(zip(sentences, spans)):
            for j, (s, e) in enumerate(sentence_spans):
                masked.append(text[:s] + self.tokenizer.mask_token + text[e:])
                words.append(text[s:e])
                slots.append((n, j))
        for (n, j), guesses in zip(slots, self._guesses(masked, words)):
            result[n][j] = guesses
        return result
