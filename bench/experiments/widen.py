"""Copy a model folder whose weights travelled to the GPU machine in fp16 (half the bytes),
widening its floating-point weights back to fp32.

    python3 -m bench.experiments.widen SRC DST
"""
import os
import shutil
import sys


def main(src: str, dst: str) -> None:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, dirs_exist_ok=True)
    weights = load_file(os.path.join(src, "model.safetensors"))
    save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()},
              os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main(*sys.argv[1:3])
