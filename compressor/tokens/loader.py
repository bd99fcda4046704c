"""Kind ``token-prune``: a task model that drops tokens between layers (``compressor.tokens.model``)."""
from __future__ import annotations

from typing import Optional

from compressor.core.loaders import register_loader


@register_loader("token-prune", describe="a model that drops tokens between layers (token pruning)")
def load_token_pruned(path: str, task=None, attn_implementation: Optional[str] = None, **_):
    """The wrapped model (loaded as kind ``hf`` from the same folder, eager attention: the
    layers' attention probabilities decide) and its rule from ``tokens.json``."""
    from compressor.core.models import load_hf
    from compressor.tokens.model import TokenPrunedModel, read_tokens

    record = read_tokens(path)
    backbone, tokenizer = load_hf(path, task, attn_implementation="eager")
    model = TokenPrunedModel(backbone, record["by"], record["values"], record.get("separators") or [],
                             temperature=record.get("temperature", 1e-3))
    return model.eval(), tokenizer
