"""The end of a search: the front, the pick (verified on dev once), the table's check, the report.

``OUT/report.json`` has every trial (its settings, its figures or why it has none), the Pareto
front (held-out score x latency x size, over the finished trials), the pick beside the teacher,
the whole-model checks of the latency table and the command that rebuilds the pick;
``OUT/report.md`` says the same for a reader; ``OUT/front.png`` plots score against latency
(marker area: size); ``OUT/pick/`` is the pick's ONNX folder and ``OUT/pick-recipe.yaml`` the
recipe of its steps.
"""
from __future__ import annotations

import os
import shutil
from types import SimpleNamespace
from typing import Callable, List, Optional

import yaml

from compressor.core.io import atomic_dir, read_json, write_json, write_text


def finish(out: str, log: Callable) -> dict:
    from optuna.trial import TrialState

    from compressor.auto.latency import default_table, layer_seqs
    from compressor.auto.recovery import recover_candidates
    from compressor.auto.study import STATE, _score_rows, _model_layers, config_of, open_study
    from compressor.core.data import data_for, holdout, load_data
    from compressor.engine.scoring import _task_for

    state = read_json(os.path.join(out, STATE))
    config = config_of(state)
    study, _ = open_study(state)
    trials = [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    front = {t.number for t in study.best_trials} if done else set()
    teacher, teacher_score = state["teacher"], state["teacher_score"]
    recovered = recover_candidates(out, state, done, config, log) if done else {}
    # each finished trial's best estimate: its recovered figures where it was recovered, else the proxy's
    views = [_view(t, recovered.get(t.number)) for t in done]
    final_front = {v.number for v in views if not _dominated(v, views)}
    task_spec, _ = _task_for(teacher, state["task"])
    user_data = data_for(teacher, task_spec, None)
    rows = load_data(task_spec, "train", state["data_dir"], 8, user_data)   # static INT8 calibrates on them
    table = default_table(config, teacher, task_spec, rows, log=log, seq_len=state["seq_len"])
    full = _model_layers(teacher)
    teacher_ms = table.predict(full, "fp32", layer_seqs(state["seq_len"], len(full), 1.0))
    inside = [v for v in views if teacher_score - v.values[0] <= config.max_drop + 1e-9]
    pick = min(inside, key=lambda v: (v.values[1], -v.values[0], v.values[2])) if inside else None
    report = {"teacher": teacher, "student": state.get("student"), "task": state["task"], "max_drop": config.max_drop,
              "target": config.target, "threads": config.threads, "seq_len": state["seq_len"],
              "held_rows": state["held_rows"], "storage": state["storage"] or "sqlite:///OUT/study.db",
              "study": config.study, "space": config.space(),
              "teacher_figures": {"score": teacher_score, "latency_ms": teacher_ms,
                                  "size_bytes": _size(state["teacher_onnx"])},
              "counts": {s: sum(1 for t in trials if t.state.name == s) for s in
                         ("COMPLETE", "PRUNED", "FAIL", "RUNNING")},
              "search_seconds": _span(trials),
              "trials": [_trial_row(t, front, final_front, recovered.get(t.number)) for t in trials],
              "front": sorted(front), "final_front": sorted(final_front),
              "recovery": {"candidates": config.recover_candidates, "margin": config.recover_margin,
                           "settings": _plain(config.recover), "recovered": sorted(recovered)},
              "latency_table": table.path,
              # whose latencies these are: this machine's table, or the target's read here (predictions only)
              "latency_machine": {**table.machine, "measured_here": not table.read_only,
                                  "described": table.describe()}}
    if pick is None:
        report["pick"] = None
        log(f"no finished candidate is within {config.max_drop} points of the teacher on the held-out rows")
    else:
        report["pick"] = _verify(out, state, pick, task_spec, user_data, teacher_score, log)
        recipe = {"name": f"auto-pick-{pick.number}", "task": state["task"], "teacher": teacher,
                  "stages": pick.attrs["stages"]}
        if state.get("student"):   # the stages start from the student; their recovery distils from the teacher
            recipe["teacher"] = state["student"]
            recipe["stages"] = [{name: ({**settings, "teacher": teacher} if settings.get("teacher") == "recipe"
                                        else settings)} for stage in recipe["stages"]
                                for name, settings in stage.items()]
        if state["train_limit"]:
            recipe["data"] = {"train_limit": state["train_limit"]}
        recipe_path = os.path.join(out, "pick-recipe.yaml")
        write_text(recipe_path, yaml.safe_dump(recipe, sort_keys=False))
        report["command"] = (f"compressor run {recipe_path} --out runs/auto-pick"
                             + (f" --data-dir {state['data_dir']}" if state["data_dir"] else ""))
        held = _score_rows(holdout.held_rows(teacher, task_spec, state["data_dir"], user_data,
                                             needs="compressor auto"), config)
        report["checks"] = _check_table(out, state, table, pick, final_front, views, config, teacher_ms, held)
        errors = [c["error"] for c in report["checks"] if c.get("error") is not None]
        report["table_error"] = {"mean": round(sum(errors) / len(errors), 4), "max": max(errors)} if errors else None
    report["plot"] = _plot(os.path.join(out, "front.png"), report)
    write_json(os.path.join(out, "report.json"), report)
    write_text(os.path.join(out, "report.md"), markdown(report))
    return report


def _span(trials) -> Optional[float]:
    """Seconds from the first trial's start to the last one's end (all workers and runs together):
    the search's wall time without the teacher's scoring before it and the recovery after it."""
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    return round((max(ends) - min(starts)).total_seconds(), 1) if starts and ends else None


def _view(t, recovered: Optional[dict]) -> SimpleNamespace:
    """A finished trial as the pick sees it: its recovered figures, folder and steps where it was
    recovered (and the recovery did not fail), else the search's."""
    attrs = dict(t.user_attrs)
    values = tuple(t.values)
    if recovered and "score" in recovered:
        values = (recovered["score"], recovered["latency_ms"], recovered["size_bytes"])
        attrs.update({k: recovered[k] for k in ("folder", "stages", "exits", "steps")})
    return SimpleNamespace(number=t.number, params=dict(t.params), values=values, attrs=attrs,
                           recovered=bool(recovered and "score" in recovered), proxy=tuple(t.values))


def _dominated(v, views) -> bool:
    from compressor.auto.recovery import dominated

    return dominated(v.values, [w.values for w in views if w.number != v.number])


def _plain(settings) -> dict:
    from compressor.auto.recovery import plain

    return plain(settings)


def _trial_row(t, front: set, final_front: set, recovered: Optional[dict]) -> dict:
    attrs = t.user_attrs
    row = {"number": t.number, "state": t.state.name, "params": dict(t.params),
           "front": t.number in front, "final_front": t.number in final_front}
    if t.values:
        row.update(dict(zip(("score", "latency_ms", "size_bytes"), t.values)))
    for key in ("steps", "layers", "seqs", "folder", "error", "pruned", "precisions", "fp32_units", "reach",
                "exits", "same_as", "worker", "proxy_recovery"):
        if attrs.get(key) is not None:
            row[key] = attrs[key]
    if t.datetime_start and t.datetime_complete:
        row["seconds"] = round((t.datetime_complete - t.datetime_start).total_seconds(), 1)
    if recovered:
        row["recovered"] = recovered
    return row


def _verify(out: str, state: dict, pick, task_spec, user_data, teacher_score: float, log) -> dict:
    """The pick copied to ``OUT/pick``, and scored on dev once beside the teacher's export."""
    from compressor.core.data import load_data
    from compressor.core.metrics import task_score
    from compressor.export.onnx import score_onnx

    folder = os.path.join(out, "pick")
    with atomic_dir(folder, overwrite=True) as tmp:
        shutil.rmtree(tmp)
        shutil.copytree(os.path.join(out, pick.attrs["folder"]), tmp)
    dev = load_data(task_spec, "dev", state["data_dir"], state["dev_limit"], user_data)
    if "teacher_dev" not in state:   # the teacher's dev score does not change between runs
        state["teacher_dev"] = round(float(task_score(task_spec, score_onnx(state["teacher_onnx"], dev))), 4)
        write_json(os.path.join(out, "auto.json"), state)
    dev_metrics = score_onnx(folder, dev)
    dev_score = round(float(task_score(task_spec, dev_metrics)), 4)
    score, latency, size = pick.values
    log(f"pick: trial {pick.number}, held-out {score:.2f} (teacher {teacher_score:.2f}), dev {dev_score:.2f} "
        f"(teacher {state['teacher_dev']:.2f}), {latency:.3f} ms predicted, {size / 1e6:.2f} MB -> {folder}")
    return {"trial": pick.number, "params": dict(pick.params), "folder": folder, "score": score,
            "latency_ms": latency, "size_bytes": size, "dev_score": dev_score, "dev_metrics": dev_metrics,
            "teacher_dev_score": state["teacher_dev"], "dev_examples": len(dev),
            "dev_drop": round(state["teacher_dev"] - dev_score, 4), "held_drop": round(teacher_score - score, 4),
            "recovered": pick.recovered, "proxy_score": pick.proxy[0], "exits": pick.attrs.get("exits")}


def _check_table(out, state, table, pick, front, views, config, teacher_ms, held) -> List[dict]:
    """Whole-model p50 of the pick, of front members and of the teacher beside their prediction; an
    early-exit candidate is timed on the held-out rows' texts (where its rows leave depends on them).
    None with another machine's table: whole models are measured on that machine."""
    from compressor.export.onnx import example_texts

    if not config.check_models or table.read_only:
        return []
    chosen = [pick] + [v for v in sorted(views, key=lambda v: v.values[1]) if v.number in front and v is not pick]
    checks = []
    for v in chosen[:config.check_models]:
        texts = example_texts(held.examples) if v.attrs.get("exits") else None
        checks.append(table.check(f"trial {v.number}", os.path.join(out, v.attrs["folder"]), v.values[1],
                                  state["seq_len"], texts=texts))
    checks.append(table.check("teacher", state["teacher_onnx"], teacher_ms, state["seq_len"]))
    return checks


def _size(folder: str) -> int:
    from compressor.core.models import size_on_disk

    return size_on_disk(folder)


def _plot(path: str, report: dict) -> Optional[str]:
    try:
        import matplotlib
    except ImportError:   # a machine without it (a GPU box) still gets the report
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["trials"] if r["state"] == "COMPLETE"]
    if not rows:
        return None
    biggest = max([r["size_bytes"] for r in rows] + [report["teacher_figures"]["size_bytes"]])
    area = lambda size: 20 + 280 * size / biggest   # noqa: E731
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for on_front, colour, label in ((False, "#bbbbbb", "trial"), (True, "#1f77b4", "Pareto front")):
        chosen = [r for r in rows if r["front"] == on_front]
        if chosen:
            ax.scatter([r["latency_ms"] for r in chosen], [r["score"] for r in chosen],
                       s=[area(r["size_bytes"]) for r in chosen], c=colour, alpha=0.8, label=label,
                       edgecolors="black", linewidths=0.5)
    got = [r for r in rows if r.get("recovered", {}).get("score") is not None]
    for r in got:
        ax.plot([r["latency_ms"], r["recovered"]["latency_ms"]], [r["score"], r["recovered"]["score"]],
                c="#2ca02c", lw=0.8)
    if got:
        ax.scatter([r["recovered"]["latency_ms"] for r in got], [r["recovered"]["score"] for r in got],
                   s=[area(r["recovered"]["size_bytes"]) for r in got], c="#2ca02c", alpha=0.8,
                   label="recovered", edgecolors="black", linewidths=0.5)
    t = report["teacher_figures"]
    ax.scatter([t["latency_ms"]], [t["score"]], s=[area(t["size_bytes"])], marker="s", c="#d62728",
               label="teacher (FP32)")
    if report.get("pick"):
        p = report["pick"]
        ax.scatter([p["latency_ms"]], [p["score"]], s=260, marker="*", c="#ff7f0e", label=f"pick (trial {p['trial']})")
    ax.axhline(t["score"] - report["max_drop"], ls="--", c="grey", lw=0.8, label=f"teacher - {report['max_drop']}")
    ax.set_xlabel(f"predicted p50 latency (ms, batch 1, {report['seq_len']} tokens, {report['threads']} thread(s))")
    ax.set_ylabel("held-out score")
    ax.set_title(f"compressor auto: {report['task']} (marker area: size on disk)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def _machine_lines(report: dict) -> List[str]:
    """Which machine the latencies belong to; for another machine's table, that they are predictions."""
    machine = report.get("latency_machine")
    if not machine:
        return []
    if machine.get("measured_here", True):
        return [f"Latencies are this machine's: {machine['described']}.", ""]
    return [f"**Latencies are predictions for another machine**: {machine['described']}, from its table "
            "(measured there with `--measure-table`); nothing was timed here and the whole-model checks "
            "were skipped. Measure the pick and the teacher on that machine (`compressor bench`).", ""]


def _student_lines(report: dict) -> List[str]:
    if not report.get("student"):
        return []
    return [f"Student `{report['student']}`: the model the trials compress (layers up to its depth, heads and "
            "FFN shares of its shape); the teacher stays the reference (the budget, recovery's distillation "
            "teacher, the figures against the teacher).", ""]


def markdown(report: dict) -> str:
    t = report["teacher_figures"]
    lines = [f"# compressor auto: {report['task']}", "",
             f"Teacher `{report['teacher']}`: held-out score {t['score']:.2f} on {report['held_rows']} rows, "
             f"{t['latency_ms']:.3f} ms predicted, {t['size_bytes'] / 1e6:.2f} MB. Budget: {report['max_drop']} "
             f"points on the held-out rows; latency at batch 1, {report['seq_len']} tokens, "
             f"{report['threads']} thread(s), from the table `{report['latency_table']}`.", "",
             *_student_lines(report),
             *_machine_lines(report),
             "Trials: " + ", ".join(f"{n.lower()} {c}" for n, c in report["counts"].items()) + ".", ""]
    p = report.get("pick")
    if p:
        lines += ["## Pick", "",
                  f"Trial {p['trial']} ({', '.join(f'{k} {v}' for k, v in p['params'].items())}): held-out "
                  f"{p['score']:.2f} (drop {p['held_drop']:.2f}), dev {p['dev_score']:.2f} against the teacher's "
                  f"{p['teacher_dev_score']:.2f} (drop {p['dev_drop']:.2f}, {p['dev_examples']} rows, scored once), "
                  f"{p['latency_ms']:.3f} ms predicted ({t['latency_ms'] / p['latency_ms']:.1f}x the teacher), "
                  f"{p['size_bytes'] / 1e6:.2f} MB"
                  + (f"; recovered (proxy held-out {p['proxy_score']:.2f})" if p.get("recovered") else "")
                  + f". Folder: `{p['folder']}`.", "",
                  f"Rebuild it: `{report['command']}`", ""]
    else:
        lines += ["No finished candidate is within the budget.", ""]
    if report.get("checks"):
        lines += ["## Latency table against whole models", "", "| model | predicted ms | measured ms | error |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {c['model']} | {c['predicted_ms']:.3f} | {c['measured_ms']:.3f} | "
                  f"{100 * c['error']:.1f}% |" for c in report["checks"] if c.get("error") is not None]
        lines.append("")
    if report.get("plot"):
        lines += ["![front](front.png)", ""]
    if report["recovery"]["recovered"]:
        rec = report["recovery"]
        lines += ["## Recovery of the candidates that may enter the front", "",
                  f"At most {rec['candidates']} candidates within {rec['margin']} points of the front, rebuilt with "
                  f"recovery ({rec['settings']['mode']}, {rec['settings']['train']['epochs']:g} epoch(s)) on their "
                  "last pruning step and rescored on the held-out rows; the pick and the final front use "
                  "these figures.", "", "| # | proxy held-out | recovered held-out | gain | ms | final front |",
                  "|---:|---:|---:|---:|---:|---|"]
        for r in report["trials"]:
            got = r.get("recovered")
            if got and "score" in got:
                lines.append(f"| {r['number']} | {r['score']:.2f} | {got['score']:.2f} | {got['gain']:+.2f} | "
                             f"{got['latency_ms']:.3f} | {'yes' if r['final_front'] else ''} |")
            elif got:
                lines.append(f"| {r['number']} | {r['score']:.2f} | failed: {got.get('error', '')} | | | |")
        lines.append("")
    proxy = report["space"].get("proxy_recover")
    how = (f"each trial's last pruning step recovered for {proxy['train']['max_steps'] or 'its'} optimiser "
           f"steps ({proxy['mode']}; recovery s: its training time)" if proxy else "no recovery")
    lines += ["## Trials", "", f"Proxy figures ({how}); exit: rule@target; mixed: the units kept FP32.", "",
              "| # | state | layers | rule | heads | ffn | vocab | tokens | precision | exit | held-out | ms | MB | front |"
              + (" recovery s |" if proxy else ""),
              "|---:|---|---:|---|---:|---:|---|---:|---|---|---:|---:|---:|---|" + ("---:|" if proxy else "")]
    for r in report["trials"]:
        q = r["params"]
        figures = (f"{r['score']:.2f} | {r['latency_ms']:.3f} | {r['size_bytes'] / 1e6:.2f}" if "score" in r
                   else f"{r.get('pruned') or r.get('error') or ''} | | ")
        precision = q.get("precision", "")
        if r.get("fp32_units"):
            precision += f" ({', '.join(r['fp32_units'])} FP32)"
        exit_ = f"{q['exit']}@{q.get('exit_target')}" if q.get("exit", "none") != "none" else ""
        if r.get("exits"):
            exit_ += f", mean exit layer {r['exits']['mean_exit_layer']}"
        seconds = (r.get("proxy_recovery") or {}).get("train_time_s")
        recovery = (f" {seconds:g} |" if seconds is not None else " |") if proxy else ""
        lines.append(f"| {r['number']} | {r['state'].lower()} | {q.get('layers', '')} | {q.get('layer_rule', '')} | "
                     f"{q.get('heads', '')} | {q.get('ffn', '')} | {q.get('vocab', '')} | {q.get('tokens', '')} | "
                     f"{precision} | {exit_} | {figures} | {'yes' if r['front'] else ''} |" + recovery)
    return "\n".join(lines) + "\n"
