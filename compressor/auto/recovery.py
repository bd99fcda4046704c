"""Recovery of the candidates that may enter the front, after the proxy search.

The search ranks candidates by their held-out score without recovery (the cheap proxy). Once it
is done, the candidates that recovery could bring onto the front are rebuilt with pruning's
recovery training (``recover``: distillation from the teacher by default) on their last pruning
step, and rescored on the held-out rows. A candidate qualifies when no other finished candidate
would still dominate it were its score ``recover_margin`` points higher, when that score could be
inside ``max_drop``, and when it has a pruning step to recover; the fastest ``recover_candidates``
of those are recovered. Results are kept in ``OUT/recovered.json``: a resumed search reuses those
made with the same ``recover`` settings.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from typing import Callable, Dict, List

from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json

RECOVERED = "recovered.json"


def plain(settings) -> dict:
    """A settings dataclass as plain JSON/YAML data (its sections' own mapping types made dicts)."""
    return json.loads(json.dumps(asdict(settings)))


def dominated(figures: tuple, others: List[tuple]) -> bool:
    """Whether one of ``others`` (score, latency, size) is at least as good in all and better in one."""
    score, latency, size = figures
    return any(s >= score and l <= latency and z <= size and (s, l, z) != (score, latency, size)
               for s, l, z in others)


def to_recover(done: list, config, teacher_score: float) -> list:
    """The finished trials worth recovering, fastest first, at most ``config.recover_candidates``."""
    from compressor.auto.candidate import recovers

    if not config.recover_candidates:
        return []
    figures = {t.number: tuple(t.values) for t in done}
    chosen = []
    for t in done:
        score, latency, size = t.values
        raised = (score + config.recover_margin, latency, size)
        if score + config.recover_margin < teacher_score - config.max_drop:
            continue   # even recovered by the margin, it would stay outside the budget
        if not recovers(t.user_attrs.get("stages", [])) or t.user_attrs.get("same_as") is not None:
            continue   # nothing to recover, or the same model as another trial
        if dominated(raised, [f for n, f in figures.items() if n != t.number]):
            continue
        chosen.append(t)
    return sorted(chosen, key=lambda t: (t.values[1], -t.values[0]))[:config.recover_candidates]


def recover_candidates(out: str, state: dict, done: list, config, log: Callable) -> Dict[int, dict]:
    """Recover the trials :func:`to_recover` names (those not recovered by an earlier run);
    returns ``{trial number: figures}`` of every recovered trial."""
    from compressor.auto.candidate import build_candidate
    from compressor.auto.study import predict_latency, search_context, source_of

    path = os.path.join(out, RECOVERED)
    recover = plain(config.recover)
    kept = {int(k): v for k, v in read_json(path).items()} if os.path.exists(path) else {}
    kept = {k: v for k, v in kept.items() if v.get("settings") == recover}   # recovered as asked now
    todo = [t for t in to_recover(done, config, state["teacher_score"]) if t.number not in kept]
    if not todo:
        return kept
    teacher, source = state["teacher"], source_of(state)
    task_spec, train_set, held, table, source_layers = search_context(state, config, log)
    for t in todo:
        log(f"recovering trial {t.number} (proxy held-out {t.values[0]:.2f}, {t.values[1]:.3f} ms): "
            f"{config.recover.mode}, {config.recover.train.epochs:g} epoch(s)")
        work = os.path.join(out, "trials", f"{t.number:04d}-recovered")
        shutil.rmtree(work, ignore_errors=True)
        try:
            cand = build_candidate(source, task_spec, train_set, held, dict(t.params), work, source_layers,
                                   config, log=log, recover=recover, teacher=teacher)
        except CompressorError as exc:
            kept[t.number] = {"error": str(exc).splitlines()[0], "settings": recover}
            log(f"trial {t.number}: recovery failed: {kept[t.number]['error']}")
        else:
            seqs, latency = predict_latency(table, cand, dict(t.params), state["seq_len"])
            for name in os.listdir(work):   # keep the ONNX folder only
                if os.path.join(work, name) != cand["folder"]:
                    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
            kept[t.number] = {"score": cand["score"], "latency_ms": latency, "size_bytes": cand["size_bytes"],
                              "folder": os.path.relpath(cand["folder"], out), "steps": cand["steps"],
                              "stages": cand["stages"], "exits": cand["exits"],
                              "proxy_score": t.values[0], "gain": round(cand["score"] - t.values[0], 4),
                              "settings": recover}
            log(f"trial {t.number}: recovered held-out {cand['score']:.2f} (proxy {t.values[0]:.2f})")
        write_json(path, {str(k): v for k, v in sorted(kept.items())})
    return kept
