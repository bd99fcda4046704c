"""One config type per quantisation method, and the registry from type to the function doing it.

As torchao's ``quantize_(model, Int8DynamicActivationInt8WeightConfig())``: a method is
a config class holding only its own settings plus one function registered for that
class with :func:`register_quantizer`; ``quantize`` looks the function up by the
config's type. Recipes and the command line name the type by ``backend`` and
``method`` (:func:`quantize_config`):

| backend | method: type | input | output |
|---|---|---|---|
| ``onnxruntime`` | dynamic: OrtDynamicConfig, static: OrtStaticConfig, qat: OrtQATConfig, mixed: OrtMixedConfig, auto: OrtAutoConfig, fp16: OrtFP16Config | checkpoint or export folder (qat: checkpoint) | export folder (``onnx``) |
| ``torchao`` | dynamic: TorchaoDynamicConfig, weight_only: TorchaoWeightOnlyConfig, fp16: TorchaoFP16Config, bf16: TorchaoBF16Config | checkpoint | ``torch-quantized`` folder |
| ``inc`` | static: IncStaticConfig, dynamic: IncDynamicConfig (both calibrated; ``smoothquant_alpha`` > 0 smooths first) | checkpoint | ``torch-quantized`` folder |
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, List, Optional

from compressor.core.errors import CompressorError
from compressor.core.registry import Registry
from compressor.core.settings import (at_least_one, check_fields, config_from_dict, not_negative, picks_type_by,
                        positive, section_of, setting, share, tag, variant, variants)
from compressor.core.presets import PRESET_NAMES, resolve_preset
from compressor.engine.train_config import TrainConfig, teacher_setting, train_setting

CALIBRATIONS = ("minmax", "entropy", "percentile")
GRANULARITIES = ("matrix", "layer", "refine")   # refine: layers, then products inside those kept FP32
SEARCH_SPLITS = ("dev", "train", "holdout")
SENSITIVITIES = ("measured", "hessian")
AUTO_CANDIDATES = ("static", "dynamic", "dynamic_per_tensor", "qat", "mixed", "fp32")


def agreement_share(value, name, config=None) -> Optional[str]:
    """A share of rows (or a correlation) in [0, 1]; 1 allows no flip at all."""
    if value is not None and not 0 <= value <= 1:
        return f"{name} must be in [0, 1], got {value}"
    return None


def candidate_list(value, name, config=None) -> Optional[str]:
    if value is not None and not value:
        return f"{name} must name at least one of {', '.join(AUTO_CANDIDATES)}"
    if value is not None and len(set(value)) != len(value):
        return f"{name} names a candidate twice: {', '.join(value)}"
    return None
HESSIAN_SCORES = ("eigenvalue", "trace", "weighted_trace")


@picks_type_by("backend", "method")
@dataclass
class QuantizeConfig:
    """Base of every method's config; ``backend`` and ``method`` say which type it is."""

    backend: str = tag("onnxruntime")
    method: str = tag("dynamic")
    uses_train: ClassVar[bool] = False     # draws on the training split (calibration, QAT)
    needs_dev: ClassVar[bool] = False      # cannot run without the dev split
    produces_onnx: ClassVar[bool] = False

    def check(self) -> None:
        check_fields(self)

    def hardware(self):
        """The resolved hardware preset (None for a method that takes none)."""
        return None


@picks_type_by("backend", "method")
@dataclass
class OrtQuantizeConfig(QuantizeConfig):
    """ONNX Runtime; writes an export folder. The recipe stage ``quantize``."""

    backend: str = tag("onnxruntime")
    threads: Optional[int] = setting(None, check=at_least_one)   # onnxruntime threads when scoring
    produces_onnx: ClassVar[bool] = True

    @staticmethod
    def tag_hint(key, value) -> Optional[str]:
        if key == "backend" and value in ("torchao", "inc"):
            return f"backend {value} is the stage 'quantize_torch'; this stage takes onnxruntime"
        return None


@picks_type_by("backend", "method")
@dataclass
class TorchQuantizeConfig(QuantizeConfig):
    """torchao or Intel Neural Compressor; writes a ``torch-quantized`` folder. The stage ``quantize_torch``."""

    backend: str = tag("torchao")

    @staticmethod
    def tag_hint(key, value) -> Optional[str]:
        if key == "backend" and value == "onnxruntime":
            return "backend onnxruntime is the stage 'quantize'; this stage takes torchao or inc"
        return None


# -- settings several methods share -----------------------------------------------

@dataclass
class HardwareSettings:
    """The hardware preset to deploy to, and overrides of it (None: as the preset says)."""

    preset: str = setting("avx2", choices=PRESET_NAMES)   # avx2, avx512_vnni, amx, arm64, auto (this machine's)
    per_channel: Optional[bool] = None
    symmetric_weights: Optional[bool] = None
    symmetric_activations: Optional[bool] = None
    reduce_range: Optional[bool] = None

    def hardware(self):
        return resolve_preset(self.preset, self.per_channel, self.symmetric_weights,
                              self.symmetric_activations, self.reduce_range)


@dataclass
class GraphSettings:
    optimize: bool = False        # ORT's BERT fusions first (export folders usually have them)
    exclude: List[str] = field(default_factory=list)   # ONNX node names kept FP32


@dataclass
class CalibrationSettings:
    calibration: str = setting("minmax", choices=CALIBRATIONS)
    calibration_samples: int = setting(128, check=not_negative)   # training rows
    percentile: float = 99.999    # calibration percentile
    seed: int = 42                # which training rows
    # > 0: SmoothQuant before static INT8 (the matrices' input channels divided by max|x|^a / max|w|^(1-a),
    # their weight rows multiplied by it; 0: off). 0.8 kept MPNet-base's and MiniLM's layer outputs at
    # cosine 0.993-0.998 with FP32's where 0 gave 0.83-0.99 and 0.5 less (docs/quantisation.md)
    smoothquant_alpha: float = setting(0.8, check=share)
    # the word-embedding table stored INT8 (one scale per row; the gathered rows stay FP32), as dynamic
    # INT8 stores it: left FP32 it was 94 of the 117 MB of the accuracy-first chain's static graph
    embeddings_int8: bool = True


@dataclass
class SearchSettings:
    """What the mixed/auto search ranks and checks ``max_drop`` on: the dev split (``search_on:
    dev``, and then the dev score reported is the one the choice was made on), ``search_rows``
    training rows drawn with ``seed`` (``train``: dev is scored once, on the model chosen; the
    teacher learned from those rows, so they flatter INT8), or the training rows the teacher was
    fine-tuned without (``holdout``: ``compressor finetune --holdout N``; all of them)."""

    max_drop: float = setting(0.5, check=not_negative)   # tolerated score drop (points) on the search rows
    # and the drop's noise: a candidate meets max_drop only when the confidence quantile of its drop over
    # paired bootstrap resamples of the search rows does (0: the measured drop alone)
    confidence: float = setting(0.95, check=share)
    # the share of search rows whose label must equal the FP32 graph's (regression: the Pearson correlation
    # of the outputs with FP32's): an accuracy on a few hundred rows cannot see flips that cancel
    min_agreement: float = setting(0.99, check=agreement_share)
    # sensitivity per matrix, per layer, or refine: per layer, then per matrix inside the layers the
    # layer search kept FP32 (the products it keeps are a subset of those layers', in fewer builds
    # than matrix over the whole graph)
    granularity: str = setting("layer", choices=GRANULARITIES)
    search_on: str = setting("dev", choices=SEARCH_SPLITS)
    search_rows: int = setting(2000, check=positive)     # training rows drawn when search_on is train
    seed: int = 42                                       # which training rows
    # what orders the units: each one's measured drop, or Q-BERT's Hessian of the task loss on the
    # same rows (quantize/hessian.py; needs the PyTorch checkpoint): hessian_score picks
    # eigenvalue (|mean|+std of the top eigenvalue over batches), trace (Hutchinson, per weight)
    # or weighted_trace (that times the unit's INT8 weight error)
    sensitivity: str = setting("measured", choices=SENSITIVITIES)
    hessian_score: str = setting("eigenvalue", choices=HESSIAN_SCORES)
    hessian_rows: int = setting(64, check=positive)          # rows drawn (seed) from the search rows
    hessian_batch_size: int = setting(16, check=positive)    # the eigenvalue is taken per batch
    hessian_iterations: int = setting(20, check=positive)    # power-iteration products at most
    hessian_tol: float = setting(1e-3, check=not_negative)   # relative change that stops it
    hessian_trace_samples: int = setting(8, check=not_negative)   # Hutchinson vectors a batch

    @property
    def uses_train(self) -> bool:
        return self.search_on == "train"


# -- ONNX Runtime --------------------------------------------------------------------

@variant
@dataclass
class OrtDynamicConfig(HardwareSettings, GraphSettings, OrtQuantizeConfig):
    """Dynamic INT8: weights quantised ahead, activations per input."""

    method: str = tag("dynamic")


@variant
@dataclass
class OrtStaticConfig(HardwareSettings, GraphSettings, CalibrationSettings, OrtQuantizeConfig):
    """Static INT8: activation ranges fixed from calibration on training rows."""

    method: str = tag("static")
    uses_train: ClassVar[bool] = True


@variant
@dataclass
class OrtQATConfig(HardwareSettings, GraphSettings, OrtQuantizeConfig):
    """Quantisation-aware training (Q8BERT) of a checkpoint, then dynamic INT8."""

    method: str = tag("qat")
    train: TrainConfig = train_setting(epochs=1.0, lr=1e-5, weight_decay=0.0)   # the QAT run
    distill_alpha: float = 0.5    # weight of the teacher's soft targets; 0: labels only
    temperature: float = setting(2.0, check=positive)
    teacher: str = teacher_setting()   # the soft targets' teacher: input (the FP32 model as it is now), recipe (the recipe's teacher) or a folder
    uses_train: ClassVar[bool] = True
    needs_dev: ClassVar[bool] = True

    def __post_init__(self):
        self.train = section_of(self, "train")

    def check(self) -> None:
        check_fields(self)
        self.train.check()


@variant
@dataclass
class OrtMixedConfig(HardwareSettings, SearchSettings, OrtQuantizeConfig):
    """INT8 with the units the score is most sensitive to kept in FP32, within ``max_drop`` (on dev,
    drawn training rows or the teacher's held-out rows: ``search_on``)."""

    method: str = tag("mixed")
    needs_dev: ClassVar[bool] = True


@variant
@dataclass
class OrtAutoConfig(HardwareSettings, SearchSettings, CalibrationSettings, OrtQuantizeConfig):
    """The fastest of static, dynamic and mixed INT8 (and FP32) within ``max_drop`` and ``min_agreement``."""

    method: str = tag("auto")
    # what it tries: static, dynamic (per-channel weights as the preset says), dynamic_per_tensor (one
    # scale per weight matrix), qat (below), mixed (the sensitive units FP32), fp32 (the graph as exported)
    candidates: List[str] = setting(default_factory=lambda: ["static", "dynamic", "mixed", "fp32"],
                                    choices=AUTO_CANDIDATES, check=candidate_list, what="candidate")
    # qat: trained only when no post-training all-INT8 candidate meets the criterion: the PyTorch
    # checkpoint behind the export (its manifest's source) trained with every product fake-quantised
    # (Q8BERT, as method qat), exported again, then dynamic INT8; judged like the others
    qat_train: TrainConfig = train_setting(epochs=1.0, lr=1e-5, weight_decay=0.0)
    qat_distill_alpha: float = setting(0.5, check=share)   # weight of the teacher's soft targets; 0: labels only
    qat_temperature: float = setting(2.0, check=positive)
    qat_teacher: str = teacher_setting()   # the soft targets' teacher: input (the FP32 model), recipe or a folder
    # candidates within this share of the fastest count as fast as it, and of those the one with the
    # fewest FP32 units is kept: keeping a layer FP32 has to buy a measured speed-up, not timing noise
    latency_margin: float = setting(0.1, check=not_negative)
    uses_train: ClassVar[bool] = True
    needs_dev: ClassVar[bool] = True

    def __post_init__(self):
        self.qat_train = section_of(self, "qat_train")

    def check(self) -> None:
        check_fields(self)
        self.qat_train.check()


@variant
@dataclass
class OrtFP16Config(OrtQuantizeConfig):
    """FP16 weights and activations."""

    method: str = tag("fp16")


# -- torchao and INC -------------------------------------------------------------------

@dataclass
class ModuleSettings:
    exclude: List[str] = field(default_factory=list)   # torch module names kept FP32


@variant
@dataclass
class TorchaoDynamicConfig(HardwareSettings, ModuleSettings, TorchQuantizeConfig):
    """torchao's ``quantize_``: INT8 activations (per input) and weights."""

    method: str = tag("dynamic")


@variant
@dataclass
class TorchaoWeightOnlyConfig(HardwareSettings, ModuleSettings, TorchQuantizeConfig):
    """torchao's ``quantize_``: INT8 weights, activations in floating point."""

    method: str = tag("weight_only")


@variant
@dataclass
class TorchaoFP16Config(TorchQuantizeConfig):
    method: str = tag("fp16")


@variant
@dataclass
class TorchaoBF16Config(TorchQuantizeConfig):
    method: str = tag("bf16")


@dataclass
class IncSettings:
    calibration_samples: int = setting(128, check=not_negative)   # training rows (INC always calibrates)
    seed: int = 42
    smoothquant_alpha: float = setting(0.0, check=share)   # > 0: SmoothQuant with this alpha first


@variant
@dataclass
class IncStaticConfig(IncSettings, TorchQuantizeConfig):
    """Intel Neural Compressor static INT8 (PT2E)."""

    backend: str = tag("inc")
    method: str = tag("static")
    uses_train: ClassVar[bool] = True


@variant
@dataclass
class IncDynamicConfig(IncSettings, TorchQuantizeConfig):
    """Intel Neural Compressor dynamic INT8 (PT2E; calibrated all the same)."""

    backend: str = tag("inc")
    method: str = tag("dynamic")
    uses_train: ClassVar[bool] = True


BACKENDS = {}
for _backend, _method in variants(QuantizeConfig):
    BACKENDS.setdefault(_backend, []).append(_method)
BACKENDS = {b: tuple(m) for b, m in BACKENDS.items()}


def quantize_config(backend: str = "onnxruntime", method: str = "dynamic", **settings) -> QuantizeConfig:
    """The config type ``backend`` and ``method`` name, with ``settings`` (each must be one of its own)."""
    return config_from_dict(QuantizeConfig, {"backend": backend, "method": method, **settings},
                            what="quantize")


# -- the registry: config type -> the function that quantises with it -------------------

QUANTIZERS = Registry("quantisation method", package="compressor.quantize")


def register_quantizer(config_cls: type):
    """Decorator: ``fn(job, config) -> dict`` quantises with configs of ``config_cls``."""
    return QUANTIZERS.register(config_cls)


def quantizer_for(config) -> Callable:
    for cls in type(config).__mro__:
        if cls in QUANTIZERS:
            return QUANTIZERS[cls]
    known = ", ".join(sorted(c.__name__ for c in QUANTIZERS))
    raise CompressorError(f"no quantisation method is registered for {type(config).__name__}; use {known}")
