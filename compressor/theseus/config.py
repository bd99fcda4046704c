"""The settings of BERT-of-Theseus module replacing (no torch here: the command line reads them)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from compressor.core.errors import CompressorError
from compressor.core.settings import check_fields, from_values, not_negative, positive, section_of, setting
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting

SCHEDULES = ("constant", "linear")
INITS = ("last", "first", "prefix")


def _probability(value, name, config=None):
    if value is not None and not 0 <= value <= 1:
        return f"{name} is a probability in [0, 1], got {value}"
    return None


# train.epochs has no meaning here: each phase has its own length
NO_EPOCHS = "theseus trains in two phases: set replacing_epochs and finetune_epochs, not train.epochs"


@dataclass
class TheseusKD:
    """Soft targets from the teacher (the predecessor unless ``teacher`` says otherwise), added
    to the task loss in both phases."""

    weight: float = setting(0.0, check=not_negative)   # 0 = the task loss alone
    temperature: float = setting(1.0, check=positive)


@dataclass
class TheseusConfig:
    """The replacing, and ``train``: the settings both phases share (``lr``, ``batch_size``...; each
    phase's length is ``replacing_epochs`` / ``finetune_epochs``, so ``train.epochs`` is refused).

    The predecessor's layers are split into ``num_layers`` groups of consecutive layers; each
    group's successor (one layer, a copy of the group's ``init`` layer) replaces the whole group
    with probability p, drawn per group at every optimiser step: ``rate`` (constant), or
    ``min(1, k * step + b)`` (linear; k 0 = reach 1 at the end of the replacing phase).
    """

    train: TrainConfig = train_setting(refuse={"epochs": NO_EPOCHS})   # both phases' run, but their lengths
    num_layers: int = setting(3, check=positive)     # successor layers (groups)
    init: str = setting("last", choices=INITS)       # the layer a successor copies: its group's last or first, or prefix (successor i copies layer i)
    schedule: str = setting("constant", choices=SCHEDULES)
    rate: float = setting(0.5, check=_probability)   # constant p
    k: float = setting(0.0, check=not_negative)      # linear: slope per optimiser step; 0 = (1 - b) / steps
    b: float = setting(0.3, check=_probability)      # linear: p at step 0
    replacing_epochs: float = setting(3.0, check=positive)   # phase 1: module replacing
    finetune_epochs: float = setting(1.0, check=not_negative)  # phase 2: the successors alone; 0 = none
    finetune_lr: float = setting(0.0, check=not_negative)    # phase 2's learning rate; 0 = lr
    freeze_shared: bool = True    # phase 1 trains the successors alone (embeddings and classifier frozen too)
    kd: TheseusKD = field(default_factory=TheseusKD)
    teacher: str = teacher_setting()   # kd's soft targets: input (the predecessor, unchanged), recipe (the recipe's teacher) or a folder

    def __post_init__(self):
        self.train = section_of(self, "train")
        self.kd = from_values(TheseusKD, self.kd, "kd")

    def check(self) -> None:
        check_fields(self)
        if self.train.epochs != TrainConfig().epochs:   # a TrainConfig given whole, in Python
            raise CompressorError(f"train.epochs: {NO_EPOCHS}")
        self.train.check()
        check_fields(self.kd)

    def phase_config(self, phase: str) -> TrainConfig:
        """The loop's settings of phase ``replacing`` or ``finetune``."""
        if phase == "replacing":
            return replace(self.train, epochs=self.replacing_epochs)
        return replace(self.train, epochs=self.finetune_epochs, lr=self.finetune_lr or self.train.lr)
