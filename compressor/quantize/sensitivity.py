"""Mixed precision by sensitivity, in the spirit of Q-BERT (Shen et al., 2020).

Each unit (one weight matrix, or one encoder layer's matrices) is quantised
*alone* with ONNX Runtime's dynamic INT8 and the dev score measured; the
units whose quantisation costs most are the ones to keep in FP32. ``mixed``
then quantises everything, and returns units to FP32 from the most
sensitive down until the drop against FP32 is within ``max_drop``.
``accuracy_aware`` tries configurations (static and dynamic INT8 of
everything, the mixed one, FP32) and keeps the fastest that meets the
criterion, recording every try. Every score and timing runs the graph
through ``compressor.export.runtime.Predictor`` with the source folder's
tokenizer, as the quantize stage, ``eval`` and the benchmark do.

The criterion (:class:`Criterion`) compares each candidate with the FP32 graph
row by row, not only by score: on a few hundred rows an accuracy cannot see
predictions that flip both ways (RTE's 250 held-out rows: static INT8 scored
as FP32 and lost 4.7 points on dev). A candidate must agree with FP32 on at
least ``min_agreement`` of the rows (classification: the same label;
regression: the Pearson correlation of its outputs with FP32's), and the
upper bound of its drop (a paired bootstrap over the rows at ``confidence``)
must be within ``max_drop``: a drop that cannot be told from noise is not
taken for no drop.
"""
from __future__ import annotations

import sys
import os
import re
import time
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from compressor.core.io import save_figure, write_text
from compressor.core.metrics import compute_metrics, task_score
from compressor.core.progress import progress
from compressor.export.int8 import onnx_file, quantizable_units, quantize_dynamic_onnx

RESAMPLES = 1000   # bootstrap resamples of the search rows behind a drop's upper bound


def graph_outputs(folder: str, rows_set, model_file: Optional[str] = None,
                  threads: Optional[int] = None) -> np.ndarray:
    """The export ``folder``'s graph (or ``model_file`` with its tokenizer) on ``rows_set``: rows x labels."""
    from compressor.export.onnx import dataset_logits

    return np.asarray(dataset_logits(folder, rows_set, threads, model_file), dtype=np.float64)


def score_outputs(task, outputs: np.ndarray, labels) -> float:
    """The task score (x100) of graph outputs, as ``score_onnx`` scores them."""
    preds = outputs[:, 0] if task.is_regression else outputs.argmax(-1)
    return task_score(task, compute_metrics(task, preds, labels))


def agreement(task, outputs: np.ndarray, reference: np.ndarray, labels) -> dict:
    """How far ``outputs`` (a candidate's) follow ``reference`` (the FP32 graph's) on the same rows.

    Classification: ``agreement`` is the share of rows with the FP32 label; ``flips`` counts the
    others, ``flips_to_right``/``flips_to_wrong`` those that changed a wrong/right FP32 answer (an
    accuracy sees only their difference); ``divergence`` is the mean KL(FP32 || candidate) of the
    softmax outputs in nats, which moves before any label flips. Regression: ``agreement`` is the
    Pearson correlation of the outputs with FP32's (scale-free, and with independent INT8 noise
    a label correlation shrinks by about that factor, so 0.99 costs about 1% of STS-B's Pearson);
    ``divergence`` is the mean absolute difference over the labels' range; flips do not apply.
    """
    labels = np.asarray(labels)
    if task.is_regression:
        a, b = outputs[:, 0], reference[:, 0]
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            r = 1.0 if np.allclose(a, b) else 0.0
        else:
            r = float(np.corrcoef(a, b)[0, 1])
        span = float(np.ptp(labels.astype(np.float64))) or 1.0
        return {"agreement": r, "flips": None, "flips_to_right": None, "flips_to_wrong": None,
                "divergence": float(np.mean(np.abs(a - b)) / span)}
    p, q = outputs.argmax(-1), reference.argmax(-1)
    changed = p != q
    log_p = _log_softmax(reference)
    log_q = _log_softmax(outputs)
    kl = float(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)))
    return {"agreement": float(1.0 - changed.mean()), "flips": int(changed.sum()),
            "flips_to_right": int((changed & (p == labels)).sum()),
            "flips_to_wrong": int((changed & (q == labels)).sum()), "divergence": max(kl, 0.0)}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def drop_bound(task, outputs: np.ndarray, reference: np.ndarray, labels, confidence: float,
               seed: int = 42, resamples: int = RESAMPLES) -> float:
    """The ``confidence`` quantile of the drop (FP32 minus candidate, points) over paired bootstrap
    resamples of the rows: what the drop may be once the rows' own noise is counted. Identical
    predictions bound it at 0; ``confidence`` 0 gives the measured drop alone."""
    labels = np.asarray(labels)
    measured = score_outputs(task, reference, labels) - score_outputs(task, outputs, labels)
    if confidence <= 0:
        return measured
    if not task.is_regression and np.array_equal(outputs.argmax(-1), reference.argmax(-1)):
        return 0.0
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(labels), size=(resamples, len(labels)))   # same draws for every candidate
    if tuple(task.metrics) == ("accuracy",):
        right_ref = (reference.argmax(-1) == labels).astype(np.float64)
        right_out = (outputs.argmax(-1) == labels).astype(np.float64)
        drops = 100.0 * (right_ref[picks].mean(axis=1) - right_out[picks].mean(axis=1))
    else:
        drops = np.array([score_outputs(task, reference[i], labels[i]) - score_outputs(task, outputs[i], labels[i])
                          for i in picks])
    return float(np.quantile(drops, confidence))


class Criterion:
    """What a candidate graph must meet against the FP32 graph on the search rows: an upper bound
    of its drop (``drop_bound`` at ``confidence``) within ``max_drop`` points, and agreement with
    FP32 of at least ``min_agreement``. ``judge(outputs)`` says whether, and why not."""

    def __init__(self, rows_set, reference: np.ndarray, max_drop: float, min_agreement: float,
                 confidence: float, seed: int = 42):
        self.task = rows_set.task
        self.labels = np.asarray([ex.label for ex in rows_set.examples])
        self.reference = reference
        self.max_drop, self.min_agreement, self.confidence, self.seed = max_drop, min_agreement, confidence, seed
        self.fp32_score = score_outputs(self.task, reference, self.labels)

    def settings(self) -> dict:
        return {"max_drop": self.max_drop, "min_agreement": self.min_agreement, "confidence": self.confidence,
                "resamples": RESAMPLES if self.confidence > 0 else 0,
                "agreement": "Pearson r with FP32's outputs" if self.task.is_regression
                             else "share of rows with FP32's label",
                "divergence": "mean |output - FP32's| / label range" if self.task.is_regression
                              else "mean KL(FP32 || candidate), nats"}

    def judge(self, outputs: np.ndarray) -> dict:
        value = score_outputs(self.task, outputs, self.labels)
        drop = self.fp32_score - value
        bound = drop_bound(self.task, outputs, self.reference, self.labels, self.confidence, self.seed)
        agree = agreement(self.task, outputs, self.reference, self.labels)
        why = []
        if max(drop, bound) > self.max_drop + 1e-9:
            why.append(f"drop {drop:.2f} (bound {bound:.2f} at {self.confidence:g}) > max_drop {self.max_drop:g}"
                       if self.confidence > 0 else f"drop {drop:.2f} > max_drop {self.max_drop:g}")
        if agree["agreement"] < self.min_agreement:
            why.append(f"agreement {agree['agreement']:.4f} < min_agreement {self.min_agreement:g}")
        return {"score": value, "drop": drop, "drop_bound": round(bound, 4),
                **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in agree.items()},
                "meets": not why, **({"why_not": "; ".join(why)} if why else {})}

def measure_sensitivity(folder: str, rows_set, preset, work_dir: str, granularity: str = "matrix",
                        threads: Optional[int] = None, op_types: Optional[Sequence[str]] = None,
                        reference: Optional[np.ndarray] = None, only: Optional[Sequence[str]] = None,
                        all_int8_score: Optional[float] = None) -> dict:
    """Score the export ``folder``'s FP32 graph, all-INT8 and each unit quantised alone on
    ``rows_set`` (the search's rows: dev, drawn training rows or the teacher's held-out rows), with
    each unit's agreement with FP32 and divergence from it (``agreement``); ``reference``: the FP32
    graph's outputs on those rows, when the caller has them. Units are sorted by divergence, largest
    first: it is what the search protects (agreement with FP32), and unlike the score or the flips on
    a few hundred rows it moves with every unit, so the order is not decided by ties and noise.
    ``only``: measure those units alone (the refine step's products); ``all_int8_score``: the
    all-INT8 graph's score on these rows when the caller has it (not built again)."""
    onnx_path = onnx_file(folder)
    units = quantizable_units(onnx_path, granularity)
    if only is not None:
        wanted = set(only)
        units = OrderedDict((name, nodes) for name, nodes in units.items() if name in wanted)
    labels = [ex.label for ex in rows_set.examples]
    task = rows_set.task
    if reference is None:
        reference = graph_outputs(folder, rows_set, threads=threads)
    baseline = score_outputs(task, reference, labels)
    rows = []
    for position, (name, nodes) in enumerate(progress(units.items(), total=len(units), desc="sensitivity",
                                                      unit="unit")):
        path = os.path.join(work_dir, "one.onnx")
        quantize_dynamic_onnx(onnx_path, path, preset, nodes_to_quantize=nodes, op_types=op_types)
        outputs = graph_outputs(folder, rows_set, path, threads)
        value = score_outputs(task, outputs, labels)
        agree = agreement(task, outputs, reference, labels)
        rows.append({"unit": name, "nodes": nodes, "score": value, "drop": baseline - value,
                     "agreement": round(agree["agreement"], 6), "divergence": agree["divergence"],
                     "position": position})
    everything = all_int8_score
    if everything is None:
        path = os.path.join(work_dir, "all.onnx")
        quantize_dynamic_onnx(onnx_path, path, preset, op_types=op_types)
        everything = score_outputs(task, graph_outputs(folder, rows_set, path, threads), labels)
    order = sorted(rows, key=lambda r: (-r["divergence"], -r["drop"], r["unit"]))
    return {"granularity": granularity, "fp32_score": baseline, "all_int8_score": everything,
            "order": "divergence from FP32", "units": order, "examples": len(rows_set), "split": rows_set.split}


def dev_score(folder: str, rows_set, model_file: Optional[str] = None, threads: Optional[int] = None) -> float:
    """The task score on ``rows_set`` (whichever rows the search uses; the name is historical) of
    the export ``folder``'s graph, or of ``model_file`` with its tokenizer."""
    return score_outputs(rows_set.task, graph_outputs(folder, rows_set, model_file, threads),
                         [ex.label for ex in rows_set.examples])


def table(report: dict, metric: str) -> str:
    """The sensitivity report as a Markdown table (most sensitive first)."""
    lines = [f"FP32 {metric}: {report['fp32_score']:.2f}; every unit INT8: {report['all_int8_score']:.2f} "
             f"({report['examples']} {report.get('split', 'dev')} rows, one unit quantised at a time)", "",
             f"| unit | {metric} with only it INT8 | drop | agreement with FP32 | divergence |",
             "|---|---:|---:|---:|---:|"]
    for r in report["units"]:
        lines.append(f"| {r['unit']} | {r['score']:.2f} | {r['drop']:+.2f} | {_number(r.get('agreement'), 4)} "
                     f"| {_number(r.get('divergence'), 6)} |")
    return "\n".join(lines) + "\n"


def _number(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def choice_table(search: dict, metric: str) -> str:
    """The mixed search's steps and the candidates ``auto`` tried, each judged against FP32 by the
    criterion, as Markdown: why the one chosen was chosen."""
    c = search["criterion"]
    lines = ["", f"## Judged against the FP32 graph on the {search['search_rows']} search rows", "",
             f"A candidate must drop at most {c['max_drop']:g} points, counting the rows' noise (the "
             f"{c['confidence']:g} quantile of the drop over {c['resamples']} paired bootstrap resamples), and "
             f"agree with FP32 on at least {c['min_agreement']:g} (agreement: {c['agreement']}; divergence: "
             f"{c['divergence']}).", ""]
    head = (f"| {metric} | drop | drop bound | agreement | flips (to right / to wrong) | divergence |")
    rule = "|---:|---:|---:|---:|---:|---:|"

    def cells(t):
        flips = "-" if t.get("flips") is None else f"{t['flips']} ({t['flips_to_right']} / {t['flips_to_wrong']})"
        return (f"{t['score']:.2f} | {t['drop']:+.2f} | {t['drop_bound']:+.2f} | {t['agreement']:.4f} | {flips} "
                f"| {t['divergence']:.6f}")
    mixed = search.get("mixed")
    steps = []
    if mixed and mixed.get("refined_from"):
        steps = [("Mixed precision, whole layers returned to FP32 in order:", mixed["refined_from"]["tried"]),
                 ("Then, inside those layers, single products returned to FP32 in order (every other "
                  "product INT8):", mixed["tried"])]
    elif mixed:
        steps = [("Mixed precision, units returned to FP32 in order:", mixed.get("tried", []))]
    for title, tried in steps:
        lines += [title, "", f"| FP32 units {head} meets |", "|---" + rule + "---|"]
        for t in tried:
            lines.append(f"| {', '.join(t['fp32_units']) or 'none'} | {cells(t)} | "
                         f"{'yes' if t['meets'] else 'no: ' + t.get('why_not', '')} |")
        lines.append("")
    if search.get("tried"):
        margin = search.get("latency_margin")
        rule_text = (f"the fastest that meets, fewer FP32 units first within {margin:.0%} of it" if margin
                     else "the fastest that meets")
        lines += [f"Candidates (chosen: **{search['chosen']}**, {rule_text}):", "",
                  f"| candidate {head} latency ms | meets |", "|---" + rule + "---:|---|"]
        for t in search["tried"]:
            if "score" not in t:   # not built (the quantiser refused the graph)
                lines.append(f"| {t['name']} | - | - | - | - | - | - | - | no: {t.get('why_not', '')} |")
                continue
            lines.append(f"| {t['name']} | {cells(t)} | {t['latency_ms']:.2f} | "
                         f"{'yes' if t['meets'] else 'no: ' + t.get('why_not', '')} |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: str, metric: str) -> str:
    """A bar chart of each unit's drop (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = sorted(report["units"], key=lambda r: r.get("position", 0))  # graph order
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(units) + 2), 4))
    ax.bar(range(len(units)), [r["drop"] for r in units], color="#4472c4")
    ax.set_xticks(range(len(units)))
    ax.set_xticklabels([r["unit"] for r in units], rotation=75, ha="right", fontsize=7)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylabel(f"{metric} drop (points)")
    ax.set_title(f"Drop when only this unit is INT8 (FP32 {report['fp32_score']:.2f}, "
                 f"all INT8 {report['all_int8_score']:.2f})")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def mixed_precision(folder: str, out_path: str, report: dict, rows_set, preset, criterion: Criterion,
                    threads: Optional[int] = None, op_types: Optional[Sequence[str]] = None,
                    start: int = 0) -> dict:
    """Quantise all, then keep the most sensitive units FP32 one by one until the graph meets
    ``criterion`` (drop bound and agreement with FP32 on ``rows_set``); ``start``: the number of
    units FP32 at the first try (1 where all-INT8 is known to miss).

    Returns the FP32 units, the final score and every step tried, each judged; when even
    all-but-everything misses the criterion, the last try is kept and ``met`` is False.
    """
    onnx_path = onnx_file(folder)
    ranked = [r for r in report["units"]]
    tried = []
    start = min(start, len(ranked))
    kept: List[str] = [r["unit"] for r in ranked[:start]]
    excluded: List[str] = [n for r in ranked[:start] for n in r["nodes"]]
    for k in range(start, len(ranked) + 1):
        quantize_dynamic_onnx(onnx_path, out_path, preset, nodes_to_exclude=excluded, op_types=op_types)
        verdict = criterion.judge(graph_outputs(folder, rows_set, out_path, threads))
        tried.append({"fp32_units": list(kept), **verdict})
        if verdict["meets"] or k == len(ranked):
            break
        kept.append(ranked[k]["unit"])
        excluded += ranked[k]["nodes"]
    last = tried[-1]
    return {"fp32_units": kept, "excluded_nodes": excluded, "score": last["score"], "drop": last["drop"],
            "drop_bound": last["drop_bound"], "agreement": last["agreement"], "met": last["meets"],
            "tried": tried}


def products_inside(folder: str, layer_units: Sequence[str]) -> List[str]:
    """The matrix units (single products, and the embeddings) whose nodes belong to ``layer_units``
    (units of the layer granularity): what the refine step searches inside the layers the layer
    search kept FP32."""
    onnx_path = onnx_file(folder)
    layers = quantizable_units(onnx_path, "layer")
    inside = {node for unit in layer_units for node in layers.get(unit, [])}
    return [name for name, nodes in quantizable_units(onnx_path, "matrix").items() if set(nodes) <= inside]


def refine_mixed(folder: str, out_path: str, layer_mixed: dict, rows_set, preset, criterion: Criterion,
                 work_dir: str, threads: Optional[int] = None, op_types: Optional[Sequence[str]] = None,
                 reference: Optional[np.ndarray] = None) -> tuple:
    """The layer search's FP32 layers narrowed to single products (``granularity: refine``): the
    products inside them are measured alone and kept FP32 one by one, most divergent first, every
    other product INT8, until the graph meets ``criterion``. With all of them FP32 the graph is the
    layer search's, which met it, so the refined graph keeps at most those products. Returns the
    products' report and the search (as ``mixed_precision``), or (None, ``layer_mixed``) when the
    layer search kept nothing or met nothing."""
    if not layer_mixed["met"] or not layer_mixed["fp32_units"]:
        return None, layer_mixed
    products = products_inside(folder, layer_mixed["fp32_units"])
    # the layer search's try with every unit INT8 is the same graph: its score is not measured again
    all_int8 = next((t["score"] for t in layer_mixed["tried"] if not t["fp32_units"]), None)
    report = measure_sensitivity(folder, rows_set, preset, work_dir, "matrix", threads, op_types, reference,
                                 only=products, all_int8_score=all_int8)
    refined = mixed_precision(folder, out_path, report, rows_set, preset, criterion, threads, op_types,
                              start=1)
    refined["refined_from"] = {"fp32_units": layer_mixed["fp32_units"], "score": layer_mixed["score"],
                               "agreement": layer_mixed["agreement"], "tried": layer_mixed["tried"]}
    return report, refined


def latency_ms(folder: str, path: str, feeds: Sequence[dict], threads: int = 1, repeats: int = 1) -> float:
    """Median batch-1 latency of one ONNX file over ``feeds``, timed alone. A graph timed alone
    takes whatever load the machine has at that moment; to rank graphs, time them together
    (``latencies_ms``)."""
    return latencies_ms(folder, {path: path}, feeds, threads, rounds=repeats)[path]


def latencies_ms(folder: str, paths: Dict[str, str], feeds: Sequence[dict], threads: int = 1,
                 block: int = 10, rounds: int = 1, warmup: int = 5) -> Dict[str, float]:
    """Median batch-1 latency (ms) of each ONNX file of ``paths`` (name -> file, run with
    ``folder``'s tokenizer) over the same ``feeds``, timed interleaved: in turns of ``block``
    feeds every graph in turn, who goes first rotating each turn (an untimed run first wakes
    it), ``rounds`` passes over the feeds. A neighbour's burst on a shared machine then hits
    every graph alike, where graphs timed one after the other each took the load of their own
    moment (``auto`` once timed a mixed graph with one layer FP32 at 5.2 ms beside 2.2 ms for
    all-INT8, a graph the bench harness measures at all-INT8 plus that layer's FP32 share:
    bench/results/mixed-int8-latency/). One process: at ``threads`` 1 onnxruntime has no pool
    threads to spin and take the core from the graph being timed."""
    from compressor.export.runtime import Predictor

    feeds = list(feeds)
    predictors = {name: Predictor(folder, threads=threads, model_file=path) for name, path in paths.items()}
    for predictor in predictors.values():
        for feed in feeds[:warmup]:
            predictor.run(feed)
    names = list(predictors)
    times: Dict[str, List[float]] = {name: [] for name in names}
    turn = 0
    for _ in range(max(1, rounds)):
        for start in range(0, len(feeds), max(1, block)):
            chunk = feeds[start:start + max(1, block)]
            for k in range(len(names)):
                name = names[(turn + k) % len(names)]
                predictor = predictors[name]
                predictor.run(chunk[0])    # wake-up, untimed
                for feed in chunk:
                    begin = time.perf_counter()
                    predictor.run(feed)
                    times[name].append(time.perf_counter() - begin)
            turn += 1
    return {name: float(np.median(t) * 1000) for name, t in times.items()}


def mixed_candidate_name(units: int) -> str:
    """The ``auto`` search's name for its mixed candidate with ``units`` kept FP32 (records keep it)."""
    return f"mixed ({units} FP32 units)"


def fp32_unit_count(name: str) -> float:
    """How much of a candidate stays FP32, from its name: none for an INT8 graph, k for
    :func:`mixed_candidate_name` (k), everything (infinity) for ``fp32``."""
    if name == "fp32":
        return float("inf")
    found = re.match(r"mixed \((\d+) FP32 units?\)", name)
    return float(found.group(1)) if found else 0.0


def fastest_within(fit: Sequence[dict], latency_margin: float = 0.0) -> Optional[dict]:
    """The candidate kept among those that meet the criterion (each with ``name`` and
    ``latency_ms``): the one with the fewest FP32 units among those within ``latency_margin`` (a
    share) of the fastest, the fastest of them on a tie. A graph that keeps more products FP32
    then wins only by being measurably faster: on a loaded search machine a mixed graph with a
    layer FP32 once timed 0.3% faster than all-INT8, and 1.22x slower on the serving CPU
    (bench/results/accuracy-ablation-h200x1-run6/, MRPC)."""
    if not fit:
        return None
    def ms(t):
        return t["latency_ms"] if t.get("latency_ms") is not None else float("inf")
    fastest = min(ms(t) for t in fit)
    near = [t for t in fit if ms(t) <= fastest * (1 + latency_margin)]
    return min(near, key=lambda t: (fp32_unit_count(t["name"]), ms(t)))


def accuracy_aware(candidates: Sequence[tuple], judge_fn: Callable[[str], dict],
                   latency_fn: Optional[Callable[[str], float]] = None,
                   latencies_fn: Optional[Callable[[Dict[str, str]], Dict[str, float]]] = None,
                   latency_margin: float = 0.0) -> dict:
    """Try ``(name, build)`` candidates; keep the fastest that ``judge_fn(path)`` says meets the
    criterion (``Criterion.judge`` of the graph's outputs: ``{"meets": ..., ...}``), where a
    candidate with fewer FP32 units within ``latency_margin`` of it counts as fast (``fastest_within``).

    ``build()`` writes a model and returns its path (or None when it cannot
    be built). Every candidate is judged and timed, so the record shows what
    the choice was made against: by ``latencies_fn({name: path})``, which times them all
    together once all are built (``latencies_ms``: interleaved, so the ranking is not the
    machine's load at each one's moment), or else ``latency_fn(path)``, one at a time.
    """
    if (latency_fn is None) == (latencies_fn is None):
        raise ValueError("accuracy_aware takes one of latency_fn and latencies_fn")
    tried, failed = [], []
    for name, build in candidates:
        try:
            path = build()
        except (ValueError, RuntimeError) as exc:   # onnxruntime's quantiser refusing this graph
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"note: {name} could not be built ({reason}): not a candidate", file=sys.stderr)
            failed.append({"name": name, "meets": False, "why_not": f"could not be built: {reason}"})
            continue
        if path is None:
            continue
        verdict = judge_fn(path)
        tried.append({"name": name, "path": path, **verdict})
        if latency_fn is not None:
            tried[-1]["latency_ms"] = round(latency_fn(path), 3)
    if latencies_fn is not None and tried:
        measured = latencies_fn({t["name"]: t["path"] for t in tried})
        for t in tried:
            t["latency_ms"] = round(measured[t["name"]], 3)
    fit = [t for t in tried if t["meets"]]
    chosen = fastest_within(fit, latency_margin)
    return {"chosen": chosen["name"] if chosen else None, "path": chosen["path"] if chosen else None,
            "tried": tried + failed}


def write_report(report: dict, folder: str, metric: str) -> Dict[str, str]:
    """``sensitivity.md`` and ``sensitivity.png`` in ``folder``."""
    md = os.path.join(folder, "sensitivity.md")
    write_text(md, table(report, metric))
    return {"table": md, "plot": plot(report, os.path.join(folder, "sensitivity.png"), metric)}
