"""Progress bars with rate and time left; ``COMPRESSOR_PROGRESS=0`` turns them off."""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def progress(iterable=None, total=None, desc=None, unit="it", **kwargs):
    # under several processes (torchrun) rank 0 alone shows the bars
    quiet = os.environ.get("COMPRESSOR_PROGRESS", "1") == "0" or os.environ.get("RANK", "0") != "0"
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=quiet or desc is None,
                dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 5.0,
                file=sys.stderr, **kwargs)
