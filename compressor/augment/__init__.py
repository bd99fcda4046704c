"""TinyBERT's task data augmentation (Jiao et al. 2020, Algorithm 1).

``augment(model, out, config)`` writes N copies of every training row, each word (stop-words
and non-words kept) replaced with probability p by one of K candidates: a masked language
model's guesses where the model has a masked-LM head, else the nearest whole words in the
teacher's word-piece embedding table. The teacher's logits are the copies' only targets; the
``distill`` stage's ``augment`` setting trains on them. ``config`` holds the settings,
``candidates`` the two candidate sources, ``api`` the algorithm; the recipe stage is ``augment``.
"""
# imported on first use, so ``compressor --help`` does not load torch
_LAZY = {"AugmentConfig": "config", "augment": "api", "augment_rows": "api", "augment_text": "api",
         "make_augmented": "api", "EmbeddingNeighbours": "candidates", "MaskedLMCandidates": "candidates",
         "masked_lm": "candidates", "STOP_WORDS": "stopwords"}
__all__ = sorted(_LAZY)


from compressor.core.lazy import lazy_getattr  # noqa: E402

__getattr__ = lazy_getattr(__name__, _LAZY)
