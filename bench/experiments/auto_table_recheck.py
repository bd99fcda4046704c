"""The latency table's error on the candidates of a finished search, with the table as it is now.

A search's report gives each finished trial's layers, lengths and precisions; its ONNX folders stay
in OUT/trials. This predicts each again from TABLE (measuring what TABLE lacks, with the code of
this checkout) and measures each whole beside it (``LatencyTable.check``), the teacher's export
too, so a change to how the table prices candidates is compared on the same models:

    python -m bench.experiments.auto_table_recheck SEARCH_OUT TABLE [JSON_OUT]

The family (architecture, tokenizer, maximum length) is the teacher's, or where its checkpoint is
gone, read from SEARCH_OUT/teacher-onnx (copied without the graph to SEARCH_OUT/teacher-family). Early-exit trials are left out (their depth depends
on the held-out rows' texts). Prints a markdown table: the report's prediction, the new one and
the measured p50, with both errors. Timings under load are inflated: run it on a quiet machine.
"""
from __future__ import annotations

import json
import os
import sys


def rest_precision(row: dict) -> str:
    """The precision the rest of the model (embeddings, classifier) was costed at."""
    precisions = row["precisions"]
    units = row.get("fp32_units") or []
    if not units:
        return precisions[0]
    int8 = "static" if row["params"].get("precision") == "static" else "dynamic"
    return "fp32" if any(not u.startswith("layer.") for u in units) else int8


def family_folder(export: str, folder: str) -> str:
    """``folder``: the teacher's export without its graph (its config, tokenizer and compressor.json):
    what the table reads of a family, where the teacher's checkpoint is gone."""
    import shutil

    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(export):
        if name not in ("model.onnx", "manifest.json", "compressor.json") and os.path.isfile(os.path.join(export, name)):
            shutil.copy2(os.path.join(export, name), folder)
    meta = json.load(open(os.path.join(export, "compressor.json")))
    with open(os.path.join(folder, "compressor.json"), "w") as f:   # a plain folder of the family, not an export
        json.dump({k: v for k, v in meta.items() if k not in ("kind", "source")}, f, indent=2)
    return folder


def recheck(out: str, table_path: str, json_out: str = "") -> list:
    from compressor.auto.latency import LatencyTable, layer_seqs
    from compressor.auto.target import teacher_shape
    from compressor.core.data import get_task, load_data

    report = json.load(open(os.path.join(out, "report.json")))
    state = json.load(open(os.path.join(out, "auto.json")))
    task = get_task(state["task"])
    teacher = state["teacher"] if os.path.isdir(state["teacher"]) else family_folder(
        os.path.join(out, "teacher-onnx"), os.path.join(out, "teacher-family"))
    rows = load_data(task, "train", state.get("data_dir"), 8)   # static INT8 calibrates on them
    table = LatencyTable(table_path, teacher, task, rows, threads=report["threads"], target=report["target"],
                         log=lambda msg: print(msg, file=sys.stderr))
    seq = report["seq_len"]
    results = []
    for row in report["trials"]:
        if row["state"] != "COMPLETE" or row.get("same_as") is not None or not row.get("folder"):
            continue
        folder = os.path.join(out, row["folder"])
        if row.get("exits") or not os.path.isdir(folder):
            continue
        layers = [tuple(shape) for shape in row["layers"]]
        predicted = table.predict(layers, row["precisions"], row["seqs"], rest_precision(row), row.get("reach"),
                                  prunes_tokens=row["params"].get("tokens", 1.0) < 1)
        check = table.check(f"trial {row['number']}", folder, predicted, seq)
        results.append({**check, "layers": len(layers), "was_predicted_ms": row["latency_ms"],
                        "params": row["params"]})
    _, depth = teacher_shape(teacher)
    full = [table.full] * depth
    predicted = table.predict(full, "fp32", layer_seqs(seq, depth, 1.0))
    check = table.check("teacher", os.path.join(out, "teacher-onnx"), predicted, seq)
    results.append({**check, "layers": depth, "was_predicted_ms": report["teacher_figures"]["latency_ms"]})
    lines = ["| model | layers | before: predicted | now: predicted | measured | error before | error now |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        before = abs(r["was_predicted_ms"] - r["measured_ms"]) / r["measured_ms"]
        lines.append(f"| {r['model']} | {r['layers']} | {r['was_predicted_ms']:.3f} | {r['predicted_ms']:.3f} | "
                     f"{r['measured_ms']:.3f} | {100 * before:.1f}% | {100 * r['error']:.1f}% |")
    print("\n".join(lines))
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"search": os.path.basename(os.path.abspath(out)), "table_family": table.family,
                       "machine": table.machine, "seq_len": seq, "results": results}, f, indent=2)
    return results


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    recheck(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
