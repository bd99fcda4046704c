"""The figures of ``bench/experiments/prune_vocab.sh`` as a results file: the teacher's and the
vocabulary-pruned model's INT8 graphs, their size on disk and dev accuracy, and the pruning
record (pieces kept, share of dev sentences that met a piece that became unknown)."""
import json
import os
import sys


def main(teacher: str, work: str, out: str, command: str) -> dict:
    from compressor.core.results import fingerprint, row, write_results

    record = json.load(open(os.path.join(work, "vocab", "metrics.json")))
    names = [n for n in ("teacher", "base", "vocab") if os.path.isdir(os.path.join(work, f"{n}-int8"))]
    labels = {"teacher": "teacher", "base": "base", "vocab": "vocab-pruned"}
    rows, sizes = [], {}
    for name in names:
        folder = os.path.join(work, f"{name}-int8")
        scored = json.load(open(os.path.join(work, f"{name}-int8-eval.json")))
        sizes[name] = os.path.getsize(os.path.join(folder, "model.onnx"))
        rows.append(row(f"{labels[name]}-int8", "sst2", "accuracy",
                        round(100 * scored["metrics"]["accuracy"], 2), None, parameters=None,
                        size_bytes=sizes[name], engine="onnxruntime",
                        extra={"precision": "int8-dynamic", "onnx_bytes": sizes[name],
                               "size_vs_teacher": round(sizes["teacher"] / sizes[name], 3)}))
    for r in rows[1:]:
        r["teacher_value"] = rows[0]["value"]
    pruning = record["pruning"]
    chain = "base" in names
    what = ("vocabulary pruning of a MiniLM-L6 SST-2 teacher: INT8 ONNX size and dev accuracy against "
            "the teacher's INT8 ONNX")
    if chain:
        what = ("vocabulary pruning applied to a model made from the MiniLM-L6 SST-2 teacher (base), "
                "INT8 ONNX size and dev accuracy against the teacher's INT8 ONNX and the base's")
    return write_results(out, rows, command=command, fingerprint_info=fingerprint(), what=what,
                         size_ratio=round(sizes["teacher"] / sizes["vocab"], 3),
                         accuracy_change_points=round(rows[-1]["value"] - rows[0]["value"], 2),
                         pruning=pruning, parameters_before=record["parameters_before"],
                         parameters_after=record["parameters"])


if __name__ == "__main__":
    main(*sys.argv[1:5])
