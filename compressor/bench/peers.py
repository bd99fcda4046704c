"""What a user would pick instead of our compression: off-the-shelf recipes applied to the teacher.

- ``pytorch-fp32``: the teacher as it is (the baseline);
- ``pytorch-int8``: ``torch.ao`` dynamic INT8 of every Linear;
- ``ort-fp32``: the plain ONNX export under onnxruntime (its default graph optimisations);
- ``ort-o2``: optimum's ``ORTOptimizer`` at O2 (transformer fusions, GELU approximation off);
- ``ort-o2-int8``: that graph through optimum's ``ORTQuantizer``, dynamic INT8 with optimum's
  configuration for the hardware preset (the quantize stage's presets; ``auto``: this CPU's);
- ``inc-int8``: Intel Neural Compressor static INT8 (PT2E, calibrated on training sentences),
  run through ``torch.compile`` as INC intends;
- ``openvino-fp32``: the plain ONNX export read by OpenVINO (IR, CPU plugin, f32 inference);
- ``openvino-int8``: that IR through NNCF's post-training INT8 (calibrated on training
  sentences), as ``compressor export --format openvino --int8`` writes it. Both need the
  ``openvino`` extra.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Callable, List, Optional, Sequence

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir

from compressor.core.presets import PRESET_NAMES, PRESETS, detect_preset

from compressor.bench.harness import Spec, graph_size

PEERS = ("pytorch-fp32", "pytorch-int8", "ort-fp32", "ort-o2", "ort-o2-int8", "inc-int8", "openvino-fp32",
         "openvino-int8")
DEFAULT_PEERS = ("pytorch-fp32", "pytorch-int8", "ort-fp32", "ort-o2", "ort-o2-int8")
# optimum's AutoQuantizationConfig for each hardware preset (it has none for AMX, which has VNNI)
OPTIMUM_CONFIG = {"avx2": "avx2", "avx512_vnni": "avx512_vnni", "amx": "avx512_vnni", "arm64": "arm64"}
assert set(OPTIMUM_CONFIG) == set(PRESETS), "every hardware preset needs an optimum configuration"


def check_peers(peers: Sequence[str], preset: str = "auto") -> None:
    """Refuse an unknown peer or preset before anything is built or timed."""
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise CompressorError(f"unknown peer {unknown[0]!r}; peers: {', '.join(PEERS)}")
    if preset not in PRESET_NAMES:
        raise CompressorError(f"unknown hardware preset {preset!r}; use {', '.join(PRESET_NAMES)}")


def peer_specs(teacher_dir: str, work_dir: str, peers: Sequence[str] = DEFAULT_PEERS,
               preset: str = "auto", data_dir: Optional[str] = None) -> List[Spec]:
    """Build the peers' models under ``work_dir`` (reused when already there) and describe them."""
    from compressor.core.models import count_parameters, load_for_task, size_on_disk

    check_peers(peers, preset)
    preset = detect_preset() if preset == "auto" else preset
    os.makedirs(work_dir, exist_ok=True)
    params = count_parameters(load_for_task(teacher_dir)[0])
    specs = []
    onnx_plain = os.path.join(work_dir, "ort-fp32")

    def plain() -> str:
        # the plain export: no fusions of ours, no parity pass (the peers are scored anyway). Made
        # only when a peer needs its graph, so a work dir of prebuilt peers (their graphs, and the
        # plain export's folder without model.onnx for the tokenizer) times them with no export
        if not os.path.isfile(os.path.join(onnx_plain, "model.onnx")):
            from compressor.export.onnx import export_onnx

            export_onnx(teacher_dir, onnx_plain, optimize=False, parity=False)
        return onnx_plain

    def tokenizer() -> str:   # the ONNX peers run with the plain export's tokenizer and manifest
        return onnx_plain if os.path.isfile(os.path.join(onnx_plain, "manifest.json")) else plain()

    def o2() -> str:
        return _ort_o2(plain, os.path.join(work_dir, "ort-o2"))

    for peer in peers:
        if peer == "pytorch-fp32":
            specs.append(Spec(peer, teacher_dir, "pytorch", "fp32", group="peer", source="teacher",
                              parameters=params, size_bytes=size_on_disk(teacher_dir)))
        elif peer == "pytorch-int8":
            specs.append(Spec(peer, teacher_dir, "pytorch", "int8-dynamic", group="peer",
                              source="torch.ao.quantization.quantize_dynamic(Linear, qint8)",
                              parameters=params, size_bytes=_torch_int8_size(teacher_dir)))
        elif peer == "ort-fp32":
            specs.append(_onnx_spec(peer, os.path.join(plain(), "model.onnx"), onnx_plain, params,
                                    "torch -> ONNX, onnxruntime defaults"))
        elif peer == "ort-o2":
            specs.append(_onnx_spec(peer, o2(), tokenizer(), params, "optimum ORTOptimizer O2"))
        elif peer == "ort-o2-int8":
            path = _ort_int8(o2, os.path.join(work_dir, f"ort-o2-int8-{preset}"), preset)
            specs.append(_onnx_spec(peer, path, tokenizer(), params,
                                    f"optimum ORTOptimizer O2 + ORTQuantizer dynamic INT8 ({preset})",
                                    precision="int8-dynamic"))
        elif peer == "inc-int8":
            specs.append(Spec(peer, teacher_dir, "inc", "int8-static", group="peer",
                              source="neural_compressor.torch StaticQuantConfig (PT2E) + torch.compile, Inductor freezing",
                              parameters=params, size_bytes=None, extra={"data_dir": data_dir}))
        elif peer in ("openvino-fp32", "openvino-int8"):
            int8 = peer == "openvino-int8"
            folder = _openvino(plain, os.path.join(work_dir, peer), int8, data_dir)
            specs.append(Spec(peer, folder, "openvino", "int8-static" if int8 else "fp32", group="peer",
                              source="OpenVINO IR of the ONNX export" + (", NNCF post-training INT8" if int8 else "")
                              + " (CPU plugin, f32 inference)", parameters=params,
                              size_bytes=graph_size(os.path.join(folder, "model.xml"))))
    return specs


def _openvino(plain: Callable[[], str], out: str, int8: bool, data_dir: Optional[str]) -> str:
    """The IR ``compressor export --format openvino`` writes (no parity pass: the peers are scored),
    from the plain export (``plain()`` makes it) unless ``out`` holds it already."""
    if os.path.isfile(os.path.join(out, "model.xml")):
        return out
    from compressor.export.targets import export_model

    export_model(plain(), out, format="openvino", int8=int8, parity_rows=0, data_dir=data_dir)
    return out


def _onnx_spec(name, path, tok_folder, params, source, precision="fp32") -> Spec:
    return Spec(name, path, "onnxruntime", precision, group="peer", source=source, parameters=params,
                size_bytes=os.path.getsize(path), tokenizer_path=tok_folder)


def _ort_o2(plain: Callable[[], str], out: str) -> str:
    target = os.path.join(out, "model_optimized.onnx")
    if os.path.isfile(target):
        return target
    plain = plain()
    from optimum.onnxruntime import ORTOptimizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig

    logging.getLogger("optimum").setLevel(logging.ERROR)
    with atomic_dir(out) as tmp:
        optimizer = ORTOptimizer.from_pretrained(plain, file_names=["model.onnx"])
        optimizer.optimize(AutoOptimizationConfig.O2(), save_dir=tmp)
    return target


def _ort_int8(o2: Callable[[], str], out: str, preset: str) -> str:
    target = os.path.join(out, "model_optimized_quantized.onnx")
    if os.path.isfile(target):
        return target
    o2_file = o2()   # the O2 graph, made only when the INT8 one is not there yet
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    logging.getLogger("optimum").setLevel(logging.ERROR)
    # onnxruntime's quantiser needs every tensor's type, which plain ONNX shape inference cannot
    # give for the fused (com.microsoft) operators of O2: infer them symbolically first
    import onnx

    from compressor.export.int8 import symbolic_shapes

    with atomic_dir(out) as tmp:
        shutil.copy2(os.path.join(os.path.dirname(o2_file), "config.json"), tmp)
        typed = os.path.join(tmp, "typed.onnx")
        onnx.save(symbolic_shapes(onnx.load(o2_file)), typed)
        quantizer = ORTQuantizer.from_pretrained(tmp, file_name="typed.onnx")
        config = getattr(AutoQuantizationConfig, OPTIMUM_CONFIG[preset])(is_static=False, per_channel=False)
        quantizer.quantize(config, save_dir=tmp, file_suffix=None)
        os.replace(typed, os.path.join(tmp, "model_optimized_quantized.onnx"))
    return target


def _torch_int8_size(teacher_dir: str) -> int:
    """Bytes of the dynamic-INT8 model's state dict as ``torch.save`` writes it."""
    import io

    import torch

    from compressor.core.models import load_for_task

    net = torch.ao.quantization.quantize_dynamic(load_for_task(teacher_dir)[0].eval(),
                                                 {torch.nn.Linear}, dtype=torch.qint8)
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    return buf.tell()
