"""Parameter sharing: ALBERT-style cross-layer sharing of a trained encoder, factorised embeddings.

``compressor.share.share(model, out, group=2, init="mean")`` (or the recipe stage ``share``);
:func:`~compressor.core.sharing.share_layers` and
:func:`~compressor.core.sharing.factorise_embedding` work on a model in memory.
"""


def share(*args, **kwargs):
    """See :func:`compressor.share.stage.share` (imported when called, so this package stays light)."""
    from compressor.share.stage import share as run

    return run(*args, **kwargs)
