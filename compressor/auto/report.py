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
from typing import Callable, List, Optional

import yaml

from compressor.core.io import atomic_dir, read_json, write_json, write_text


def finish(out: str, log: Callable) -> dict:
    from optuna.trial import TrialState

    from compressor.auto.latency import default_table, layer_seqs
    from compressor.auto.study import STATE, _teacher_layers, config_of, open_study
    from compressor.core.data import data_for, load_data
    from compressor.engine.scoring import _task_for

    state = read_json(os.path.join(out, STATE))
    config = config_of(state)
    study, _ = open_study(state)
    trials = [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    front = {t.number for t in study.best_trials} if done else set()
    teacher, teacher_score = state["teacher"], state["teacher_score"]
    task_spec, _ = _task_for(teacher, state["task"])
    user_data = data_for(teacher, task_spec, None)
    rows = load_data(task_spec, "train", state["data_dir"], 8, user_data)   # static INT8 calibrates on them
    table = default_table(config, teacher, task_spec, rows, log=log)
    full = _teacher_layers(teacher)
    teacher_ms = table.predict(full, "fp32", layer_seqs(state["seq_len"], len(full), 1.0))
    inside = [t for t in done if teacher_score - t.values[0] <= config.max_drop + 1e-9]
    pick = min(inside, key=lambda t: (t.values[1], -t.values[0], t.values[2])) if inside else None
    report = {"teacher": teacher, "task": state["task"], "max_drop": config.max_drop,
              "target": config.target, "threads": config.threads, "seq_len": state["seq_len"],
              "held_rows": state["held_rows"], "storage": state["storage"] or "sqlite:///OUT/study.db",
              "study": config.study, "space": config.space(),
              "teacher_figures": {"score": teacher_score, "latency_ms": teacher_ms,
                                  "size_bytes": _size(state["teacher_onnx"])},
              "counts": {s: sum(1 for t in trials if t.state.name == s) for s in
                         ("COMPLETE", "PRUNED", "FAIL", "RUNNING")},
              "trials": [_trial_row(t, front) for t in trials],
              "front": sorted(front), "latency_table": table.path}
    if pick is None:
        report["pick"] = None
        log(f"no finished candidate is within {config.max_drop} points of the teacher on the held-out rows")
    else:
        report["pick"] = _verify(out, state, pick, task_spec, user_data, teacher_score, log)
        recipe = {"name": f"auto-pick-{pick.number}", "task": state["task"], "teacher": teacher,
                  "stages": pick.user_attrs["stages"]}
        if state["train_limit"]:
            recipe["data"] = {"train_limit": state["train_limit"]}
        recipe_path = os.path.join(out, "pick-recipe.yaml")
        write_text(recipe_path, yaml.safe_dump(recipe, sort_keys=False))
        report["command"] = (f"compressor run {recipe_path} --out runs/auto-pick"
                             + (f" --data-dir {state['data_dir']}" if state["data_dir"] else ""))
        report["checks"] = _check_table(out, state, table, pick, front, done, config, full, teacher_ms)
        errors = [c["error"] for c in report["checks"] if c.get("error") is not None]
        report["table_error"] = {"mean": round(sum(errors) / len(errors), 4), "max": max(errors)} if errors else None
    report["plot"] = _plot(os.path.join(out, "front.png"), report)
    write_json(os.path.join(out, "report.json"), report)
    write_text(os.path.join(out, "report.md"), markdown(report))
    return report


def _trial_row(t, front: set) -> dict:
    attrs = t.user_attrs
    row = {"number": t.number, "state": t.state.name, "params": dict(t.params),
           "front": t.number in front}
    if t.values:
        row.update(dict(zip(("score", "latency_ms", "size_bytes"), t.values)))
    for key in ("steps", "layers", "seqs", "folder", "error", "pruned"):
        if key in attrs:
            row[key] = attrs[key]
    return row


def _verify(out: str, state: dict, pick, task_spec, user_data, teacher_score: float, log) -> dict:
    """The pick copied to ``OUT/pick``, and scored on dev once beside the teacher's export."""
    from compressor.core.data import load_data
    from compressor.core.metrics import task_score
    from compressor.export.onnx import score_onnx

    folder = os.path.join(out, "pick")
    with atomic_dir(folder, overwrite=True) as tmp:
        shutil.rmtree(tmp)
        shutil.copytree(os.path.join(out, pick.user_attrs["folder"]), tmp)
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
            "dev_drop": round(state["teacher_dev"] - dev_score, 4), "held_drop": round(teacher_score - score, 4)}


def _check_table(out, state, table, pick, front, done, config, full, teacher_ms) -> List[dict]:
    """Whole-model p50 of the pick, of front members and of the teacher beside their prediction."""
    if not config.check_models:
        return []
    chosen = [pick] + [t for t in sorted(done, key=lambda t: t.values[1]) if t.number in front and t is not pick]
    checks = []
    for t in chosen[:config.check_models]:
        checks.append(table.check(f"trial {t.number}", os.path.join(out, t.user_attrs["folder"]),
                                  t.values[1], state["seq_len"]))
    checks.append(table.check("teacher", state["teacher_onnx"], teacher_ms, state["seq_len"]))
    return checks


def _size(folder: str) -> int:
    from compressor.core.models import size_on_disk

    return size_on_disk(folder)


def _plot(path: str, report: dict) -> Optional[str]:
    import matplotlib

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


def markdown(report: dict) -> str:
    t = report["teacher_figures"]
    lines = [f"# compressor auto: {report['task']}", "",
             f"Teacher `{report['teacher']}`: held-out score {t['score']:.2f} on {report['held_rows']} rows, "
             f"{t['latency_ms']:.3f} ms predicted, {t['size_bytes'] / 1e6:.2f} MB. Budget: {report['max_drop']} "
             f"points on the held-out rows; latency at batch 1, {report['seq_len']} tokens, "
             f"{report['threads']} thread(s), from the table `{report['latency_table']}`.", "",
             "Trials: " + ", ".join(f"{n.lower()} {c}" for n, c in report["counts"].items()) + ".", ""]
    p = report.get("pick")
    if p:
        lines += ["## Pick", "",
                  f"Trial {p['trial']} ({', '.join(f'{k} {v}' for k, v in p['params'].items())}): held-out "
                  f"{p['score']:.2f} (drop {p['held_drop']:.2f}), dev {p['dev_score']:.2f} against the teacher's "
                  f"{p['teacher_dev_score']:.2f} (drop {p['dev_drop']:.2f}, {p['dev_examples']} rows, scored once), "
                  f"{p['latency_ms']:.3f} ms predicted ({t['latency_ms'] / p['latency_ms']:.1f}x the teacher), "
                  f"{p['size_bytes'] / 1e6:.2f} MB. Folder: `{p['folder']}`.", "",
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
    lines += ["## Trials", "", "| # | state | layers | rule | heads | ffn | vocab | tokens | precision | held-out | ms | MB | front |",
              "|---:|---|---:|---|---:|---:|---|---:|---|---:|---:|---:|---|"]
    for r in report["trials"]:
        q = r["params"]
        figures = (f"{r['score']:.2f} | {r['latency_ms']:.3f} | {r['size_bytes'] / 1e6:.2f}" if "score" in r
                   else f"{r.get('pruned') or r.get('error') or ''} | | ")
        lines.append(f"| {r['number']} | {r['state'].lower()} | {q.get('layers', '')} | {q.get('layer_rule', '')} | "
                     f"{q.get('heads', '')} | {q.get('ffn', '')} | {q.get('vocab', '')} | {q.get('tokens', '')} | "
                     f"{q.get('precision', '')} | {figures} | {'yes' if r['front'] else ''} |")
    return "\n".join(lines) + "\n"
