"""A word's surface form, read from its spelling alone: the ``keep_form`` filter on candidates.

The nearest words of a word in an embedding table are mostly its own inflections and words of
another grammatical form (MPNet-base: run -> runs, running, ran, runner; gave -> gives, give,
giving, given). Swapping one in breaks agreement, so on a task that scores grammar (CoLA) the
copy stops being a sentence. With ``keep_form`` a candidate must pass :func:`same_form`:

1. It has the word's *form class*. The class comes from the spelling, checked in this order
   (lower case; a suffix counts only where at least three letters stay before it):

   ======================  ============================================================
   ``reflexive``           ends in ``self`` (himself, oneself)
   ``reflexive-plural``    ends in ``selves`` (themselves)
   ``past``                one of a short list of irregular past forms and participles
                           (ran, gave, took, given, ...), or ends in ``ed``
   ``ing``                 ends in ``ing``
   ``s``                   ends in ``s`` (plural or third person), but not ``ss``, ``us``
                           or ``is``
   ``ly``                  ends in ``ly``
   ``est``                 ends in ``est`` (superlative)
   ``er``                  ends in ``er`` (comparative, or a noun such as runner)
   ``base``                anything else
   ======================  ============================================================

2. It does not share the word's *stem*: the spelling without the suffix of its class
   (``ies`` -> ``y``; an irregular form's stem is its base: ran -> run). Two stems are shared
   when they are equal, or when the shorter has three letters or more and begins the longer
   (run and runn[ing], giv[ing] and give). A word's own inflection is the change that breaks
   agreement; a word that merely starts the same (run, runway) is dropped with it.

The rule is spelling only, no dictionary: "thing" is ``base`` (two letters before ``ing``),
"string" is ``ing``. A wrong class costs candidates, never a crash: a word keeps fewer.
Reflexive pronouns are stop-words, so they are never replaced; their classes keep them out of
other words' candidates. A singular reflexive keeps singular ones (himself: herself, myself)
and drops plural ones (themselves), which would break number agreement.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, List, Tuple

# irregular past forms and past participles -> their base (a short list of common verbs)
IRREGULAR_PAST = {
    "ran": "run", "gave": "give", "given": "give", "took": "take", "taken": "take", "went": "go",
    "gone": "go", "came": "come", "saw": "see", "seen": "see", "made": "make", "said": "say",
    "got": "get", "gotten": "get", "found": "find", "told": "tell", "thought": "think",
    "knew": "know", "known": "know", "felt": "feel", "kept": "keep", "brought": "bring",
    "began": "begin", "begun": "begin", "wrote": "write", "written": "write", "stood": "stand",
    "heard": "hear", "held": "hold", "became": "become", "sat": "sit", "met": "meet", "led": "lead",
    "bought": "buy", "fought": "fight", "taught": "teach", "caught": "catch", "sold": "sell",
    "spoke": "speak", "spoken": "speak", "broke": "break", "broken": "break", "chose": "choose",
    "chosen": "choose", "ate": "eat", "eaten": "eat", "fell": "fall", "fallen": "fall",
    "drove": "drive", "driven": "drive", "rode": "ride", "ridden": "ride", "grew": "grow",
    "grown": "grow", "drew": "draw", "drawn": "draw", "threw": "throw", "thrown": "throw",
    "flew": "fly", "flown": "fly", "wore": "wear", "worn": "wear", "sang": "sing", "sung": "sing",
    "swam": "swim", "hid": "hide", "hidden": "hide", "forgot": "forget", "forgotten": "forget",
    "shown": "show", "built": "build", "sent": "send", "spent": "spend", "lost": "lose",
    "paid": "pay", "understood": "understand", "won": "win", "slept": "sleep", "left": "leave",
}

_MIN_STEM = 3   # letters that must stay before a suffix, and a shared prefix's least length

# (suffix, class, what replaces the suffix in the stem), tried in order after the reflexives
_SUFFIXES = (("ed", "past", ""), ("ing", "ing", ""), ("ies", "s", "y"), ("s", "s", ""),
             ("ly", "ly", ""), ("est", "est", ""), ("er", "er", ""))
_NOT_PLURAL = ("ss", "us", "is")


@lru_cache(maxsize=65536)
def form(word: str) -> Tuple[str, str]:
    """``(form class, stem)`` of ``word`` by the spelling rule of this module."""
    w = word.lower()
    for suffix, name in (("selves", "reflexive-plural"), ("self", "reflexive")):
        if w.endswith(suffix):
            return name, w[:-len(suffix)]
    if w in IRREGULAR_PAST:
        return "past", IRREGULAR_PAST[w]
    for suffix, name, tail in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= _MIN_STEM:
            if name == "s" and w.endswith(_NOT_PLURAL):
                continue
            return name, w[:-len(suffix)] + tail
    return "base", w


def _shared_stem(a: str, b: str) -> bool:
    short, long_ = sorted((a, b), key=len)
    return short == long_ or (len(short) >= _MIN_STEM and long_.startswith(short))


def same_form(word: str, candidate: str) -> bool:
    """Whether ``candidate`` may replace ``word`` under ``keep_form``: the same form class, and
    no shared stem (so not the word's own inflection)."""
    (kind, stem), (other_kind, other_stem) = form(word), form(candidate)
    return kind == other_kind and not _shared_stem(stem, other_stem)


def keep_form(word: str, candidates: Iterable[str]) -> List[str]:
    """The ``candidates`` that may replace ``word`` under ``keep_form``, in their order."""
    return [c for c in candidates if same_form(word, c)]
