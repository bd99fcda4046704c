"""The search: an Optuna study whose trials are candidates, and the pick at the end.

``run_auto(teacher, out, config)`` writes ``OUT/auto.json`` (the teacher, the task, the search
space, the storage, the teacher's held-out score), runs ``workers`` processes on the one study
(this one and ``workers - 1`` started with ``python -m compressor.auto.study OUT``), then picks
the fastest candidate within ``max_drop`` of the teacher on the held-out rows, verifies it on dev
once, checks the latency table against whole-model measurements and writes the report
(:mod:`compressor.auto.report`) and ``OUT/pick`` (a deployable ONNX folder).

The study lives in ``storage`` (default ``sqlite:///OUT/study.db``; a shared database URL or a
``journal:PATH`` file lets processes elsewhere join with ``python -m compressor.auto.study OUT``
on a copy of OUT). Every worker asks the study for a trial and stops once ``trials`` trials are
done or under way, so the workers together run ``trials`` trials; a trial numbered past that is
marked surplus. A run that was stopped leaves its running trial behind: the next run marks a
trial of this host whose process is gone as failed and goes on to ``trials`` trials in all.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Callable, Optional

from compressor.auto.config import AutoConfig, budget_seconds, proxy_settings
from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json

STATE = "auto.json"
DIRECTIONS = ("maximize", "minimize", "minimize")   # held-out score, latency (ms), size (bytes)
FIGURES = ("score", "latency_ms", "size_bytes")


def require_optuna():
    """optuna, or one line naming the extra that brings it."""
    try:
        import optuna
    except ImportError:
        raise CompressorError("compressor auto needs optuna: pip install 'compressor[auto]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def open_storage(url: str, out: str):
    """The study's storage: ``url`` (a database URL or ``journal:PATH``), default SQLite in ``out``."""
    optuna = require_optuna()
    url = url or f"sqlite:///{os.path.join(os.path.abspath(out), 'study.db')}"
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(os.path.abspath(url[len("journal:"):])))
    kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except Exception as exc:   # a wrong URL, a server that does not answer, a driver not installed
        raise CompressorError(f"storage {url}: {str(exc).splitlines()[0]}") from None


def open_study(state: dict, worker: int = 0):
    optuna = require_optuna()
    config = config_of(state)
    if config.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=config.seed + worker, n_startup_trials=max(2, config.trials // 4))
    else:
        sampler = optuna.samplers.NSGAIISampler(seed=config.seed + worker,
                                                population_size=max(2, min(50, config.trials // 2)))
    storage = open_storage(state["storage"], state["out"])
    study = optuna.create_study(storage=storage, study_name=config.study, directions=list(DIRECTIONS),
                                sampler=sampler, load_if_exists=True)
    return study, storage


def config_of(state: dict) -> AutoConfig:
    from compressor.core.settings import config_from_dict

    return config_from_dict(AutoConfig, state["config"], what="auto")


# -- the run ------------------------------------------------------------------------

def run_auto(teacher: str, out: str, config=None, task: Optional[str] = None, data_dir: Optional[str] = None,
             train_limit: Optional[int] = None, dev_limit: Optional[int] = None, log: Optional[Callable] = None,
             **settings) -> dict:
    """Search for the fastest model within ``config.max_drop`` of the teacher ``teacher`` (a task
    checkpoint fine-tuned with ``--holdout N``, or made from one) into the folder ``out``; run it
    again to resume. ``config`` is an :class:`AutoConfig` or a mapping; keyword ``settings`` are
    merged in. Returns the report (also ``out/report.json``)."""
    from compressor.core.settings import config_from_dict

    log = log or (lambda msg: print(msg, file=sys.stderr))
    if config is None or isinstance(config, dict):
        config = config_from_dict(AutoConfig, {**(config or {}), **settings}, what="auto")
    config.check()
    require_optuna()
    state = prepare(teacher, out, config, task, data_dir, train_limit, dev_limit, log)
    from compressor.core import children as lifeline

    # the other workers stop with this one: on Ctrl-C or SIGTERM here (told on the way out) and
    # when this process is killed outright (each follows its parent)
    gpus = worker_gpus(config.device, config.workers)
    if gpus:
        log(f"{config.workers} workers on GPUs {', '.join(gpus[i % len(gpus)] for i in range(config.workers))} "
            "(CUDA_VISIBLE_DEVICES per worker)")
    children = [subprocess.Popen([sys.executable, "-m", "compressor.auto.study", state["out"], str(i)],
                                 env=lifeline.env({**os.environ, **worker_env(gpus, i)}))
                for i in range(1, config.workers)]
    try:
        with lifeline.stopped_with(children):
            search(state["out"], 0, log)
    finally:
        codes = [child.wait() for child in children]
    if any(codes):
        log(f"note: {sum(1 for c in codes if c)} of the other workers stopped with an error")
    from compressor.auto.report import finish

    return finish(state["out"], log)


def worker_gpus(device: str, workers: int) -> list:
    """The GPUs local workers take in turn (as CUDA_VISIBLE_DEVICES names them, or their indices):
    with ``device`` cuda or auto, more than one worker and more than one GPU visible; else none
    (a named ``cuda:N`` stays what it says, one GPU is shared)."""
    if workers < 2 or device not in ("cuda", "auto"):
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = [g.strip() for g in visible.split(",") if g.strip()]
    else:
        try:
            import torch

            gpus = [str(i) for i in range(torch.cuda.device_count())]
        except ImportError:
            gpus = []
    return gpus if len(gpus) > 1 else []


def worker_env(gpus: list, worker: int) -> dict:
    """What local worker ``worker`` adds to its environment: its own GPU when ``gpus`` are shared
    out (worker 0, this process, keeps them all visible and works on the first)."""
    return {"CUDA_VISIBLE_DEVICES": gpus[worker % len(gpus)]} if gpus and worker else {}


def prepare(teacher: str, out: str, config: AutoConfig, task, data_dir, train_limit, dev_limit, log) -> dict:
    """``OUT/auto.json``: made the first time, checked and brought up to date on a resume."""
    from compressor.core.data import data_for, holdout
    from compressor.core.models import resolve_model
    from compressor.engine.scoring import _task_for

    path = os.path.abspath(resolve_model(teacher))
    task_spec, meta = _task_for(path, task)
    if config.student:
        config.student = check_student(config.student, path)
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise CompressorError(f"output {out} is a file, not a folder")
    state_file = os.path.join(out, STATE)
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(state_file):
        raise CompressorError(f"{out} holds files of something else than a search; give another --out")
    user_data = data_for(path, task_spec, None)
    held = holdout.held_rows(path, task_spec, data_dir, user_data, needs="compressor auto")
    max_length = meta.get("max_length", config.max_length)
    config.max_length = max_length
    if os.path.exists(state_file):
        state = read_json(state_file)
        if state["teacher"] != path or state["task"] != task_spec.name:
            raise CompressorError(f"{out} holds the search of {state['teacher']} on {state['task']}; "
                                  "give another --out")
        if state.get("student") != (config.student or None):
            raise CompressorError(f"{out} holds a search from the student {state.get('student')}, not "
                                  f"{config.student or 'none'}; give the same --student to resume, or another --out")
        before = config_of(state).space()
        if before != config.space():
            changed = sorted(k for k in before if before[k] != config.space()[k])
            raise CompressorError(f"{out} holds a search over another space ({', '.join(changed)} differ); "
                                  "give the same settings to resume, or another --out")
        state["config"] = asdict(config)   # trials, workers and budget may change between runs
        log(f"resuming the search in {out}")
    else:
        os.makedirs(out, exist_ok=True)
        state = {"teacher": path, "student": config.student or None, "task": task_spec.name, "out": out,
                 "data_dir": data_dir,
                 "train_limit": train_limit, "dev_limit": dev_limit, "config": asdict(config)}
    state["out"] = out
    state["storage"] = config.storage
    if "seq_len" not in state:
        state["seq_len"] = config.seq_len or _mean_tokens(path, held, max_length)
    if config.target_table:   # another machine's table: every entry the space needs is there, before any work
        from compressor.auto.target import check_target_table

        check_target_table(config, path, task_spec, state["seq_len"], log, student=config.student or None)
    if "teacher_score" not in state:
        state.update(_teacher_figures(path, task_spec, held, config, out, log))
    write_json(state_file, state)
    return state


def check_student(student: str, teacher: str) -> str:
    """The student's folder, once it is known to be a model of the teacher's family that the
    teacher's latency table can price: the same architecture, width, head size and labels."""
    from compressor.core.arch import arch_of
    from compressor.core.models import load_config, resolve_model

    folder = os.path.abspath(resolve_model(student))
    if not os.path.isdir(folder):
        raise CompressorError(f"--student {student}: no such folder")
    theirs, ours = load_config(folder), load_config(teacher)
    spec, mine = arch_of(theirs), arch_of(ours)

    def head_size(config, arch):
        return arch.hidden_size(config) // max(1, arch.num_heads(config))

    same = (theirs.model_type == ours.model_type and spec.hidden_size(theirs) == mine.hidden_size(ours)
            and head_size(theirs, spec) == head_size(ours, mine)
            and getattr(theirs, "num_labels", 2) == getattr(ours, "num_labels", 2))
    if not same:
        raise CompressorError(f"--student {folder} is not of the teacher's family ({theirs.model_type}, width "
                              f"{spec.hidden_size(theirs)}, {getattr(theirs, 'num_labels', 2)} labels against "
                              f"{ours.model_type}, width {mine.hidden_size(ours)}, "
                              f"{getattr(ours, 'num_labels', 2)}): the search compresses a student of the "
                              "teacher's architecture, width, head size and labels")
    return folder


def source_of(state: dict) -> str:
    """The model the trials compress: the student if the search has one, else the teacher."""
    return state.get("student") or state["teacher"]


def _mean_tokens(teacher: str, held, max_length: int) -> int:
    from compressor.core.models import load_tokenizer
    from compressor.export.onnx import example_texts

    tokenizer = load_tokenizer(teacher)
    lengths = []
    for text in example_texts(held.examples):
        pair = (text,) if isinstance(text, str) else tuple(text)
        lengths.append(len(tokenizer(*pair, truncation=True, max_length=max_length)["input_ids"]))
    return max(8, int(round(sum(lengths) / max(1, len(lengths)))))


def _teacher_figures(teacher: str, task_spec, held, config, out: str, log) -> dict:
    """The teacher's ONNX export (FP32) and its held-out score: what every candidate is held to."""
    from compressor.core.metrics import task_score
    from compressor.export.onnx import export_onnx, score_onnx

    folder = os.path.join(out, "teacher-onnx")
    if not os.path.exists(os.path.join(folder, "model.onnx")):
        shutil.rmtree(folder, ignore_errors=True)
        log("exporting the teacher (FP32) to score it on the held-out rows")
        export_onnx(teacher, folder, parity=False)
    rows = _score_rows(held, config)
    score = task_score(task_spec, score_onnx(folder, rows))
    log(f"teacher: held-out score {score:.2f} on {len(rows)} rows")
    return {"teacher_score": round(float(score), 4), "teacher_onnx": folder, "held_rows": len(rows)}


def _score_rows(held, config):
    from dataclasses import replace

    return replace(held, examples=held.examples[:config.score_rows]) if config.score_rows else held


# -- one worker ------------------------------------------------------------------------

def search(out: str, worker: int = 0, log: Optional[Callable] = None) -> int:
    """Work on the study of ``OUT/auto.json`` until it has its trials (or the budget is spent);
    returns how many trials this worker ran."""
    from compressor.auto.candidate import NotCombinable, ProxyTooLow, build_candidate, check_combination, recipe_stages

    optuna = require_optuna()
    log = log or (lambda msg: print(msg, file=sys.stderr))
    state = read_json(os.path.join(out, STATE))
    config = config_of(state)
    _share_cores(config.workers)
    study, storage = open_study(state, worker)
    fail_stale(study, storage, log)
    teacher, source = state["teacher"], source_of(state)
    task_spec, train_set, held, table, source_layers = search_context(state, config, log)
    floor = state["teacher_score"] - config.max_drop - config.prune_margin
    proxy = proxy_settings(config)   # every trial's short recovery, or None
    budget = budget_seconds(config.budget)
    start, ran = time.monotonic(), 0
    while budget is None or time.monotonic() - start < budget:
        if _under_way_before(study, sys.maxsize) >= config.trials:   # done already: ask for nothing
            break
        trial = study.ask()
        trial.set_user_attr("host", platform.node())
        trial.set_user_attr("pid", os.getpid())
        trial.set_user_attr("worker", worker)
        if _under_way_before(study, trial.number) >= config.trials:
            trial.set_user_attr("surplus", True)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        params = suggest(trial, config, source_layers)
        log(f"trial {trial.number} (worker {worker}): {_describe(params)}")
        work = os.path.join(out, "trials", f"{trial.number:04d}")
        plan = recipe_stages(params, source_layers, config.importance_rows, exit_epochs=config.exit_epochs)
        try:
            check_combination(params)
        except NotCombinable as exc:   # counted, as a pruned trial is: a space of such points ends
            trial.set_user_attr("pruned", str(exc))
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log(f"trial {trial.number} pruned: {exc}")
            ran += 1
            continue
        same = _same_candidate(study, plan)
        if same is not None:   # another point of the space that builds the same model (layer rule, all layers kept)
            for key, value in same.user_attrs.items():
                if key not in ("host", "pid", "worker"):
                    trial.set_user_attr(key, value)
            trial.set_user_attr("same_as", same.number)
            study.tell(trial, list(same.values))
            log(f"trial {trial.number}: the same candidate as trial {same.number}")
            ran += 1
            continue
        try:
            cand = build_candidate(source, task_spec, train_set, held, params, work, source_layers, config,
                                   floor=floor, log=log, recover=proxy, teacher=teacher)
            seqs, latency = predict_latency(table, cand, params, state["seq_len"])
        except ProxyTooLow as exc:
            trial.set_user_attr("pruned", str(exc))
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log(f"trial {trial.number} pruned: {exc}")
            _drop_checkpoints(work, None)
            ran += 1
            continue
        except CompressorError as exc:
            trial.set_user_attr("error", str(exc).splitlines()[0])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log(f"trial {trial.number} failed: {str(exc).splitlines()[0]}")
            ran += 1
            continue
        figures = {"score": cand["score"], "latency_ms": latency, "size_bytes": cand["size_bytes"]}
        for key, value in {**figures, "folder": os.path.relpath(cand["folder"], out), "steps": cand["steps"],
                           "layers": cand["layers"], "seqs": seqs, "stages": cand["stages"], "plan": plan,
                           "proxy_recovery": cand["recovery"],
                           **{k: cand[k] for k in CANDIDATE_FIGURES}}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, [figures[k] for k in FIGURES])
        _drop_checkpoints(work, cand["folder"])
        log(f"trial {trial.number}: held-out {cand['score']:.2f}, {latency:.3f} ms, "
            f"{cand['size_bytes'] / 1e6:.2f} MB")
        ran += 1
    return ran


CANDIDATE_FIGURES = ("precisions", "overhead_precision", "fp32_units", "reach", "exits")


def search_context(state: dict, config: AutoConfig, log: Callable) -> tuple:
    """What every worker and the recovery build candidates from: ``(task, training rows, scored
    held-out rows, latency table, depth of the model the trials compress)`` of the search
    ``state`` describes. The table is the teacher's family's, which the student shares."""
    from compressor.auto.latency import default_table
    from compressor.core.data import data_for, holdout
    from compressor.engine.scoring import _task_for

    teacher = state["teacher"]
    task_spec, _ = _task_for(teacher, state["task"])
    user_data = data_for(teacher, task_spec, None)
    train_set, held = holdout.training_and_held(task_spec, state["data_dir"], state["train_limit"], user_data,
                                                teacher)
    held = _score_rows(held, config)
    table = default_table(config, teacher, task_spec, held, log=log, seq_len=state["seq_len"])
    return task_spec, train_set, held, table, len(_model_layers(source_of(state)))


def predict_latency(table, cand: dict, params: dict, seq_len: int) -> tuple:
    """(tokens each layer sees, predicted p50 ms) of a built candidate: each layer at its precision
    (a mixed graph's FP32 units at FP32), weighted by the share of rows that reach it (early exit),
    plus what dropping tokens costs the graph where the candidate prunes tokens."""
    from compressor.auto.latency import layer_seqs

    seqs = layer_seqs(seq_len, len(cand["layers"]), params["tokens"])
    return seqs, table.predict(cand["layers"], cand["precisions"], seqs, cand["overhead_precision"], cand["reach"],
                               prunes_tokens=cand.get("prunes_tokens", False))


def suggest(trial, config: AutoConfig, source_layers: int) -> dict:
    """One point of the search space (every trial draws every setting: a fixed space); ``layers``
    up to the depth of the model the trials compress."""
    return {"layers": trial.suggest_int("layers", min(config.min_layers, source_layers), source_layers),
            "layer_rule": trial.suggest_categorical("layer_rule", list(config.layer_rules)),
            "heads": trial.suggest_categorical("heads", list(config.heads)),
            "ffn": trial.suggest_categorical("ffn", list(config.ffn)),
            "vocab": trial.suggest_categorical("vocab", list(config.vocab)),
            "tokens": trial.suggest_categorical("tokens", list(config.tokens)),
            "precision": trial.suggest_categorical("precision", list(config.precisions)),
            "mixed_fp32": trial.suggest_categorical("mixed_fp32", list(config.mixed_fp32)),
            "exit": trial.suggest_categorical("exit", list(config.exits)),
            "exit_target": trial.suggest_categorical("exit_target", list(config.exit_targets))}


def _same_candidate(study, stages: list):
    """A finished trial whose steps are ``stages``, or None."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("plan") == stages:
            return t
    return None


def _describe(params: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in params.items())


def _under_way_before(study, number: int) -> int:
    """Trials numbered below ``number`` that are done, pruned or running (not failed, not surplus)."""
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return sum(1 for t in study.get_trials(deepcopy=False, states=states) if t.number < number)


def fail_stale(study, storage, log) -> None:
    """Mark failed the running trials of this host whose process is gone (a run that was killed)."""
    from optuna.trial import TrialState

    host = platform.node()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid = t.user_attrs.get("pid")
        if t.user_attrs.get("host") == host and pid and not _alive(int(pid)):
            trial_id = storage.get_trial_id_from_study_id_trial_number(
                storage.get_study_id_from_name(study.study_name), t.number)
            storage.set_trial_user_attr(trial_id, "error", "its process stopped before it finished")
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
            log(f"trial {t.number} was left running by a stopped process: marked failed")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie (a killed child not yet reaped) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _model_layers(folder: str) -> list:
    """(heads, ffn) of each layer of the model in ``folder`` (a pruned one's as its folder records)."""
    from compressor.auto.candidate import _layers
    from compressor.core.arch import arch_of
    from compressor.core.loaders import read_meta
    from compressor.core.models import load_config

    config = load_config(folder)
    return _layers(read_meta(folder).get("shape"), arch_of(config).num_layers(config), folder)


def _share_cores(workers: int) -> None:
    """Each of ``workers`` processes on this host trains on its share of the cores."""
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, workers)))


def _drop_checkpoints(work: str, keep: Optional[str]) -> None:
    """A trial keeps its ONNX folder; the checkpoints it was made through are only disk."""
    if not os.path.isdir(work):
        return
    for name in os.listdir(work):
        path = os.path.join(work, name)
        if keep is None or os.path.abspath(path) != os.path.abspath(keep):
            shutil.rmtree(path, ignore_errors=True)


def main(argv=None) -> int:
    """``python -m compressor.auto.study OUT [WORKER]``: one more worker on the search in OUT."""
    from compressor.core.children import follow_parent
    from compressor.core.errors import terminate_cleanly

    argv = sys.argv[1:] if argv is None else argv
    follow_parent()   # started by run_auto: it ends with it
    try:
        with terminate_cleanly():
            search(os.path.abspath(argv[0]), int(argv[1]) if len(argv) > 1 else 0)
    except CompressorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:   # Ctrl-C or SIGTERM: the parent (or the user's shell) says it once
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
