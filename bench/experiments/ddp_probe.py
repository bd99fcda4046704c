"""Where a data-parallel distillation step spends its time, without the real weights:
a randomly initialised MPNet-base teacher and its 6-layer student on SST-2 rows (timing
does not depend on the weights). Run under torchrun, one process per GPU:

    PYTHONPATH=. torchrun --nproc-per-node N bench/experiments/ddp_probe.py TOKENIZER GLUE_DIR BATCH STEPS [--profile]

Prints the all-reduce bandwidth of a gradient-sized tensor (N > 1), the training
throughput of ``fit``, and with ``--profile`` the GPU kernels that took longest.
``DDP_COMM_HOOK=bf16`` sends the gradients as bf16 (accelerate's DDP communication hook).
"""
import os
import sys
import time

import torch
import transformers


def allreduce_bandwidth(numel: int = 67_000_000, repeats: int = 5) -> float:
    import torch.distributed as dist

    x = torch.ones(numel, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / repeats
    return round(x.numel() * 4 / seconds / 1e9, 1), round(1000 * seconds, 2)


def main():
    tok_dir, glue, batch, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    profile = "--profile" in sys.argv
    from compressor.core import distributed
    from compressor.core.data import load_split
    from compressor.engine import distiller

    world = distributed.world_size()
    if world > 1:
        distributed.init("cuda")
        gbps, ms = allreduce_bandwidth()
        if distributed.is_main():
            print(f"all_reduce of 268 MB (fp32 gradients of the student): {ms} ms, {gbps} GB/s")
    hook = os.environ.get("DDP_COMM_HOOK")
    if hook:
        import accelerate
        from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs

        init = accelerate.Accelerator.__init__

        def with_hook(self, *args, **kwargs):
            kwargs["kwargs_handlers"] = [DistributedDataParallelKwargs(
                comm_hook=DDPCommunicationHookType(hook))]
            init(self, *args, **kwargs)

        accelerate.Accelerator.__init__ = with_hook
    tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    teacher = transformers.MPNetForSequenceClassification(
        transformers.MPNetConfig(vocab_size=tok.vocab_size, num_labels=2))
    train = load_split("sst2", "train", glue, limit=batch * steps)
    dev = load_split("sst2", "dev", glue, limit=256)
    config = distiller.DistillConfig(student={"kind": "layers", "num_layers": 6}, losses={"kd": 1},
                                     cache_teacher_logits=False,
                                     train={"batch_size": batch, "epochs": 1, "eval_every": 10 ** 9,
                                            "precision": "bf16", "device": "cuda", "lr": 1e-4})
    if profile:
        from torch.profiler import ProfilerActivity, profile as run_profile

        with run_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _, _, record = distiller.distill_model(teacher, tok, train, dev, config)
    else:
        _, _, record = distiller.distill_model(teacher, tok, train, dev, config)
    phase = record["phases"][-1]
    if distributed.is_main():
        print(f"processes {world} batch {batch} hook {hook}: {phase['steps']} steps, "
              f"{phase['train_loop_s']} s, {phase['samples_per_s']} rows/s, "
              f"{1000 * phase['train_loop_s'] / phase['steps']:.1f} ms/step", flush=True)
        if profile:
            print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=18,
                                            max_name_column_width=60))
    distributed.shutdown()


if __name__ == "__main__":
    main()
