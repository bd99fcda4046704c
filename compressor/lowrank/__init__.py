"""Low-rank factorisation of a trained encoder's Linear layers (SVD), then recovery.

``compressor.lowrank.factorise_(model, config)`` works on a model in memory;
``compressor.lowrank.lowrank(model, out, ...)`` (or the recipe stage ``lowrank``, or
``compressor lowrank MODEL --out FOLDER``) turns a task checkpoint into a factorised one.
"""


def factorise_(*args, **kwargs):
    """See :func:`compressor.lowrank.api.factorise_` (imported when called, so this package stays light)."""
    from compressor.lowrank.api import factorise_ as run

    return run(*args, **kwargs)


def lowrank(*args, **kwargs):
    """See :func:`compressor.lowrank.stage.lowrank`."""
    from compressor.lowrank.stage import lowrank as run

    return run(*args, **kwargs)
