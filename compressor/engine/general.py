"""General distillation done once and reused (TinyBERT's and MiniLM's task-agnostic stage).

The papers distil a student from the *pre-trained* teacher on unlabelled text once, then
distil that student on each task from the task's fine-tuned teacher. A distill stage with
``general_teacher`` (the encoder the task teachers were fine-tuned from) and ``general_cache``
(a folder) does the same: the first run trains the general phase and keeps the student's
weights (and the projections the layer losses trained) there under a digest of everything
that shapes them: the student, the layer losses, the phase's training settings, the general
teacher's files and the text. A later run with the same digest, for any task, loads them
instead of training (the classifier, whose shape depends on the task, is not kept). The text
is then the same for every task: every GLUE task's dev sentences under the data folder are left
out. Runs that start together wait for the first (a file lock), so it is trained once.

Only safetensors are written and read, so nothing in the cache is unpickled.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
from dataclasses import asdict
from typing import Iterator, Optional

from compressor.core.errors import CompressorError
from compressor.core.io import atomic_dir, write_json

WEIGHTS = "general.safetensors"
RECORD = "general.json"


def _teacher_key(path: str):
    """The general teacher by its files (size and SHA-256 of each), or its name (a hub id)."""
    from compressor.core.guard import digest_files

    return digest_files(path, skip=()) if os.path.isdir(path) else path


def digest(config, teacher_path: str, general_set) -> str:
    """What the general phase's result depends on, hashed."""
    from compressor.engine.distiller import general_phase_config

    phase = general_phase_config(config)
    text = hashlib.sha256("\n".join(e.texts[0] for e in general_set.examples).encode()).hexdigest()
    keys = ("epochs", "lr", "batch_size", "max_length", "seed", "warmup", "weight_decay", "grad_accum",
            "max_grad_norm", "max_steps", "precision")
    doc = {"student": asdict(config.student), "losses": {n: asdict(s) for n, s in config.losses.intermediate_only().items()},
           "phase": {k: getattr(phase, k) for k in keys}, "teacher": _teacher_key(teacher_path), "text": text}
    if phase.group_by_length:   # another batch order; only when on, so existing caches keep their keys
        doc["phase"]["group_by_length"] = True
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:20]


@contextlib.contextmanager
def locked(folder: str, key: str) -> Iterator[str]:
    """``folder/key`` (the cached phase), held under an exclusive lock while the block runs."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise CompressorError(f"general_cache {folder}: cannot create it ({exc.strerror})") from None
    with open(os.path.join(folder, f".{key}.lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:   # another run is training this general phase: wait for it
            print(f"general distillation: another run is training {os.path.join(folder, key)}; "
                  "waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield os.path.join(folder, key)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _kept(trainee) -> dict:
    """The trainee's tensors a later task can take: all but the classifier's (by shape they
    may not fit another task), shared tensors once."""
    head = _head_prefixes(trainee.student)
    state = {}
    seen = set()
    for name, tensor in trainee.state_dict().items():
        if any(name.startswith(p) for p in head) or tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.detach().cpu().contiguous()
    return state


def _head_prefixes(student) -> list:
    """The classifier's tensors (the architecture registry names it), whose shape is the task's."""
    from compressor.core.arch import arch_of

    name = arch_of(student).classifier
    return [f"student.{name}."] if name else []


def has(path: str) -> bool:
    return os.path.isfile(os.path.join(path, WEIGHTS)) and os.path.isfile(os.path.join(path, RECORD))


def save(path: str, trainee, record: dict) -> None:
    from safetensors.torch import save_file

    with atomic_dir(path) as tmp:
        save_file(_kept(trainee), os.path.join(tmp, WEIGHTS))
        write_json(os.path.join(tmp, RECORD), record)


def load(path: str, trainee) -> Optional[dict]:
    """Load a cached general phase into ``trainee``; its record, or None when there is none."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights, record = os.path.join(path, WEIGHTS), os.path.join(path, RECORD)
    if not (os.path.isfile(weights) and os.path.isfile(record)):
        return None
    try:
        state = load_file(weights)
    except (SafetensorError, OSError) as exc:
        raise CompressorError(f"general_cache {path}: unreadable weights ({exc}); remove the folder") from None
    own = trainee.state_dict()
    wrong = [n for n, t in state.items() if n not in own or own[n].shape != t.shape]
    if wrong:
        raise CompressorError(f"general_cache {path}: {len(wrong)} tensors do not fit this student "
                              f"(first: {wrong[0]}); remove the folder")
    trainee.load_state_dict(state, strict=False)
    with open(record) as f:
        return json.load(f)
