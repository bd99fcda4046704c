"""The settings of ``compressor serve``: one dataclass, the command line and the Python API alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from compressor.core.settings import at_least_one, check_fields, not_negative, setting

# auto: a dynamic INT8 graph quantises its activations with one range per batch, so a row's
# answer would depend on the rows it shares a batch with (other clients' texts); such a graph
# runs each text alone, as ``predict --onnx`` does. Every other graph runs the batch together.
ROW_MODES = ("auto", "together", "alone")


def _port(value, name, config=None) -> Optional[str]:
    if not 0 <= value <= 65535:
        return f"{name} must be a TCP port, 0 to 65535 (0: any free one), got {value}"
    return None


@dataclass
class ServeConfig:
    """How ``compressor serve`` listens, batches and limits requests."""
    host: str = "127.0.0.1"           # address to listen on (0.0.0.0: every interface)
    port: int = setting(8000, check=_port)   # TCP port
    max_batch: int = setting(32, check=at_least_one)   # most texts one batch gathers
    max_wait_ms: float = setting(5.0, check=not_negative)   # longest a text waits for others (only while busy)
    bucket: int = setting(8, check=at_least_one)   # a batch runs in groups of this many texts of like length
    threads: Optional[int] = setting(None, check=at_least_one)   # onnxruntime threads [default: OMP_NUM_THREADS, else its own]
    workers: int = setting(1, check=at_least_one)   # server processes, each with its own model and batcher
    max_body_bytes: int = setting(1 << 20, check=at_least_one)   # largest request body (413 beyond)
    max_texts: int = setting(64, check=at_least_one)   # most texts in one request (413 beyond)
    max_chars: int = setting(20000, check=at_least_one)   # longest text in characters (413 beyond)
    rows: str = setting("auto", choices=ROW_MODES)   # together, alone, or auto (alone for dynamic INT8)
    shutdown_timeout: float = setting(30.0, check=not_negative)   # seconds: on SIGTERM, the longest wait for in-flight requests

    def __post_init__(self):
        check_fields(self)
