"""One verb: ``quantize(model, out, QuantizeConfig(...))``.

``backend`` picks the engine, ``method`` what to do:

| backend | methods | input | output |
|---|---|---|---|
| ``onnxruntime`` | dynamic, static, qat, mixed, auto, fp16 | checkpoint or export folder (qat: checkpoint) | export folder (``onnx``) |
| ``torchao`` | dynamic, weight_only, fp16, bf16 | checkpoint | ``torch-quantized`` folder |
| ``inc`` | static, dynamic (both calibrated; ``smoothquant_alpha`` > 0 smooths first) | checkpoint | ``torch-quantized`` folder |
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..errors import CompressorError
from ..io import check_output_dir, versions, write_json
from ..settings import at_least_one, check_fields, not_negative, positive, setting, share
from ..settings import device as device_setting
from .presets import PRESET_NAMES, resolve_preset

BACKENDS = {
    "onnxruntime": ("dynamic", "static", "qat", "mixed", "auto", "fp16"),
    "torchao": ("dynamic", "weight_only", "fp16", "bf16"),
    "inc": ("static", "dynamic"),
}
CALIBRATIONS = ("minmax", "entropy", "percentile")
GRANULARITIES = ("matrix", "layer")
RECORD_FILE = "quantize.json"


def _method_problem(method, config) -> Optional[str]:
    backend = getattr(config, "backend", "onnxruntime")
    if backend in BACKENDS and method not in BACKENDS[backend]:
        return (f"method '{method}' is not available with backend {backend}; "
                f"it offers {', '.join(BACKENDS[backend])}")
    return None


@dataclass
class QuantizeConfig:
    """Settings of one quantisation; the names are the recipe keys and CLI options."""

    method: str = setting("dynamic", check=lambda v, name, c: _method_problem(v, c))
    backend: str = setting("onnxruntime", choices=tuple(BACKENDS))
    preset: str = setting("avx2", choices=PRESET_NAMES)   # avx2, avx512_vnni, amx, arm64, auto (this machine's)
    per_channel: Optional[bool] = None   # None: as the preset says
    symmetric_weights: Optional[bool] = None
    symmetric_activations: Optional[bool] = None
    reduce_range: Optional[bool] = None
    optimize: bool = False               # ONNX: ORT's BERT fusions first (export folders usually have them)
    calibration: str = setting("minmax", choices=CALIBRATIONS)   # static: minmax, entropy, percentile
    calibration_samples: int = setting(128, check=not_negative)  # training rows for calibration (static, inc)
    percentile: float = 99.999
    smoothquant_alpha: float = setting(0.0, check=share)  # inc: > 0 applies SmoothQuant with this alpha first
    exclude: List[str] = field(default_factory=list)   # ONNX node names / torch module names kept FP32
    max_drop: float = setting(0.5, check=not_negative)   # mixed, auto: tolerated dev score drop (points)
    granularity: str = setting("layer", choices=GRANULARITIES)   # mixed, auto: matrix or layer
    # quantisation-aware training (method qat)
    epochs: float = 1.0
    lr: float = setting(1e-5, check=positive)
    batch_size: int = setting(32, check=positive)
    max_length: int = setting(128, check=positive)
    max_steps: int = setting(0, check=not_negative)
    eval_every: int = setting(0, check=not_negative)
    distill_alpha: float = 0.5           # weight of the FP32 model's soft targets; 0: labels only
    temperature: float = setting(2.0, check=positive)
    device: str = setting("auto", check=device_setting)
    seed: int = 42
    threads: Optional[int] = setting(None, check=at_least_one)   # onnxruntime threads when scoring

    def check(self) -> None:
        check_fields(self)

    def hardware(self):
        return resolve_preset(self.preset, self.per_channel, self.symmetric_weights,
                              self.symmetric_activations, self.reduce_range)

    @property
    def produces_onnx(self) -> bool:
        return self.backend == "onnxruntime"


def quantize(model: str, out: str, config: Optional[QuantizeConfig] = None, task: Optional[str] = None,
             data_dir: Optional[str] = None, train_set=None, dev_set=None, meta: Optional[dict] = None,
             overwrite: bool = False) -> dict:
    """Quantise ``model`` (a checkpoint or an ONNX export folder) into the folder ``out``.

    The dev split is scored when it can be loaded (``dev_set`` or the task's
    data); static calibration, INC and QAT draw on the training split.
    Returns the record, also written to ``out/quantize.json``.
    """
    from ..data import load_split
    from ..metrics import task_score
    from ..models import read_meta
    from ..scoring import _task_for

    config = config or QuantizeConfig()
    config.check()
    check_output_dir(out, overwrite)
    if not os.path.isdir(model):
        from ..models import resolve_model

        model = resolve_model(model)
    task_spec, model_meta = _task_for(model, task)
    max_length = model_meta.get("max_length", 128)
    needs_train = config.method in ("static", "qat", "auto") or config.backend == "inc"
    if train_set is None and needs_train:
        train_set = load_split(task_spec, "train", data_dir=data_dir)
    if dev_set is None:
        try:
            dev_set = load_split(task_spec, "dev", data_dir=data_dir)
        except CompressorError:
            if config.method in ("mixed", "auto", "qat"):
                raise
            dev_set = None
    preset = config.hardware()
    start = time.perf_counter()
    record = {"method": config.method, "backend": config.backend, "preset": preset.to_dict(),
              "source": os.path.abspath(model), "task": task_spec.name, "config": asdict(config)}
    meta = meta or {**read_meta(model), "made_by": f"quantize:{config.backend}:{config.method}"}
    if config.backend == "onnxruntime":
        record.update(_onnx(model, out, config, preset, task_spec, train_set, dev_set))
    else:
        record.update(_torch(model, out, config, preset, task_spec, train_set, dev_set, max_length, meta))
    if dev_set is not None and "metrics" not in record:
        record["metrics"] = _score_output(out, config, dev_set, max_length)
    if record.get("metrics") is not None:
        record["score"] = task_score(task_spec, record["metrics"])
        record["split"] = "dev"
        record["examples"] = len(dev_set)
    record["wall_time_s"] = round(time.perf_counter() - start, 2)
    record["versions"] = versions()
    write_json(os.path.join(out, RECORD_FILE), record)
    return record


def _score_output(out: str, config: QuantizeConfig, dev_set, max_length: int) -> dict:
    if config.produces_onnx:  # as export, eval and bench score a graph: one graph, one score
        from export.onnx import score_onnx

        return score_onnx(out, dev_set, threads=config.threads)
    import torch

    from ..scoring import score
    from .torch_int8 import load_quantized

    net, tokenizer = load_quantized(out)
    return score(net, tokenizer, dev_set, max_length, device=torch.device("cpu"),
                 desc="score quantised")


# -- ONNX Runtime -------------------------------------------------------------

def _onnx(model, out, config, preset, task_spec, train_set, dev_set) -> dict:
    from export.runtime import Predictor

    from . import onnx_int8 as ox

    info = {"engine": "onnxruntime", "kind": "onnx"}
    with tempfile.TemporaryDirectory(prefix="compressor-quantize-") as work:
        if config.method == "qat":
            if ox.is_export_folder(model):
                raise CompressorError(f"QAT trains a PyTorch checkpoint; {model} is an ONNX export folder")
            trained, info["qat"] = _qat(model, os.path.join(work, "trained"), config, preset,
                                        task_spec, train_set, dev_set)
            model = trained
        src_folder = ox.ensure_export(model, os.path.join(work, "export"))
        src = ox.onnx_file(src_folder)
        parameters = ox.count_weights(src)
        done = ox.quantization_of(src_folder)
        if done:
            raise CompressorError(f"{model} is already quantised ({done.get('method')}); "
                                  "quantise its FP32 export instead")
        quant = {"method": config.method, "preset": preset.to_dict(), "backend": "onnxruntime"}

        if config.method in ("dynamic", "qat"):
            write = lambda path: ox.quantize_dynamic_onnx(src, path, preset, config.optimize,
                                                          nodes_to_exclude=config.exclude)
        elif config.method == "static":
            predictor = Predictor(src_folder, threads=config.threads)  # calibrates on what it is fed
            feeds = ox.calibration_feeds(predictor, train_set.examples, config.calibration_samples,
                                         config.seed)
            quant.update(calibration=config.calibration, calibration_samples=len(feeds),
                         percentile=config.percentile if config.calibration == "percentile" else None)
            write = lambda path: ox.quantize_static_onnx(
                src, path, preset, feeds, config.calibration, config.percentile, config.exclude,
                optimize=config.optimize, pad_id=predictor.pad_id)
        elif config.method == "fp16":
            write = lambda path: ox.convert_fp16_onnx(src, path)
        else:  # mixed or auto
            chosen_path, search = _search(src_folder, work, config, preset, train_set, dev_set)
            info["search"] = search
            quant.update({k: search.get(k) for k in ("fp32_units", "chosen") if k in search})
            write = lambda path: shutil.copyfile(chosen_path, path)
        if config.exclude:
            quant["excluded_nodes"] = list(config.exclude)
        report_files = info.get("search", {}).pop("files", None)
        ox.write_export(src_folder, out, write, quant)
        if report_files:
            for path in report_files.values():
                shutil.copy2(path, os.path.join(out, os.path.basename(path)))
            info["sensitivity_files"] = [os.path.basename(p) for p in report_files.values()]
    info["size_bytes"] = os.path.getsize(os.path.join(out, ox.ONNX_FILE))
    info["parameters"] = parameters
    return info


def _search(src_folder, work, config, preset, train_set, dev_set) -> tuple:
    """Mixed precision (``mixed``) or the fastest configuration within the tolerance (``auto``)."""
    from export.runtime import Predictor

    from . import onnx_int8 as ox
    from . import sensitivity as sens

    src = ox.onnx_file(src_folder)
    report_dir = os.path.join(work, "report")
    os.makedirs(report_dir, exist_ok=True)
    report = sens.measure_sensitivity(src_folder, dev_set, preset, work, config.granularity, config.threads)
    files = sens.write_report(report, report_dir, dev_set.task.main_metric)
    mixed_path = os.path.join(work, "mixed.onnx")
    mixed = sens.mixed_precision(src_folder, mixed_path, report, dev_set, preset, config.max_drop,
                                 config.threads)
    result = {"sensitivity": report, "mixed": mixed, "files": files}
    if config.method == "mixed":
        if not mixed["met"]:
            raise CompressorError(f"no mix of FP32 and INT8 units keeps the dev drop within "
                                  f"{config.max_drop} points (best: {mixed['drop']:.2f})")
        result["fp32_units"] = mixed["fp32_units"]
        return mixed_path, result

    # auto: the fastest of dynamic, static and the mixed model that meets the tolerance
    predictor = Predictor(src_folder, threads=config.threads)
    timing = ox.calibration_feeds(predictor, dev_set.examples, 100, config.seed)

    def build_dynamic():
        path = os.path.join(work, "auto-dynamic.onnx")
        ox.quantize_dynamic_onnx(src, path, preset)
        return path

    def build_static():
        if train_set is None:
            return None
        feeds = ox.calibration_feeds(predictor, train_set.examples, config.calibration_samples, config.seed)
        path = os.path.join(work, "auto-static.onnx")
        ox.quantize_static_onnx(src, path, preset, feeds, config.calibration, config.percentile,
                                pad_id=predictor.pad_id)
        return path

    candidates = [("static-int8", build_static), ("dynamic-int8", build_dynamic),
                  (f"mixed ({len(mixed['fp32_units'])} FP32 units)", lambda: mixed_path),
                  ("fp32", lambda: src)]
    choice = sens.accuracy_aware(
        candidates, report["fp32_score"], config.max_drop,
        score_fn=lambda p: sens.dev_score(src_folder, dev_set, p, config.threads),
        latency_fn=lambda p: sens.latency_ms(src_folder, p, timing, threads=1))
    if choice["chosen"] is None:
        raise CompressorError("no configuration met the tolerance, not even FP32")
    result.update(chosen=choice["chosen"], tried=[{k: v for k, v in t.items() if k != "path"}
                                                  for t in choice["tried"]])
    if choice["chosen"].startswith("mixed"):
        result["fp32_units"] = mixed["fp32_units"]
    return choice["path"], result


def _qat(model, trained_dir, config, preset, task_spec, train_set, dev_set):
    from ..models import load_for_task, read_meta, save_checkpoint
    from ..train import TrainConfig
    from .qat import qat_train

    net, tokenizer = load_for_task(model, task_spec)
    train_config = TrainConfig(epochs=config.epochs, lr=config.lr, batch_size=config.batch_size,
                               max_length=config.max_length, seed=config.seed, warmup=0.1,
                               weight_decay=0.0, eval_every=config.eval_every, max_steps=config.max_steps,
                               device=config.device)
    result = qat_train(net, tokenizer, train_set, dev_set, train_config, preset.per_channel,
                       preset.reduce_range, config.distill_alpha, config.temperature)
    save_checkpoint(net, tokenizer, trained_dir, {**read_meta(model), "made_by": "quantize:qat"})
    summary = {"fake_quantized_linears": result["fake_quantized_linears"], "steps": result["steps"],
               "train_time_s": result["train_time_s"], "before": result["before"],
               "best": result["best"], "history": result["history"],
               "train_examples": len(train_set)}
    return trained_dir, summary


# -- PyTorch ----------------------------------------------------------------------

def _torch(model, out, config, preset, task_spec, train_set, dev_set, max_length, meta) -> dict:
    from ..models import count_parameters, load_for_task
    from . import torch_int8 as tq

    from .onnx_int8 import is_export_folder

    if is_export_folder(model):
        raise CompressorError(f"backend {config.backend} quantises PyTorch checkpoints; {model} is an ONNX "
                              "export folder (use backend onnxruntime)")
    net, tokenizer = load_for_task(model, task_spec)
    net.eval()
    parameters = count_parameters(net)
    info = {"method": config.method, "backend": config.backend, "preset": preset.to_dict(),
            "exclude": list(config.exclude)}
    calibration = None
    if config.backend == "torchao":
        if config.method in ("fp16", "bf16"):
            tq.cast_model(net, config.method)
            info["method"] = config.method
        else:
            tq.quantize_torchao(net, preset, config.exclude, weight_only=config.method == "weight_only")
            info["weight_only"] = config.method == "weight_only"
    else:
        from .inc import quantize_inc, torch_feeds
        import random

        rows = random.Random(config.seed).sample(list(train_set.examples),
                                                 min(config.calibration_samples, len(train_set)))
        feeds = torch_feeds(tokenizer, rows, max_length, net.config)
        wrapped, calibration = quantize_inc(net, feeds, config.method, config.smoothquant_alpha, max_length)
        info.update(method="inc", inc_method=config.method, calibration_samples=len(feeds),
                    smoothquant_alpha=config.smoothquant_alpha,
                    smoothed_linears=getattr(wrapped, "smoothed_linears", 0))
    size = tq.save_quantized(net, tokenizer, out, meta, info, calibration=calibration)
    return {"engine": "pytorch", "kind": tq.KIND, "parameters": parameters, "size_bytes": size,
            "quantization": info}
