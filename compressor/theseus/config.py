"""The settings of BERT-of-Theseus module replacing (no torch here: the command line reads them)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from compressor.core.settings import check_fields, from_values, not_negative, positive, setting
from compressor.engine.train_config import TrainConfig, teacher_setting

SCHEDULES = ("constant", "linear")
INITS = ("last", "first", "prefix")


def _probability(value, name, config=None):
    if value is not None and not 0 <= value <= 1:
        return f"{name} is a probability in [0, 1], got {value}"
    return None


def _no_epochs(value, name, config=None):
    if value:
        return ("theseus trains in two phases: set replacing_epochs and finetune_epochs, "
                "not epochs")
    return None


@dataclass
class TheseusKD:
    """Soft targets from the teacher (the predecessor unless ``teacher`` says otherwise), added
    to the task loss in both phases."""

    weight: float = setting(0.0, check=not_negative)   # 0 = the task loss alone
    temperature: float = setting(1.0, check=positive)


@dataclass
class TheseusConfig(TrainConfig):
    """Training settings (``lr``, ``batch_size``... shared by both phases) plus the replacing.

    The predecessor's layers are split into ``num_layers`` groups of consecutive layers; each
    group's successor (one layer, a copy of the group's ``init`` layer) replaces the whole group
    with probability p, drawn per group at every optimiser step: ``rate`` (constant), or
    ``min(1, k * step + b)`` (linear; k 0 = reach 1 at the end of the replacing phase).
    """

    epochs: float = setting(0.0, check=_no_epochs)   # not used: see the two below
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
        self.kd = from_values(TheseusKD, self.kd, "kd")

    def check(self) -> None:
        check_fields(self)
        check_fields(self.kd)

    def phase_config(self, phase: str) -> TrainConfig:
        """The loop's settings of phase ``replacing`` or ``finetune``."""
        names = TrainConfig.__dataclass_fields__
        base = TrainConfig(**{k: v for k, v in asdict(self).items() if k in names and k != "epochs"},
                           epochs=1.0)
        if phase == "replacing":
            return replace(base, epochs=self.replacing_epochs)
        return replace(base, epochs=self.finetune_epochs, lr=self.finetune_lr or self.lr)
