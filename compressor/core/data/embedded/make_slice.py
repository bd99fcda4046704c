"""Rebuild the packaged SST-2 slice from a GLUE folder.

    python compressor/core/data/embedded/make_slice.py GLUE_DIR

dev.tsv is copied byte for byte; train.tsv keeps the header and 16,000 data
rows chosen by random.Random(0).sample over the data rows, written in their
original order, so the slice is reproducible and still reads as SST-2.
"""

import random
import shutil
import sys
from pathlib import Path

TRAIN_ROWS = 16000
SEED = 0


def main(glue_dir: str) -> None:
    src = Path(glue_dir) / "SST-2"
    out = Path(__file__).resolve().parent / "sst2"
    out.mkdir(exist_ok=True)
    lines = (src / "train.tsv").read_bytes().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    keep = sorted(random.Random(SEED).sample(range(len(rows)), TRAIN_ROWS))
    (out / "train.tsv").write_bytes(header + b"".join(rows[i] for i in keep))
    shutil.copyfile(src / "dev.tsv", out / "dev.tsv")
    print(f"wrote {out}/train.tsv ({len(keep)} of {len(rows)} rows) and dev.tsv")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_slice.py GLUE_DIR  (the folder holding SST-2/train.tsv)")
    main(sys.argv[1])
