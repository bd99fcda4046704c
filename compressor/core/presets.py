"""Hardware presets: a user names the machine they deploy to, not the quantisation flags.

Each preset fixes the integer formats that machine's INT8 kernels run fastest
and most accurately with; any field can still be overridden one by one.

- ``avx2``: x86 without VNNI. Its u8 x s8 multiply (``vpmaddubsw``) adds pairs
  into 16 bits and can saturate, so weights keep 7 bits (``reduce_range``).
- ``avx512_vnni``: x86 with VNNI (Cascade Lake and later, AMD Zen 4): u8 x s8
  dot products into 32 bits, no saturation, full 8-bit weights.
- ``amx``: Sapphire Rapids and later (AMX-INT8 tiles): as VNNI.
- ``arm64``: ARMv8.2+ ``sdot``: signed int8 activations as well (S8S8), the
  format ONNX Runtime's ARM kernels are tuned for.
- ``auto``: the preset of the machine this runs on (``detect_preset``).

Weights are symmetric int8 with one scale per output channel everywhere: on
the MiniLM-L6 SST-2 teacher per-channel scales kept 90.14% dev accuracy
against 88.99% per-tensor, at the same speed (bench/results/quant-*.json).
x86 activations are asymmetric uint8 (their ranges, after GELU or softmax,
are one-sided).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Optional

from compressor.core.errors import CompressorError


@dataclass(frozen=True)
class HardwarePreset:
    name: str
    per_channel: bool
    symmetric_weights: bool
    symmetric_activations: bool
    reduce_range: bool
    description: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {
    "avx2": HardwarePreset("avx2", per_channel=True, symmetric_weights=True,
                           symmetric_activations=False, reduce_range=True,
                           description="x86 AVX2 without VNNI (u8 x s8, 7-bit weights)"),
    "avx512_vnni": HardwarePreset("avx512_vnni", per_channel=True, symmetric_weights=True,
                                  symmetric_activations=False, reduce_range=False,
                                  description="x86 AVX-512 VNNI (u8 x s8 dot products)"),
    "amx": HardwarePreset("amx", per_channel=True, symmetric_weights=True,
                          symmetric_activations=False, reduce_range=False,
                          description="x86 AMX-INT8 (Sapphire Rapids and later)"),
    "arm64": HardwarePreset("arm64", per_channel=True, symmetric_weights=True,
                            symmetric_activations=True, reduce_range=False,
                            description="ARMv8.2+ with sdot (s8 x s8)"),
}

# Every name a user may give (the one list: the quantize stage, the CLI and the bench peers).
PRESET_NAMES = tuple(PRESETS) + ("auto",)


def cpu_flags() -> set:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def detect_preset(flags: Optional[set] = None, machine: Optional[str] = None) -> str:
    """The preset that fits this machine: amx, avx512_vnni, arm64 or avx2."""
    import platform

    flags = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    if "amx_int8" in flags:
        return "amx"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "avx512_vnni"
    return "avx2"


def resolve_preset(name: str, per_channel: Optional[bool] = None,
                   symmetric_weights: Optional[bool] = None,
                   symmetric_activations: Optional[bool] = None,
                   reduce_range: Optional[bool] = None) -> HardwarePreset:
    """The named preset (``auto``: this machine's) with any explicitly given field overriding it."""
    if name == "auto":
        name = detect_preset()
    try:
        preset = PRESETS[name]
    except KeyError:
        raise CompressorError(f"unknown hardware preset '{name}'; use one of "
                              f"{', '.join(PRESET_NAMES)}") from None
    overrides = {k: v for k, v in dict(per_channel=per_channel, symmetric_weights=symmetric_weights,
                                       symmetric_activations=symmetric_activations,
                                       reduce_range=reduce_range).items() if v is not None}
    return replace(preset, **overrides)


def saturates_here(preset: HardwarePreset, flags: Optional[set] = None, machine: Optional[str] = None) -> bool:
    """Whether ``preset``'s graph computes wrong outputs on this machine: full 8-bit weights
    (``reduce_range`` off) against unsigned activations on an x86 CPU whose fastest INT8
    instruction is AVX2's u8 x s8 multiply into 16 bits, which saturates (seen: every prediction
    one class on an AVX2-only AMD EPYC with the ``avx512_vnni`` preset). The graph is still right
    for the machine it is meant for; only what is scored here is off."""
    import platform

    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64") or preset.reduce_range or preset.symmetric_activations:
        return False
    return detect_preset(flags, machine) == "avx2"
