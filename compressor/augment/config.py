"""The settings of task data augmentation (no torch here: the command line reads them)."""
from __future__ import annotations

from dataclasses import dataclass

from compressor.core.device import PRECISIONS
from compressor.core.settings import check_fields, positive, setting
from compressor.core.settings import device as device_setting
from compressor.engine.train_config import teacher_setting

SOURCES = ("auto", "mlm", "embedding")


def _probability(value, name, config=None):
    if value is not None and not 0 <= value <= 1:
        return f"{name} is a probability in [0, 1], got {value}"
    return None


@dataclass
class AugmentConfig:
    """TinyBERT's augmentation: ``copies`` copies of each training row, each word replaced with
    probability ``replace_rate`` by one of ``candidates`` words (stop-words and non-words kept);
    the teacher's logits label the copies."""

    copies: int = setting(20, check=positive)              # N: copies of each training row
    replace_rate: float = setting(0.4, check=_probability)   # p: the chance that a word is replaced
    candidates: int = setting(15, check=positive)          # K: a replacement is one of this many words
    source: str = setting("auto", choices=SOURCES)         # where candidates come from: mlm (a masked LM's guesses in context), embedding (the nearest whole words in the teacher's embedding table), auto (mlm when the model has a masked-LM head)
    keep_form: bool = False           # a candidate must have the word's form class (-ing, -ed, -s, -ly, -er, -est, base) and not its stem (no runs/running/ran for run): copies stay grammatical (CoLA); compressor.augment.forms has the rule
    mlm_model: str = ""               # a folder with a masked-LM head for the candidates; "" = the teacher
    max_length: int = setting(128, check=positive)         # the teacher labels rows cut to this many tokens: the distillation's max_length
    batch_size: int = setting(256, check=positive)         # rows per forward pass of the teacher
    seed: int = 42
    device: str = setting("auto", check=device_setting)
    precision: str = setting("fp32", choices=PRECISIONS)   # of the teacher's forward passes
    cache: str = ""                   # a folder that keeps neighbour tables and augmented sets by digest; any run with the same teacher, rows and settings reuses them
    teacher: str = teacher_setting()   # the model that labels the rows: input (the model the stage starts from), recipe (the recipe's teacher) or a folder

    def check(self) -> None:
        check_fields(self)

    def digest_settings(self) -> dict:
        """The settings the rows depend on (not where or how fast they are computed). ``keep_form``
        only when on, so the sets made before it existed keep their digests."""
        settings = {k: getattr(self, k) for k in ("copies", "replace_rate", "candidates", "source",
                                                  "max_length", "seed", "precision")}
        return {**settings, "keep_form": True} if self.keep_form else settings
