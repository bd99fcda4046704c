#!/bin/bash
# On the GPU machine (no package registry there): the pinned stack that machine lacks
# (transformers 4.57, tokenizers, huggingface_hub, optimum + optimum-onnx, neural-compressor and
# its needs), from wheels carried in .whl (downloaded here for Python 3.12 manylinux), into
# ~/site; the GLUE tasks from .carry/glue5/glue5.tgz into ~/glue. Marks ~/site/ok once every
# module the headline needs imports, so later calls put ~/site first on PYTHONPATH:
#   P=$PWD; [ -f ~/site/ok ] && P=~/site:$P; export PYTHONPATH=$P
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target ~/site .whl/*.whl
mkdir -p ~/glue && tar -xzf .carry/glue5/glue5.tgz -C ~/glue && ls ~/glue
PYTHONPATH=~/site:$PWD python3 - <<'PY' && touch ~/site/ok
import importlib
for m in ("torch", "transformers", "tokenizers", "optimum.onnxruntime", "onnxruntime",
          "neural_compressor.torch.quantization", "compressor.cli"):
    mod = importlib.import_module(m)
    print(m, getattr(mod, "__version__", ""))
PY
ls ~/site/ok && echo "pinned stack ready" || echo "pinned stack NOT ready: the machine's own transformers is used, without optimum/INC"
nproc; grep -o -w -E 'amx_int8|avx512_vnni|avx2' /proc/cpuinfo | sort | uniq -c; nvidia-smi --query-gpu=name,memory.total --format=csv
