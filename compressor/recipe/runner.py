"""Running a recipe: one folder per stage, a manifest, and resume on re-run.

Each stage writes ``OUT/NN-<stage>/`` through a temporary folder renamed into
place, with ``record.json`` inside. A stage whose fingerprint (its config, its
input's fingerprint, the task and the data) matches the record already on
disk is skipped, so a run stopped midway picks up at its first unfinished
stage, and editing one stage re-runs it and everything after it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

from compressor.core import distributed
from compressor.core.data import data_meta, load_data, resolve_data_dir
from compressor.core.errors import CompressorError
from compressor.core.hub import refresh_card
from compressor.core.io import atomic_dir, read_json, versions, write_json
from compressor.core.models import (checkpoint_meta, count_parameters, load_config, read_meta, resolve_model,
                      size_on_disk)
from compressor.core.errors import terminate_cleanly
from compressor.core.guard import check_files, clean_leftovers, digest_files, run_lock
from compressor.core.registry import TRAINABLE, config_to_dict, get_stage
from compressor.core.settings import resolve_stage_folders
from compressor.recipe.report import write_report
from compressor.recipe.schema import Recipe, load_recipe

MANIFEST = "manifest.json"
RECORD = "record.json"


@dataclass
class StageContext:
    """What a stage function may use: its input, the teacher, the data, where to write."""

    recipe: Recipe
    task: object
    data_dir: Optional[str]
    model_dir: str                 # the model this stage starts from
    teacher_dir: str
    out_dir: str                   # a temporary folder that becomes the stage's folder
    _cache: dict = field(default_factory=dict, repr=False)

    def split(self, name: str):
        """A task split, limited as the recipe says, loaded once per run. A teacher fine-tuned
        with ``--holdout`` gives ``holdout`` (the training rows it did not learn from) and keeps
        them out of ``train``, so no stage trains on the rows a choice may be made on."""
        if name in ("train", "holdout") and name not in self._cache:
            from compressor.core.data import holdout

            train, held = holdout.training_and_held(self.task, self.data_dir, self.recipe.train_limit,
                                                    self.recipe.user_data, self.teacher_dir)
            if held is None and name == "holdout":
                raise CompressorError(f"the teacher {self.teacher_dir} held no training rows out: fine-tune "
                                      "it with compressor finetune --holdout N")
            self._cache["train"] = train
            if held is not None:
                self._cache["holdout"] = held
        if name not in self._cache:
            limit = {"train": self.recipe.train_limit, "dev": self.recipe.dev_limit}.get(name)
            self._cache[name] = load_data(self.task, name, data_dir=self.data_dir, limit=limit,
                                          user_data=self.recipe.user_data)
        return self._cache[name]

    def held_out(self):
        """The training rows the teacher was fine-tuned without, or None when it held none out."""
        self.split("train")   # loads both at once
        return self._cache.get("holdout")

    def stage_dir(self, name: str) -> str:
        """The folder of this run's last ``name`` stage before this one (augmented rows, say)."""
        folder = self._cache.get("stage_dirs", {}).get(name)
        if folder is None:
            raise CompressorError(f"no {name} stage runs before this one in the recipe")
        return folder

    def meta(self, made_by: str, max_length: int) -> dict:
        # the user's files (path, sha256, columns): later commands on a stage's folder need not be told them
        # and the teacher's held-out rows, which no stage trains on: later runs from a stage's
        # folder (a token-pruning recipe on a chain's pruned student, say) still find them
        from compressor.core.data import holdout

        return checkpoint_meta(self.task, max_length, made_by, recipe=self.recipe.name,
                               **data_meta(self.recipe.user_data), **holdout.carried(self.teacher_dir))


def run_recipe(recipe, out: str, data_dir: Optional[str] = None, device: Optional[str] = None,
               log=None, task: Optional[str] = None, teacher: Optional[str] = None) -> dict:
    """Run (or resume) ``recipe`` into folder ``out``; return the manifest. ``task`` and
    ``teacher`` (a task checkpoint) override the recipe file's own."""
    if isinstance(recipe, str):
        recipe = load_recipe(recipe, device=device, task=task, teacher=teacher)
    log = log or (lambda msg: print(msg, file=sys.stderr))
    if distributed.rank() == 0:
        for line in recipe.warnings:   # deprecated forms it still takes (flat training keys)
            log(f"note: {line}")
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise CompressorError(f"output {out} is a file, not a folder")
    distributed.init(recipe.device)
    try:
        if not distributed.is_main():
            # the other processes of a data-parallel run train alongside rank 0, which alone
            # locks, checks and writes the folder and tells them which stages to run
            return _run_locked(recipe, out, data_dir, lambda msg: None, None)
        preflight(recipe)   # what cannot work is said before the run folder is touched
        os.makedirs(out, exist_ok=True)
        with run_lock(out), terminate_cleanly():
            previous = _claim(out, recipe)
            clean_leftovers(out, log)
            return _run_locked(recipe, out, data_dir, log, previous)
    except (RuntimeError, KeyboardInterrupt) as exc:   # another rank died: one line, not gloo's pages
        if distributed.quiet_exit(exc):
            raise SystemExit(distributed.QUIET_EXIT) from None   # the launcher says which one
        if distributed.peer_lost(exc):
            raise distributed.peer_lost_error() from None
        raise


def _run_locked(recipe: Recipe, out: str, data_dir, log, previous: Optional[dict]) -> dict:
    data = recipe.data_dir or data_dir
    data = data if data == "embedded" else resolve_data_dir(data)
    data_key = data if data in (None, "embedded") else os.path.abspath(data)
    base = {"task": recipe.task.name, "data": data_key, "files": _files_key(recipe.user_data),
            "train_limit": recipe.train_limit, "dev_limit": recipe.dev_limit}
    manifest = {"recipe": recipe.name, "source": os.path.abspath(recipe.source)
                if os.path.exists(recipe.source) else recipe.source,
                "digest": recipe.digest, "task": recipe.task.name, "stages": [],
                "made": _made_before(previous)}
    main = distributed.is_main()
    for dirname in ["00-teacher"] + [spec.dirname for spec in recipe.stages] if main else []:
        _refuse_foreign(out, dirname, manifest)
    ctx_args = dict(recipe=recipe, task=recipe.task, data_dir=data)
    shared_cache: dict = {}

    teacher_finetune = asdict(recipe.teacher_finetune) if recipe.teacher_finetune else None
    teacher_source = resolve_model(recipe.teacher_model)
    _check_teacher(recipe, teacher_source)
    fingerprint = _digest({**base, "stage": "teacher", "model": _model_key(teacher_source),
                           "finetune": teacher_finetune})
    record = _run_stage(out, "00-teacher", fingerprint, log, lambda ctx: _teacher(ctx, recipe),
                        StageContext(**ctx_args, model_dir=teacher_source,
                                     teacher_dir=teacher_source, out_dir="", _cache=shared_cache),
                        produces=TRAINABLE, config=teacher_finetune, name="teacher",
                        manifest=manifest, trains=teacher_finetune is not None)
    rerun = not record.get("_skipped")
    teacher_dir = _abs(out, record["model_dir"])
    teacher_score = record["score"]
    teacher_held = (record.get("holdout") or {}).get("score")
    _append(manifest, record, out)

    current = record
    for spec in recipe.stages:
        stage_type = get_stage(spec.name)
        config = config_to_dict(spec.config)
        fingerprint = _digest({**base, "stage": spec.name, "config": config,
                               "input": current["fingerprint"]})
        ctx = StageContext(**ctx_args, model_dir=_abs(out, current["model_dir"]),
                           teacher_dir=teacher_dir, out_dir="", _cache=shared_cache)
        if current.get("at_chance"):
            log(f"[{spec.dirname}] starts from {current['dir']}, a model at chance (dev score "
                f"{current['score']:.2f}, majority-class baseline {current['at_chance']:.2f}): "
                "its figures say little")
        record = _run_stage(out, spec.dirname, fingerprint, log,
                            # "recipe" in a stage-folder setting (augment: recipe) names an earlier stage's folder
                            lambda c, st=stage_type, cfg=spec.config: st.run(c, resolve_stage_folders(cfg, c.stage_dir)),
                            ctx, produces=stage_type.produces, config=config, name=spec.name,
                            inherited=current, teacher_score=teacher_score,
                            manifest=manifest, force=rerun, trains=_trains(spec.config),
                            teacher_held=teacher_held)
        rerun = rerun or not record.get("_skipped")
        _append(manifest, record, out)
        shared_cache.setdefault("stage_dirs", {})[spec.name] = os.path.join(out, spec.dirname)
        if stage_type.produces is not None:
            current = record
    if main:
        _drop_stale(out, manifest)
        manifest["report"] = write_report(out, manifest)
        write_json(os.path.join(out, MANIFEST), manifest)
    return distributed.broadcast(manifest)


def _trains(config) -> bool:
    """Whether a stage trains, so that every process of a data-parallel run takes part."""
    from compressor.engine.train import TrainConfig

    # a method that trains composes a train section; one that recovers by training (prune,
    # share) runs in every process, recover.mode none too: its choices (which heads go) are
    # rank 0's, broadcast to the others
    trains = isinstance(config, TrainConfig) or isinstance(getattr(config, "train", None), TrainConfig)
    return trains or hasattr(config, "recover")


def _run_stage(out, dirname, fingerprint, log, fn, ctx, produces, config, name,
               inherited=None, teacher_score=None, manifest=None, force=False,
               trains=True, teacher_held=None) -> dict:
    """Run one stage (or skip it). Under several processes rank 0 decides and writes; the
    others run training stages with it into a throwaway folder and take its record. A stage
    that writes a model and scores it on dev is scored on the teacher's held-out rows as well
    (``holdout`` in its record, against ``teacher_held``, the teacher's score there), so that
    choices between runs can be made on rows dev is not."""
    if not distributed.is_main():
        skipped = distributed.broadcast(None)
        if skipped is not None:
            return skipped
        if trains:
            with tempfile.TemporaryDirectory(prefix="compressor-rank-") as tmp:
                ctx.out_dir = tmp
                fn(ctx)
        return distributed.broadcast(None)
    folder = os.path.join(out, dirname)
    record_file = os.path.join(folder, RECORD)
    if dirname not in manifest["made"]:   # (no folder of the user's is there: checked up front)
        # claimed in the manifest before the folder appears, so a resumed run knows it is ours
        manifest["made"].append(dirname)
        write_json(os.path.join(out, MANIFEST), manifest)
    skipped = None
    if os.path.isfile(record_file) and not force:
        old = _read_record(record_file)
        if old is None:
            log(f"[{dirname}] {RECORD} is damaged (not a stage record): running it again")
        elif old.get("fingerprint") == fingerprint:
            damage = check_files(folder, old.get("files"))
            if damage is None:
                log(f"[{dirname}] unchanged since its last run: skipped")
                skipped = {**old, "_skipped": True}
            else:
                log(f"[{dirname}] {damage}: running it again")
    if distributed.broadcast(skipped) is not None:
        return skipped
    _keep_foreign_files(out, folder, dirname, log)
    log(f"[{dirname}] running")
    from compressor.engine.scoring import chance_check
    from compressor.engine.train import TrackerLogs

    start = time.perf_counter()
    with atomic_dir(folder) as tmp:
        ctx.out_dir = tmp
        with TrackerLogs() as logs:   # trackers' logs (report_to) go to the stage's runs/
            result = fn(ctx) or {}
        logs.keep(tmp)
        record = {"stage": name, "dir": dirname, "config": config, "fingerprint": fingerprint,
                  "task": ctx.task.name}
        record.update(result)
        if produces is None:
            model_dir = ctx.model_dir
            record.setdefault("parameters", (inherited or {}).get("parameters"))
            record.setdefault("size_bytes", (inherited or {}).get("size_bytes"))
            record["kind"] = (inherited or {}).get("kind", TRAINABLE)
        else:
            model_dir = record.pop("model_dir", tmp)
            record["kind"] = produces
            record.setdefault("size_bytes", size_on_disk(model_dir))
        record["model_dir"] = _rel(out, folder if model_dir == tmp else model_dir)
        if teacher_score is not None and record.get("score") is not None:
            record["teacher_score"] = teacher_score
            record["retention"] = round(record["score"] / teacher_score, 4) if teacher_score else None
        split = record.get("split", "dev")
        if record.get("score") is not None and split == "dev" and produces is not None:
            held = _held_out_score(model_dir, ctx, teacher_held)
            if held is not None:
                record["holdout"] = held
        if record.get("score") is not None and split in ("dev", "train"):   # at chance: say so
            chance_check(record, ctx.split(split), say=lambda msg: log(f"[{dirname}] {msg}"))
        record["wall_time_s"] = round(time.perf_counter() - start, 2)
        record["versions"] = versions()
        refresh_card(tmp, dirname, record)   # the model card with this stage's figures
        record["files"] = digest_files(tmp)
        write_json(os.path.join(tmp, RECORD), record)
    score = record.get("score")
    log(f"[{dirname}] done in {record['wall_time_s']:.0f} s"
        + (f": {ctx.task.main_metric} score {score:.2f}" if score is not None else ""))
    return distributed.broadcast(record)   # the folder is in place: the next stage may read it


def _keep_foreign_files(out: str, folder: str, dirname: str, log) -> None:
    """Before a stage's folder is replaced, move the files its record does not list (a user's
    notes, say) aside into ``OUT/kept-NN-stage[-K]/``, with a line saying where. A folder whose
    record is damaged or missing lists nothing: all its files but the record are kept."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return
    record = _read_record(os.path.join(folder, RECORD))
    known = set((record or {}).get("files") or {}) | {RECORD}
    foreign = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel not in known:
                foreign.append(rel)
    if not foreign:
        return
    keep, k = os.path.join(out, f"kept-{dirname}"), 1
    while os.path.lexists(keep):
        k += 1
        keep = os.path.join(out, f"kept-{dirname}-{k}")
    for rel in foreign:
        os.makedirs(os.path.dirname(os.path.join(keep, rel)), exist_ok=True)
        os.replace(os.path.join(folder, rel), os.path.join(keep, rel))
    what = "the stage did not write" if record is not None else \
        f"of the old folder (its {RECORD} cannot say which the stage wrote)"
    log(f"[{dirname}] {len(foreign)} file(s) {what} ({foreign[0]}"
        f"{', ...' if len(foreign) > 1 else ''}) moved to {keep} before the folder is replaced")


def _read_record(path: str) -> Optional[dict]:
    """A stage's record, or None where the file is damaged (not JSON, not a mapping)."""
    try:
        record = read_json(path)
    except (CompressorError, OSError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def preflight(recipe: Recipe) -> None:
    """One line, before the run folder is made or its manifest written, for what would only fail
    once a stage starts: a CUDA device on a machine without one (the recipe's or a stage's), and a
    teacher folder whose weights are only a pickle (never loaded)."""
    from compressor.core.device import resolve_device
    from compressor.core.models import refuse_pickle_only

    devices = [(recipe.device, "device")] + [
        (device, f"stage {spec.dirname}: {key}") for spec in recipe.stages
        for key, device in _devices(spec.config)]
    for device, where in devices:
        if isinstance(device, str) and device.lower().startswith("cuda"):
            try:
                resolve_device(device)
            except CompressorError as exc:
                raise CompressorError(f"{recipe.source}: {where}: {exc}") from None
    refuse_pickle_only(resolve_model(recipe.teacher_model))


def _devices(config):
    """``(key, device)`` of each device a stage's config names: its own, and its training
    sections' (``train.device``, ``recover.train.device``)."""
    for key, owner in (("device", config), ("train.device", getattr(config, "train", None)),
                       ("recover.train.device", getattr(getattr(config, "recover", None), "train", None))):
        if isinstance(getattr(owner, "device", None), str):
            yield key, owner.device


def _check_teacher(recipe: Recipe, source: str) -> None:
    """Before anything runs: the teacher loads, and has a task head unless it is fine-tuned first."""
    config = load_config(source)
    is_classifier = any(a.endswith("ForSequenceClassification")
                        for a in (getattr(config, "architectures", None) or []))
    if recipe.teacher_finetune is None and not is_classifier:
        raise CompressorError(
            f"teacher {recipe.teacher_model} is a base encoder with no task head; "
            "add teacher.finetune settings to the recipe to fine-tune it first")
    trained_on = read_meta(source).get("task")   # {} for a hub id or a foreign folder
    if (recipe.teacher_finetune is None and trained_on and recipe.task is not None
            and recipe.user_data is None and trained_on != recipe.task.name):
        raise CompressorError(
            f"teacher {recipe.teacher_model} was trained on {trained_on}, but the recipe's task is "
            f"{recipe.task.name}: give a {recipe.task.name} checkpoint (--teacher) or that task (--task)")


def _teacher(ctx: StageContext, recipe: Recipe) -> dict:
    """Fine-tune the base model, or score the given checkpoint, to fix the teacher's score."""
    from compressor.core.metrics import task_score
    from compressor.core.models import load_for_task

    if recipe.teacher_finetune is None:
        net, tokenizer = load_for_task(ctx.model_dir, ctx.task)
        metrics = _scored(ctx.model_dir, ctx, ctx.split("dev"), "score teacher", (net, tokenizer))
        return {"model_dir": ctx.model_dir, "metrics": metrics, "split": "dev",
                "score": task_score(ctx.task, metrics), "parameters": count_parameters(net),
                "size_bytes": size_on_disk(ctx.model_dir)}
    from compressor.recipe.stage import finetune_stage

    result = finetune_stage(ctx, recipe.teacher_finetune)
    return {**result, "train_examples": len(ctx.split("train"))}


def _scored(model_dir: str, ctx: StageContext, rows, desc: str, model=None) -> dict:
    """The metrics of the model in ``model_dir`` on ``rows`` at its max_length, on the recipe's
    device, on the path dev is scored on (an ONNX graph in onnxruntime), kept in the score cache
    (``$COMPRESSOR_SCORE_CACHE``); ``model``: its (net, tokenizer) if loaded already, else it is
    loaded only when the cache does not have the score."""
    from compressor.core.device import resolve_device
    from compressor.core.models import load_for_task
    from compressor.engine.scoring import score, scored_before

    max_length = read_meta(model_dir).get("max_length", 128)
    device = resolve_device(ctx.recipe.device)

    def compute():
        net, tokenizer = model or load_for_task(model_dir, ctx.task, pytorch=False)
        return score(net.to(device), tokenizer, rows, max_length, device=device, desc=desc)

    return scored_before(model_dir, rows, max_length, device, compute)


def _held_out_score(model_dir: str, ctx: StageContext, teacher_held: Optional[float]) -> Optional[dict]:
    """The model's score on the teacher's held-out rows (None when the teacher held none out)."""
    from compressor.core.metrics import task_score

    held = ctx.held_out()
    if held is None or not len(held):
        return None
    metrics = _scored(model_dir, ctx, held, "score held-out rows")
    value = task_score(ctx.task, metrics)
    result = {"metrics": metrics, "score": value, "rows": len(held)}
    if teacher_held:
        result["teacher_score"] = teacher_held
        result["retention"] = round(value / teacher_held, 4)
    return result


def _claim(out: str, recipe: Recipe) -> Optional[dict]:
    """Refuse a folder that holds something other than a run of this recipe; return its manifest."""
    manifest_file = os.path.join(out, MANIFEST)
    if os.path.isfile(manifest_file):
        manifest = read_json(manifest_file)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), list):
            raise CompressorError(f"{manifest_file}: not a run manifest; choose another --out")
        if manifest.get("recipe") != recipe.name or manifest.get("task") != recipe.task.name:
            raise CompressorError(
                f"output folder {out} holds a run of recipe '{manifest.get('recipe')}' "
                f"(task {manifest.get('task')}); choose another --out or delete it")
        return manifest
    visible = sorted(f for f in os.listdir(out) if not f.startswith("."))
    if visible:
        raise CompressorError(f"output folder {out} holds other files "
                              f"({visible[0]}{', ...' if len(visible) > 1 else ''}) and no run "
                              f"{MANIFEST}; choose an empty or new folder")
    return None


def _refuse_foreign(out: str, dirname: str, manifest: dict) -> None:
    """A stage never replaces a folder that this output's runs did not make."""
    folder = os.path.join(out, dirname)
    if dirname not in manifest["made"] and os.path.lexists(folder):
        raise CompressorError(f"{folder} was not made by a run of this recipe (the manifest "
                              "does not list it); move it out of the run folder")


def _made_before(previous: Optional[dict]) -> list:
    """The stage folders earlier runs into this output made (older manifests: their stages)."""
    if not previous:
        return []
    made = previous.get("made")
    if made is None:
        made = [s.get("dir") for s in previous.get("stages", [])]
    return sorted({d for d in made if isinstance(d, str) and os.sep not in d and d[:1] != "."})


def _drop_stale(out: str, manifest: dict) -> None:
    """Remove stage folders an earlier, longer or reordered version of this recipe made.

    Only folders listed in the manifest's ``made`` (stage folders this output's
    runs wrote, each with its record) are touched; anything else is the user's.
    """
    keep = {s["dir"] for s in manifest["stages"]}
    for name in [d for d in manifest["made"] if d not in keep]:
        folder = os.path.join(out, name)
        if os.path.isfile(os.path.join(folder, RECORD)) and not os.path.islink(folder):
            shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            manifest["made"].remove(name)


def _append(manifest: dict, record: dict, out: str) -> None:
    manifest["stages"].append({k: record.get(k) for k in (
        "dir", "stage", "kind", "model_dir", "fingerprint", "metrics", "score", "retention",
        "parameters", "size_bytes", "wall_time_s")})
    if distributed.is_main():
        write_json(os.path.join(out, MANIFEST), manifest)


def _model_key(path: str) -> str:
    """Identify a teacher by folder and weights' timestamp, so a re-trained one re-runs the recipe."""
    if not os.path.isdir(path):
        return path
    stamps = sorted((f, int(os.path.getmtime(os.path.join(path, f))))
                    for f in os.listdir(path) if f.endswith((".safetensors", ".bin", ".json")))
    return json.dumps([os.path.abspath(path), stamps])


def _files_key(user_data):
    """The user's data files by path and timestamp, so an edited file re-runs the recipe."""
    if user_data is None:
        return None
    return [[os.path.abspath(p), int(os.path.getmtime(p))] if p and os.path.exists(p) else p
            for p in (user_data.train, user_data.dev)] + [list(user_data.text_columns),
                                                          user_data.label_column]


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _rel(out: str, path: str) -> str:
    path = os.path.abspath(path)
    return os.path.relpath(path, out) if path.startswith(out + os.sep) else path


def _abs(out: str, path: str) -> str:
    return path if os.path.isabs(path) or not os.path.exists(os.path.join(out, path)) \
        else os.path.join(out, path)
