"""The figures of ``bench/experiments/prune_vocab.sh`` as a results file: the teacher's and the
vocabulary-pruned model's INT8 graphs, their size on disk and dev accuracy, and the pruning
record (pieces kept, share of dev sentences that met a piece that became unknown)."""
import json
import os
import sys


def main(teacher: str, work: str, out: str, command: str) -> dict:
    from compressor.results import fingerprint, row, write_results

    record = json.load(open(os.path.join(work, "vocab", "metrics.json")))
    rows, sizes = [], {}
    for name in ("teacher", "vocab"):
        folder = os.path.join(work, f"{name}-int8")
        scored = json.load(open(os.path.join(work, f"{name}-int8-eval.json")))
        sizes[name] = os.path.getsize(os.path.join(folder, "model.onnx"))
        rows.append(row(f"{'teacher' if name == 'teacher' else 'vocab-pruned'}-int8", "sst2", "accuracy",
                        round(100 * scored["metrics"]["accuracy"], 2), None, parameters=None,
                        size_bytes=sizes[name], engine="onnxruntime",
                        extra={"precision": "int8-dynamic", "onnx_bytes": sizes[name]}))
    rows[1]["teacher_value"] = rows[0]["value"]
    pruning = record["pruning"]
    return write_results(out, rows, command=command, fingerprint_info=fingerprint(),
                         what="vocabulary pruning of a MiniLM-L6 SST-2 teacher: INT8 ONNX size and dev "
                              "accuracy against the teacher's INT8 ONNX",
                         size_ratio=round(sizes["teacher"] / sizes["vocab"], 3),
                         accuracy_change_points=round(rows[1]["value"] - rows[0]["value"], 2),
                         pruning=pruning, parameters_before=record["parameters_before"],
                         parameters_after=record["parameters"])


if __name__ == "__main__":
    main(*sys.argv[1:5])
