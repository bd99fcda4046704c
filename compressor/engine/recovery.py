"""The settings every method shares that changes a trained model and then recovers it by
training (pruning, sharing): how it recovers (``recover``: none, fine-tuning, or distillation
from the unchanged model), the teacher, the data and the device. The job that runs it is
:class:`compressor.engine.job.RecoveryJob`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from compressor.core.errors import CompressorError
from compressor.core.settings import (
    check_fields,
    from_values,
    given,
    positive,
    section_of,
    setting,
    stage_folder,
)
from compressor.core.settings import device as device_setting
from compressor.engine.losses import KDSettings, Losses
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting

RECOVERY = ("none", "finetune", "distill")
# what recovery training takes from its stage unless recover.train sets it
INHERITED = ("device", "seed", "max_length")


def fraction(value, name, config=None) -> Optional[str]:
    if value is None or 0 <= value < 1:
        return None
    return f"{name} must be a fraction in [0, 1), got {value}"


@dataclass
class RecoverSettings:
    """Training after each pruning step: ``mode`` none, finetune (task loss) or distill (from
    the unpruned model, with ``losses``; soft targets by default), with ``train``'s settings
    (``recover: {mode: distill, train: {epochs: 1, lr: 5e-5}}``). ``train``'s device, seed and
    max_length are the stage's unless it sets them (:meth:`RecoveringConfig.recovery_train`)."""

    mode: str = setting("distill", choices=RECOVERY)
    losses: Losses = field(default_factory=lambda: Losses(kd=KDSettings()))   # distill only: name -> settings
    train: TrainConfig = train_setting(epochs=1.0, warmup=0.06)   # the recovery run
    layerdrop: float = setting(0.0, check=fraction)   # LayerDrop (Fan et al.): skip each layer with this chance while recovering
    # distill only: a folder of augmented rows (compressor augment; in a recipe, "recipe": its augment
    # stage's), trained on beside the training rows with the teacher's logits as their only targets;
    # they must have been labelled by this recovery's teacher
    augment: str = stage_folder("augment")

    def __post_init__(self):
        self.train = section_of(self, "train", "recover.train")
        self.losses = from_values(Losses, self.losses, "recover.losses")

    def check(self) -> None:
        check_fields(self)
        self.train.check()
        self.losses.check()
        if self.mode == "distill" and not self.losses.active():
            raise CompressorError("recover.losses needs a loss with a weight for mode distill")
        if self.augment and self.mode != "distill":
            raise CompressorError(f"recover.augment needs mode distill (augmented rows have only the "
                                  f"teacher's logits), not {self.mode}")


@dataclass
class RecoveringConfig:
    """Settings of every method that changes a trained model and then recovers it by training
    (pruning, sharing): the recovery, the teacher it distils from, the data and the device."""

    recover: RecoverSettings = field(default_factory=RecoverSettings)
    max_length: int = setting(128, check=positive)
    seed: int = 42
    device: str = setting("auto", check=device_setting)
    teacher: str = teacher_setting()   # distillation recovery: input (the unchanged model), recipe, or a folder

    def __post_init__(self):
        self.recover = from_values(RecoverSettings, self.recover, "recover")

    def check(self) -> None:
        check_fields(self)
        self.recover.check()

    def recovery_train(self):
        """The training settings of the recovery run: ``recover.train`` with the stage's device,
        seed and max_length (a recipe's ``device:`` and ``seed:`` reach them through the stage)
        in place of those it does not set itself (:func:`compressor.core.settings.given`)."""
        train = self.recover.train
        own = given(train)
        changes = {name: getattr(self, name) for name in INHERITED if name not in own}
        return dataclasses.replace(train, **changes) if changes else train
