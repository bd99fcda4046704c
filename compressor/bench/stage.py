"""Recipe stage ``bench``: every model the run has made, and the peers, timed side by side."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List

from compressor.core.presets import PRESET_NAMES
from compressor.core.registry import TRAINABLE, register_stage
from compressor.core.settings import at_least_one, not_negative, positive, setting

from compressor.bench.harness import ENGINES
from compressor.bench.peers import DEFAULT_PEERS, PEERS


@dataclass
class BenchStageConfig:
    sentences: int = setting(200, check=positive)   # dev sentences timed at batch 1 (real lengths)
    warmup: int = setting(10, check=not_negative)
    threads: List[int] = setting(default_factory=lambda: [1], check=at_least_one)
    batch_sizes: List[int] = setting(default_factory=lambda: [32], check=at_least_one)   # throughput
    throughput_batches: int = setting(4, check=positive)
    peers: List[str] = setting(default_factory=lambda: list(DEFAULT_PEERS), choices=PEERS, what="peer")
    # the ort-o2-int8 peer's hardware preset: the quantize stage's list (auto: this machine's)
    preset: str = setting("auto", choices=PRESET_NAMES)
    engines: List[str] = setting(default_factory=lambda: ["pytorch"], choices=ENGINES,
                                 what="engine")   # for checkpoints; + pytorch-compile
    memory: bool = True                    # peak resident memory per variant (own process each)
    block: int = setting(20, check=positive)        # sentences a variant times per turn, in rounds
    pause_s: float = setting(0.1, check=not_negative)   # between turns: idle threads stop spinning


def _kinds() -> tuple:
    from compressor.exit.loader import KIND as EXIT_ONNX   # early exit's segment chains

    try:  # PyTorch models the quantisation stage made (torchao, INC, FP16/BF16)
        from compressor.quantize.torch_int8 import KIND
    except ImportError:
        return (TRAINABLE, "onnx", EXIT_ONNX)
    return (TRAINABLE, "onnx", EXIT_ONNX, KIND)


@register_stage("bench", BenchStageConfig, accepts=_kinds(), produces=None)
def bench_stage(ctx, config: BenchStageConfig) -> dict:
    """Benchmark the teacher, every stage's model and the peers (interleaved); the report shows them."""
    from compressor.core.errors import CompressorError
    from compressor.core.io import read_json
    from compressor.core.results import run_command, write_results

    from compressor.bench.harness import BenchConfig
    from compressor.bench.suite import run_benchmark, specs_for

    run_dir = os.path.dirname(os.path.abspath(ctx.out_dir))
    manifest = read_json(os.path.join(run_dir, "manifest.json"))
    specs, seen, parameters = [], set(), None
    for s in manifest["stages"]:
        # a quantised graph has as many parameters as the model it came from
        parameters = s.get("parameters") or parameters
        model_dir = s.get("model_dir")
        if not model_dir:
            continue
        path = model_dir if os.path.isabs(model_dir) else os.path.join(run_dir, model_dir)
        if path in seen or not os.path.isdir(path):
            continue
        seen.add(path)
        group = "teacher" if s.get("stage") == "teacher" else "ours"
        try:
            specs += specs_for(path, s["dir"], config.engines, ("fp32",), "cpu", group=group,
                               source=s.get("stage"), parameters=parameters)
        except CompressorError as exc:
            raise CompressorError(f"bench: cannot run the model of {s['dir']} ({exc})") from None
    bench_config = BenchConfig(sentences=config.sentences, warmup=config.warmup, threads=config.threads,
                               batch_sizes=config.batch_sizes, throughput_batches=config.throughput_batches,
                               memory=config.memory, block=config.block, pause_s=config.pause_s)
    peers = list(config.peers)
    if "pytorch-fp32" in peers:
        peers.remove("pytorch-fp32")  # the teacher in eager FP32 is that peer, already timed
    peer_specs_ = []
    if peers:
        from compressor.bench.peers import peer_specs

        peer_specs_ = peer_specs(ctx.teacher_dir, os.path.join(ctx.out_dir, "peers"), peers,
                                 preset=config.preset, data_dir=ctx.data_dir)
    command = run_command(manifest.get("source"), run_dir)
    doc = run_benchmark(specs=specs + peer_specs_, peers=(), config=bench_config, dev=ctx.split("dev"),
                        task=None, data_dir=ctx.data_dir)
    write_results(os.path.join(ctx.out_dir, "results.json"), doc["rows"], command=command,
                  fingerprint_info=doc["fingerprint"], config=doc["config"])
    p50 = {r["name"]: r["latency_ms"]["p50"] for r in doc["rows"]
           if r.get("batch_size") == 1 and r.get("threads") == config.threads[0]}
    return {"results": "results.json", "variants": len(specs) + len(peer_specs_), "p50_ms": p50,
            "threads": config.threads, "sentences": config.sentences}
