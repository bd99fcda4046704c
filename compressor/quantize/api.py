"""One verb: ``quantize(model, out, config)``; the config's type is the method.

Each method is a config type in ``configs.py`` (``OrtStaticConfig``, ``TorchaoDynamicConfig``,
``IncStaticConfig``, ...) holding only its own settings, and one function below registered
for that type with ``register_quantizer``; ``quantize`` does what every method shares
(checks, data, scoring, the record) and looks the method's function up by type.
Recipes and the command line name the type by ``backend`` and ``method``
(``quantize_config``); ``configs.py`` has the table of methods.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Optional

from compressor.core.errors import CompressorError
from compressor.core.io import check_output_dir, versions, write_json
from compressor.quantize.configs import (IncDynamicConfig, IncStaticConfig, OrtAutoConfig, OrtDynamicConfig, OrtFP16Config,
                      OrtMixedConfig, OrtQATConfig, OrtStaticConfig, QuantizeConfig, TorchaoBF16Config,
                      TorchaoDynamicConfig, TorchaoFP16Config, TorchaoWeightOnlyConfig, quantizer_for,
                      register_quantizer)

RECORD_FILE = "quantize.json"


@dataclass
class QuantizeJob:
    """What a method's function works on besides its config."""

    model: str                 # a checkpoint or an ONNX export folder
    out: str                   # the folder to write
    task: object
    train_set: object          # None unless the method uses it (config.uses_train)
    dev_set: object            # None when the dev split cannot be loaded
    max_length: int
    meta: dict                 # compressor.json of the output
    holdout_set: object = None  # the rows the teacher was fine-tuned without (search_on: holdout)
    teacher_dir: Optional[str] = None  # the recipe's teacher (QAT's teacher: recipe)


def quantize(model: str, out: str, config: Optional[QuantizeConfig] = None, task: Optional[str] = None,
             data_dir: Optional[str] = None, train_set=None, dev_set=None, meta: Optional[dict] = None,
             overwrite: bool = False, holdout_set=None, user_data=None,
             teacher_dir: Optional[str] = None) -> dict:
    """Quantise ``model`` (a checkpoint or an ONNX export folder) into the folder ``out``.

    The dev split is scored when it can be loaded (``dev_set`` or the task's
    data); static calibration, INC and QAT draw on the training split. A model trained on the
    user's files uses those its ``compressor.json`` records, or ``user_data``'s.
    Returns the record, also written to ``out/quantize.json``.
    """
    from compressor.core.data import data_for, load_data
    from compressor.core.metrics import task_score
    from compressor.core.models import read_meta
    from compressor.engine.scoring import _task_for

    config = config or OrtDynamicConfig()
    config.check()
    _warn_if_it_saturates_here(config)
    method = quantizer_for(config)
    check_output_dir(out, overwrite)
    if not os.path.isdir(model):
        from compressor.core.models import resolve_model

        model = resolve_model(model)
    task_spec, model_meta = _task_for(model, task)
    max_length = model_meta.get("max_length", 128)
    user_data = data_for(model, task_spec, user_data)   # the user's files it was trained on
    if train_set is None and config.uses_train:
        train_set = load_data(task_spec, "train", data_dir, None, user_data)
    if holdout_set is None and getattr(config, "search_on", None) == "holdout":
        from compressor.core.data import holdout

        holdout_set = holdout.held_rows(model, task_spec, data_dir, user_data, needs="search_on: holdout")
    unscored = None
    if dev_set is None:
        try:
            dev_set = load_data(task_spec, "dev", data_dir, None, user_data)
        except CompressorError as exc:
            if config.needs_dev or user_data is not None:   # the user's own dev file: say what is wrong
                raise
            dev_set, unscored = None, str(exc).splitlines()[0]
    preset = config.hardware()
    start = time.perf_counter()
    record = {"method": config.method, "backend": config.backend,
              "preset": preset.to_dict() if preset else None,
              "source": os.path.abspath(model), "task": task_spec.name, "config": asdict(config)}
    meta = meta or {**read_meta(model), "made_by": f"quantize:{config.backend}:{config.method}"}
    record.update(method(QuantizeJob(model, out, task_spec, train_set, dev_set, max_length, meta, holdout_set,
                                     teacher_dir), config))
    if dev_set is not None and "metrics" not in record:
        record["metrics"] = _score_output(out, config, dev_set, max_length)
    if record.get("metrics") is not None:
        record["score"] = task_score(task_spec, record["metrics"])
        record["split"] = "dev"
        record["examples"] = len(dev_set)
    elif unscored:
        record["unscored"] = f"no dev data to score on: {unscored}"
    record["wall_time_s"] = round(time.perf_counter() - start, 2)
    record["versions"] = versions()
    write_json(os.path.join(out, RECORD_FILE), record)
    return record


def _score_output(out: str, config: QuantizeConfig, dev_set, max_length: int) -> dict:
    if config.produces_onnx:  # as export, eval and bench score a graph: one graph, one score
        from compressor.export.onnx import score_onnx

        return score_onnx(out, dev_set, threads=config.threads)
    import torch

    from compressor.engine.scoring import score
    from compressor.quantize.torch_int8 import load_quantized

    net, tokenizer = load_quantized(out)
    return score(net, tokenizer, dev_set, max_length, device=torch.device("cpu"),
                 desc="score quantised")


# -- ONNX Runtime -------------------------------------------------------------

def _onnx(job: QuantizeJob, config, writer, trained=None) -> dict:
    """What every ONNX Runtime method shares: the FP32 graph (``job.model``'s export, or what
    ``trained(work, info)`` returns), refused if it is quantised already, and an export folder
    whose ``model.onnx`` the method writes: ``writer(src_folder, work, quant, info)`` returns
    ``write(path)``, noting what it did in ``quant`` (the manifest) and ``info`` (the record)."""
    from compressor.export import int8 as ox

    info = {"engine": "onnxruntime", "kind": "onnx"}
    model = job.model
    with tempfile.TemporaryDirectory(prefix="compressor-quantize-") as work:
        if trained is not None:
            model = trained(work, info)
        src_folder = ox.ensure_export(model, os.path.join(work, "export"))
        src = ox.onnx_file(src_folder)
        from compressor.export.onnx import external_data_files

        external_data_files(src)   # checked before anything (calibration, scoring) reads the graph
        parameters = ox.count_weights(src)
        done = ox.quantization_of(src_folder)
        if done:
            raise CompressorError(f"{model} is already quantised ({done.get('method')}); "
                                  "quantise its FP32 export instead")
        preset = config.hardware()
        quant = {"method": config.method, "preset": preset.to_dict() if preset else None,
                 "backend": "onnxruntime"}
        write = writer(src_folder, work, quant, info)
        fp32_of_written = info.pop("fp32_source", src_folder)   # a QAT candidate's own FP32 export
        if getattr(config, "exclude", None):
            quant["excluded_nodes"] = list(config.exclude)
        report_files = info.get("search", {}).pop("files", None)
        ox.write_export(src_folder, job.out, write, quant)
        # every graph written is run against its FP32 source: a wrong graph is refused (and removed)
        try:
            info["parity_vs_fp32"] = ox.parity_vs_fp32(fp32_of_written, job.out, job.dev_set.examples
                                                       if job.dev_set is not None else None, config.threads)
        except CompressorError:
            shutil.rmtree(job.out, ignore_errors=True)
            raise
        if report_files:
            for path in report_files.values():
                shutil.copy2(path, os.path.join(job.out, os.path.basename(path)))
            info["sensitivity_files"] = [os.path.basename(p) for p in report_files.values()]
    info["size_bytes"] = os.path.getsize(os.path.join(job.out, ox.ONNX_FILE))
    info["parameters"] = parameters
    return info


def _dynamic_writer(config):
    def writer(src_folder, work, quant, info):
        from compressor.export import int8 as ox

        src = ox.onnx_file(src_folder)
        return lambda path: ox.quantize_dynamic_onnx(src, path, config.hardware(), config.optimize,
                                                     nodes_to_exclude=config.exclude)
    return writer


@register_quantizer(OrtDynamicConfig)
def ort_dynamic(job: QuantizeJob, config: OrtDynamicConfig) -> dict:
    """Dynamic INT8: weights quantised once, each activation's range taken per input."""
    return _onnx(job, config, _dynamic_writer(config))


@register_quantizer(OrtQATConfig)
def ort_qat(job: QuantizeJob, config: OrtQATConfig) -> dict:
    """Quantisation-aware training of the checkpoint (Q8BERT), then dynamic INT8 of its graph."""
    from compressor.export.onnx import is_export

    if is_export(job.model):
        raise CompressorError(f"QAT trains a PyTorch checkpoint; {job.model} is an ONNX export folder")

    def trained(work, info):
        folder, info["qat"] = _qat(job.model, os.path.join(work, "trained"), config, config.hardware(),
                                   job.task, job.train_set, job.dev_set, job.teacher_dir)
        return folder
    return _onnx(job, config, _dynamic_writer(config), trained)


@register_quantizer(OrtStaticConfig)
def ort_static(job: QuantizeJob, config: OrtStaticConfig) -> dict:
    """Static INT8: activation ranges fixed from calibration on training rows."""
    def writer(src_folder, work, quant, info):
        from compressor.export.runtime import Predictor

        from compressor.export import int8 as ox

        src = ox.onnx_file(src_folder)
        predictor = Predictor(src_folder, threads=config.threads)  # calibrates on what it is fed
        feeds = ox.calibration_feeds(predictor, job.train_set.examples, config.calibration_samples,
                                     config.seed)
        quant.update(calibration=config.calibration, calibration_samples=len(feeds),
                     percentile=config.percentile if config.calibration == "percentile" else None,
                     smoothquant_alpha=config.smoothquant_alpha or None, embeddings_int8=config.embeddings_int8)
        def write(path):
            done = ox.quantize_static_onnx(
                src, path, config.hardware(), feeds, config.calibration, config.percentile, config.exclude,
                optimize=config.optimize, pad_id=predictor.pad_id, smoothquant_alpha=config.smoothquant_alpha,
                embeddings_int8=config.embeddings_int8)
            if done.get("embeddings_int8"):   # which tables, and their largest rounding error
                quant["int8_tables"] = done["embeddings_int8"]
        return write
    return _onnx(job, config, writer)


@register_quantizer(OrtFP16Config)
def ort_fp16(job: QuantizeJob, config: OrtFP16Config) -> dict:
    """FP16 weights and activations."""
    def writer(src_folder, work, quant, info):
        from compressor.export import int8 as ox

        return lambda path: ox.convert_fp16_onnx(ox.onnx_file(src_folder), path)
    return _onnx(job, config, writer)


def _search_writer(job: QuantizeJob, config):
    def writer(src_folder, work, quant, info):
        qat = _qat_candidate(job, config) if "qat" in getattr(config, "candidates", ()) else None
        chosen_path, search = _search(src_folder, work, config, config.hardware(), job.train_set,
                                      job.dev_set, job.holdout_set, job.model, job.max_length, qat=qat)
        qat_fp32 = (search.get("qat") or {}).pop("fp32_folder", None)   # in the temporary work folder
        if search.get("chosen") == QAT_CANDIDATE:
            info["fp32_source"] = qat_fp32
        info["search"] = search
        quant.update({k: search.get(k) for k in ("fp32_units", "chosen") if k in search})
        return lambda path: shutil.copyfile(chosen_path, path)
    return writer


QAT_CANDIDATE = "qat-int8"
POST_TRAINING_INT8 = ("static-int8", "dynamic-int8", "dynamic-int8-per-tensor")


def _qat_candidate(job: QuantizeJob, config):
    """``build(work, rows)``: the PyTorch checkpoint behind ``job.model`` trained with its products
    fake-quantised (``config.qat_*``; the training's one evaluation is on ``rows``, the search rows,
    not dev), exported again; returns (that FP32 export folder, the training's summary)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from compressor.export import int8 as ox
    from compressor.export.onnx import checkpoint_behind

    def build(work, rows):
        checkpoint = checkpoint_behind(job.model, "the qat candidate")
        settings = SimpleNamespace(train=replace(config.qat_train, eval_every=10 ** 9),   # once, at the end
                                   distill_alpha=config.qat_distill_alpha, temperature=config.qat_temperature,
                                   teacher=config.qat_teacher)
        trained, summary = _qat(checkpoint, os.path.join(work, "qat-trained"), settings, config.hardware(),
                                job.task, job.train_set, rows, job.teacher_dir)
        folder = ox.ensure_export(trained, os.path.join(work, "qat-export"))
        return folder, {"checkpoint": checkpoint, "scored_on": rows.split, **summary}
    return build


@register_quantizer(OrtMixedConfig)
def ort_mixed(job: QuantizeJob, config: OrtMixedConfig) -> dict:
    """INT8 with the units most sensitive kept FP32 until the criterion is met (max_drop, min_agreement)."""
    return _onnx(job, config, _search_writer(job, config))


@register_quantizer(OrtAutoConfig)
def ort_auto(job: QuantizeJob, config: OrtAutoConfig) -> dict:
    """The fastest of its candidates (static, dynamic, mixed INT8, FP32) that meets the criterion:
    drop within max_drop counting the rows' noise, agreement with FP32 of min_agreement."""
    return _onnx(job, config, _search_writer(job, config))


def search_rows(config, train_set, dev_set, holdout_set=None):
    """The rows a mixed/auto search scores its candidates on: dev (``search_on: dev``; the dev
    score reported afterwards is then the one the choice was made on), ``search_rows`` training
    rows drawn with ``seed`` (``train``) or the teacher's held-out training rows (``holdout``)."""
    if config.search_on == "dev":
        return dev_set
    if config.search_on == "holdout":
        if holdout_set is None or not len(holdout_set):
            raise CompressorError("search_on: holdout needs the rows the teacher was fine-tuned without; "
                                  "none were given")
        return holdout_set
    if train_set is None or not len(train_set):
        raise CompressorError("search_on: train needs the task's training split; none was loaded")
    return train_set.sample(config.search_rows, config.seed, split="train (drawn for the search)")


def row_step(rows_set, max_drop: float) -> Optional[dict]:
    """How much one row moves an accuracy on the search rows (100 / rows points), where that is more
    than ``max_drop``: then a single changed prediction fails the tolerance, so the search keeps
    units FP32 for noise (RTE's 250 held-out rows: 0.4 points against 0.3). None for a regression
    task or where the tolerance is finer-grained than a row. F1 and MCC move in steps of their own;
    the accuracy's is the guide."""
    if rows_set.task.is_regression or not len(rows_set):
        return None
    step = 100.0 / len(rows_set)
    if step <= max_drop:
        return None
    return {"row_points": round(step, 4), "max_drop": max_drop,
            "note": f"max_drop {max_drop} is less than one of the {len(rows_set)} search rows moves an accuracy "
                    f"({step:.2f} points): a single changed prediction keeps a unit FP32; more rows or a "
                    f"larger max_drop would tell noise from cost"}


def _search(src_folder, work, config, preset, train_set, dev_set, holdout_set=None, model=None,
            max_length: int = 128, qat=None) -> tuple:
    """Mixed precision (``mixed``) or the fastest configuration that meets the criterion (``auto``):
    drop within ``max_drop`` counting the rows' noise and agreement with FP32 of ``min_agreement``
    (``sensitivity.Criterion``); units ordered by their divergence from FP32 alone or
    (``sensitivity: hessian``) by the Hessian of ``model``'s loss."""
    from dataclasses import replace

    from compressor.export.runtime import Predictor

    from compressor.export import int8 as ox
    from compressor.quantize import sensitivity as sens

    src = ox.onnx_file(src_folder)
    search_set = search_rows(config, train_set, dev_set, holdout_set)
    coarse = row_step(search_set, config.max_drop)
    if coarse:
        print(f"note: {coarse['note']}", file=sys.stderr)
    reference = sens.graph_outputs(src_folder, search_set, threads=config.threads)   # the FP32 graph's
    criterion = sens.Criterion(search_set, reference, config.max_drop, config.min_agreement, config.confidence,
                               config.seed)
    wanted = getattr(config, "candidates", ["mixed"])
    result = {"search_on": config.search_on, "search_split": search_set.split, "search_rows": len(search_set),
              "criterion": criterion.settings(), **({"coarse_rows": coarse} if coarse else {})}
    files = {}
    mixed_path = os.path.join(work, "mixed.onnx")
    if "mixed" in wanted:
        report_dir = os.path.join(work, "report")
        os.makedirs(report_dir, exist_ok=True)
        # refine: whole layers first, then the products inside the layers kept FP32
        granularity = "layer" if config.granularity == "refine" else config.granularity
        if getattr(config, "sensitivity", "measured") == "hessian":
            from compressor.quantize import hessian

            report = hessian.hessian_report(model or src_folder, src_folder, search_set, preset,
                                            granularity, config, max_length)
            report["fp32_score"] = criterion.fp32_score
            files = hessian.write_report(report, report_dir)
        else:
            report = sens.measure_sensitivity(src_folder, search_set, preset, work, granularity,
                                              config.threads, reference=reference)
            files = sens.write_report(report, report_dir, dev_set.task.main_metric)
        mixed = sens.mixed_precision(src_folder, mixed_path, report, search_set, preset, criterion,
                                     config.threads)
        if config.granularity == "refine":
            products, mixed = sens.refine_mixed(src_folder, mixed_path, mixed, search_set, preset, criterion,
                                                work, config.threads, reference=reference)
            if products is not None:
                result["refine_sensitivity"] = products
        result.update(sensitivity_measure=getattr(config, "sensitivity", "measured"), sensitivity=report,
                      mixed=mixed)
    if config.method == "mixed":
        if not mixed["met"]:
            raise CompressorError(f"no mix of FP32 and INT8 units meets the criterion on {search_set.split} "
                                  f"(max_drop {config.max_drop}, min_agreement {config.min_agreement}); with "
                                  f"every unit FP32 but one: drop {mixed['drop']:.2f} (bound "
                                  f"{mixed['drop_bound']:.2f}), agreement {mixed['agreement']:.4f}")
        result["fp32_units"] = mixed["fp32_units"]
        _append_choice_table(files, result, dev_set, work)
        result["files"] = files
        return mixed_path, result

    # auto: the fastest candidate that meets the criterion
    predictor = Predictor(src_folder, threads=config.threads)
    timing = ox.calibration_feeds(predictor, search_set.examples, 100, config.seed)

    def build_dynamic(name, per_channel):
        def build():
            if per_channel is not None and per_channel == preset.per_channel:
                return None   # the preset's own dynamic INT8: tried as "dynamic"
            path = os.path.join(work, f"auto-{name}.onnx")
            ox.quantize_dynamic_onnx(src, path, preset if per_channel is None
                                     else replace(preset, per_channel=per_channel))
            return path
        return build

    def build_static():
        if train_set is None:
            return None
        feeds = ox.calibration_feeds(predictor, train_set.examples, config.calibration_samples, config.seed)
        path = os.path.join(work, "auto-static.onnx")
        ox.quantize_static_onnx(src, path, preset, feeds, config.calibration, config.percentile,
                                pad_id=predictor.pad_id, smoothquant_alpha=config.smoothquant_alpha,
                                embeddings_int8=config.embeddings_int8)
        return path

    verdicts = {}   # graph path -> whether it met the criterion

    def judge(path):
        verdict = criterion.judge(sens.graph_outputs(src_folder, search_set, path, config.threads))
        verdicts[path] = verdict["meets"]
        return verdict

    built = {}   # candidate name -> graph path

    def named(name, build):
        def run():
            built[name] = build()
            return built[name]
        return name, run

    def build_qat():
        """Trained only when every post-training all-INT8 graph failed the criterion."""
        passed = [n for n in POST_TRAINING_INT8 if verdicts.get(built.get(n))]
        if passed:
            result["qat"] = {"trained": False, "why": f"{passed[0]} met the criterion"}
            return None
        if train_set is None:
            result["qat"] = {"trained": False, "why": "no training rows"}
            return None
        folder, summary = qat(work, search_set)
        path = os.path.join(work, "auto-qat.onnx")
        ox.quantize_dynamic_onnx(ox.onnx_file(folder), path, preset)
        result["qat"] = {"trained": True, "fp32_folder": folder, **summary}
        return path

    builders = {"static": ("static-int8", build_static),
                "dynamic": ("dynamic-int8", build_dynamic("dynamic", None)),
                "dynamic_per_tensor": ("dynamic-int8-per-tensor", build_dynamic("dynamic-per-tensor", False)),
                "qat": (QAT_CANDIDATE, build_qat),
                "mixed": (sens.mixed_candidate_name(len(result["mixed"]["fp32_units"])) if "mixed" in result
                          else "mixed", lambda: mixed_path),
                "fp32": ("fp32", lambda: src)}
    # qat after the post-training graphs it may spare training for
    order = sorted(wanted, key=lambda name: name == "qat")
    choice = sens.accuracy_aware(
        [named(*builders[name]) for name in order], judge_fn=judge,
        latencies_fn=lambda paths: sens.latencies_ms(src_folder, paths, timing, threads=1),
        latency_margin=config.latency_margin)
    result.update(tried=[{k: v for k, v in t.items() if k != "path"} for t in choice["tried"]],
                  latency_margin=config.latency_margin,
                  latency={"rows": len(timing), "batch_size": 1, "threads": 1,
                           "timing": "candidates interleaved: each in turn, 10 rows a turn, the order rotating "
                                     "(sensitivity.latencies_ms); latency_ms is each one's median"})
    if choice["chosen"] is None:
        raise CompressorError(f"no candidate ({', '.join(wanted)}) met the criterion on {search_set.split}: "
                              + "; ".join(f"{t['name']}: {t.get('why_not')}" for t in choice["tried"]))
    result["chosen"] = choice["chosen"]
    if choice["chosen"].startswith("mixed"):
        result["fp32_units"] = result["mixed"]["fp32_units"]
    _append_choice_table(files, result, dev_set, work)
    result["files"] = files
    return choice["path"], result


def _append_choice_table(files: dict, search: dict, dev_set, work: str) -> None:
    """The candidates and mixed steps, judged against FP32, at the end of ``sensitivity.md``
    (``search.md`` when no sensitivity was measured): where a user sees why one was chosen."""
    from compressor.core.io import write_text
    from compressor.quantize import sensitivity as sens

    text = sens.choice_table(search, dev_set.task.main_metric)
    if "table" in files:
        with open(files["table"], "a", encoding="utf-8") as handle:
            handle.write(text)
        return
    files["table"] = os.path.join(work, "search.md")
    write_text(files["table"], "# The INT8 search\n" + text)


def _qat(model, trained_dir, config, preset, task_spec, train_set, dev_set, recipe_teacher=None):
    from compressor.core.models import load_for_task, read_meta, save_checkpoint
    from compressor.engine.teacher import load_teacher
    from compressor.quantize.qat import qat_train

    net, tokenizer = load_for_task(model, task_spec)
    # the soft targets' teacher: the FP32 model as it is now (teacher: input), the recipe's or a folder
    teacher = load_teacher(config.teacher, net, task_spec, recipe_teacher, model,
                           tokenizer=tokenizer)[0] if config.distill_alpha > 0 else None
    result = qat_train(net, tokenizer, train_set, dev_set, config.train, preset.per_channel,
                       preset.reduce_range, config.distill_alpha, config.temperature, teacher=teacher)
    save_checkpoint(net, tokenizer, trained_dir, {**read_meta(model), "made_by": "quantize:qat"})
    summary = {"fake_quantized_linears": result["fake_quantized_linears"], "steps": result["steps"],
               "train_time_s": result["train_time_s"], "before": result["before"],
               "best": result["best"], "history": result["history"],
               "train_examples": len(train_set)}
    return trained_dir, summary


# -- PyTorch ----------------------------------------------------------------------

def _torch(job: QuantizeJob, config, transform) -> dict:
    """What every PyTorch method shares: load the checkpoint, ``transform(net, tokenizer, info)``
    it in place (returning INC's calibration, or None), save a ``torch-quantized`` folder."""
    from compressor.core.models import count_parameters, load_for_task
    from compressor.quantize import torch_int8 as tq

    from compressor.export.onnx import is_export

    if is_export(job.model):
        raise CompressorError(f"backend {config.backend} quantises PyTorch checkpoints; {job.model} is an "
                              "ONNX export folder (use backend onnxruntime)")
    net, tokenizer = load_for_task(job.model, job.task)
    net.eval()
    parameters = count_parameters(net)
    preset = config.hardware()
    info = {"method": config.method, "backend": config.backend,
            "preset": preset.to_dict() if preset else None, "exclude": list(getattr(config, "exclude", []))}
    calibration = transform(net, tokenizer, info)
    size = tq.save_quantized(net, tokenizer, job.out, job.meta, info, calibration=calibration)
    return {"engine": "pytorch", "kind": tq.KIND, "parameters": parameters, "size_bytes": size,
            "quantization": info}


@register_quantizer(TorchaoDynamicConfig)
def torchao_int8(job: QuantizeJob, config: TorchaoDynamicConfig) -> dict:
    """torchao's ``quantize_``: INT8 activations (per input) and weights."""
    from compressor.quantize.torch_int8 import quantize_torchao

    def transform(net, tokenizer, info):
        quantize_torchao(net, config.hardware(), config.exclude)
        info["weight_only"] = False
    return _torch(job, config, transform)


@register_quantizer(TorchaoWeightOnlyConfig)
def torchao_weight_only(job: QuantizeJob, config: TorchaoWeightOnlyConfig) -> dict:
    """torchao's ``quantize_``: INT8 weights, activations in floating point."""
    from compressor.quantize.torch_int8 import quantize_torchao

    def transform(net, tokenizer, info):
        quantize_torchao(net, config.hardware(), config.exclude, weight_only=True)
        info["weight_only"] = True
    return _torch(job, config, transform)


@register_quantizer(TorchaoFP16Config)
@register_quantizer(TorchaoBF16Config)
def torch_cast(job: QuantizeJob, config) -> dict:
    """The model in FP16 or BF16."""
    from compressor.quantize.torch_int8 import cast_model

    def transform(net, tokenizer, info):
        cast_model(net, config.method)
    return _torch(job, config, transform)


@register_quantizer(IncStaticConfig)
@register_quantizer(IncDynamicConfig)
def inc_int8(job: QuantizeJob, config) -> dict:
    """Intel Neural Compressor INT8 (static or dynamic, always calibrated), SmoothQuant first if asked."""
    import random

    from compressor.quantize.inc import quantize_inc, torch_feeds

    def transform(net, tokenizer, info):
        rows = random.Random(config.seed).sample(list(job.train_set.examples),
                                                 min(config.calibration_samples, len(job.train_set)))
        feeds = torch_feeds(tokenizer, rows, job.max_length, net.config)
        wrapped, calibration = quantize_inc(net, feeds, config.method, config.smoothquant_alpha,
                                            job.max_length)
        info.update(method="inc", inc_method=config.method, calibration_samples=len(feeds),
                    smoothquant_alpha=config.smoothquant_alpha,
                    smoothed_linears=getattr(wrapped, "smoothed_linears", 0))
        return calibration
    return _torch(job, config, transform)


def _warn_if_it_saturates_here(config) -> bool:
    """One line on stderr when the config's ONNX Runtime INT8 graph will saturate on this CPU
    (``presets.saturates_here``): its scores here, and the parity check, see wrong outputs."""
    import sys

    from compressor.core.presets import saturates_here

    preset = config.hardware()
    if config.backend != "onnxruntime" or preset is None or not saturates_here(preset):
        return False
    print(f"warning: preset {preset.name} writes full 8-bit weights for CPUs with VNNI or AMX; on this "
          "CPU (AVX2 without VNNI) ONNX Runtime's INT8 products saturate, so what is scored here is wrong "
          "(the parity check may refuse the graph): for a score on this machine use --preset auto",
          file=sys.stderr)
    return True
