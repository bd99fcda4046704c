"""Issue 33 on the accuracy-first chain's recorded shape: its token-pruned INT8 graph against the
same chain without tokens, at batch 1 on real dev rows, each graph in its own process.

Reuses ``chain_latency_same_shape``'s work folder (``{work}/{task}/chain-hf``: the pruned
student's recorded per-layer heads and FFN, random weights; ``chain-int8``: its recorded INT8
choice). Adds the held-out search's token schedule (``{records}/{task}-tokens/02-token_prune``'s
ratio values, given with ``--keep``) by ratio (a fixed share is kept, so latency does not depend on
the weights), exports it, and makes the INT8 choice of ``{task}-tokens/04-quantize/record.json``.

    GLUE_DIR=../shared/glue_data flock -x /tmp/cpu.lock .venv/bin/python -m \\
        bench.experiments.token_prune_chain_shape --tasks mrpc rte --keep '[1,1,0.6,0.6,0.6]' \\
        --out bench/results/chain-trained-cpu/token-prune-chain-shape-cpu.json
"""
import argparse
import json
import os
import shutil
import sys


TOKEN_FOLDERS = ("tokens-hf", "tokens-onnx", "tokens-int8", "tokens-int8-chain-choice")


def _fresh(folder: str, plan: dict) -> None:
    """Drop the token graphs built for another chain shape, schedule or INT8 choice: the work folder
    is chain_latency_same_shape's, rebuilt in place whenever it is given another run's records."""
    from bench.experiments.jsonfiles import read_or_none
    from compressor.core.io import write_text

    stamp = os.path.join(folder, "tokens-plan.json")
    if read_or_none(stamp) == plan:
        return
    for name in TOKEN_FOLDERS:
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    write_text(stamp, json.dumps(plan))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="runs/chain-latency-same-shape")
    ap.add_argument("--records", default="bench/results/accuracy-ablation-h200x4")
    ap.add_argument("--tasks", nargs="+", default=["mrpc", "rte"])
    ap.add_argument("--keep", required=True)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--int8", choices=["tokens", "chain"], default="tokens",
                    help="the token graph's INT8 choice: the GPU run's token recipe's ({task}-tokens), or the "
                         "chain's own (for a chain whose run had no token recipe)")
    ap.add_argument("--with-today", action="store_true",
                    help="also time today's chain (the work folder's today-int8) in the same rounds")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from bench.experiments.chain_latency_same_shape import _read, int8_choice, int8_maker
    from bench.experiments.token_prune_latency import kept_shares
    from compressor.bench.harness import BenchConfig, Spec, fingerprint, isolated_latency, percentiles
    from compressor.core.io import write_text
    from compressor.core.data import get_task, load_data
    from compressor.export.onnx import example_texts, export_onnx
    from compressor.tokens.stage import token_prune

    data_dir = os.environ.get("GLUE_DIR")
    keep = json.loads(args.keep)
    out = {"command": "python -m bench.experiments.token_prune_chain_shape " + " ".join(argv or sys.argv[1:]),
           "what": "latency and kept tokens only (random weights in the recorded shape); the scores are the "
                   "GPU run's ({task}-tokens/report.md)", "keep": keep, "batch": 1, "tasks": {}}
    for task in args.tasks:
        folder = os.path.join(args.work, task)
        dev8 = load_data(get_task(task), "dev", data_dir, 8)   # the rows each INT8 graph is scored on as it is made
        chain = (_read(os.path.join(folder, "plan.json")) or {}).get("new") or {}   # the shape built there
        chain_choice = chain.get("int8")
        choice = chain_choice if args.int8 == "chain" else \
            int8_choice(_read(os.path.join(args.records, f"{task}-tokens", "04-quantize", "record.json")))
        _fresh(folder, {"chain": chain, "keep": keep, "int8": choice})
        tok = os.path.join(folder, "tokens-hf")
        if not os.path.isdir(tok):
            token_prune(os.path.join(folder, "chain-hf"), tok,
                        {"by": "ratio", "keep": keep, "learn": False, "hard_epochs": 0},
                        train_limit=8, dev_limit=8)
        onnx = os.path.join(folder, "tokens-onnx")
        if not os.path.isdir(onnx):
            export_onnx(tok, onnx, task=task, data_dir=data_dir, parity_limit=8, overwrite=True)
        q = os.path.join(folder, "tokens-int8")
        if not os.path.isdir(q):
            int8_maker(onnx, choice, task, data_dir, "auto", dev8)(q)
        graphs = {"chain-int8": os.path.join(folder, "chain-int8"), "chain-tokens-int8": q}
        if args.with_today:
            graphs["today-chain-int8"] = os.path.join(folder, "today-int8")
        entry = {"tokens_int8_choice": choice, "chain_int8_choice": chain_choice}
        if chain_choice and set(chain_choice.get("fp32_units", [])) != set(choice.get("fp32_units", [])):
            # the token graph with the chain's own INT8 choice: token pruning's effect alone
            same = os.path.join(folder, "tokens-int8-chain-choice")
            if not os.path.isdir(same):
                int8_maker(onnx, chain_choice, task, data_dir, "auto", dev8)(same)
            graphs["chain-tokens-int8-chain-choice"] = same
        if args.build_only:
            out["tasks"][task] = entry
            continue
        texts = example_texts(load_data(get_task(task), "dev", data_dir, args.rows).examples)
        entry["kept_tokens"] = kept_shares(q, texts)
        for threads in args.threads:
            before = os.getloadavg()
            times = isolated_latency([Spec(name=n, path=g, engine="onnxruntime") for n, g in graphs.items()],
                                     texts, threads, BenchConfig())
            stats = {n: percentiles(t) for n, t in times.items()}
            base = stats["chain-int8"]
            ratio = {n: {"mean": round(base["mean"] / s["mean"], 3), "p50": round(base["p50"] / s["p50"], 3)}
                     for n, s in stats.items() if n != "chain-int8"}
            timed = {"ms": stats, "speedup": ratio}
            today = stats.get("today-chain-int8")
            if today:   # p50 over today's chain (issue 32: <= 1.10)
                timed["p50_over_today"] = {n: round(s["p50"] / today["p50"], 3) for n, s in stats.items()
                                           if n != "today-chain-int8"}
            entry[f"{threads}_threads"] = {**timed, "loadavg_before": [round(v, 2) for v in before],
                                           "loadavg_after": [round(v, 2) for v in os.getloadavg()]}
            print(task, threads, ratio, {n: (s["mean"], s["p50"]) for n, s in stats.items()}, flush=True)
        out["tasks"][task] = entry
    out["fingerprint"] = fingerprint()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text(args.out, json.dumps(out, indent=1))   # a temporary name, then renamed into place
    print("wrote", args.out)


if __name__ == "__main__":
    main()
