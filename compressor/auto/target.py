"""Searching on one machine for another: the target's latency table, measured there, used here.

A search trains and scores candidates where the accelerators are (a GPU machine) while the
latency that matters is the deployment CPU's. Latency is predicted from a table
(:mod:`compressor.auto.latency`), so the table is what has to come from the target:

- on the target, :func:`measure_table` (``compressor auto MODEL --task T --measure-table
  [space options] --latency-table FILE``) measures every entry the search space can ask for
  (:func:`table_needs`) and stops. Any model of the teacher's family serves (the timed models have
  random weights); entries already in FILE are kept, so a stopped measurement resumes;
- on the search machine, ``--target-table FILE`` (``AutoConfig.target_table``) reads that table
  only: nothing is timed there, an entry the table lacks is one error naming it and the command
  that measures it on the target, and the whole-model checks are left to the target (the report
  says which machine its latencies belong to).

The entries a space needs follow from how a candidate is costed: each layer shape the ``heads``
and ``ffn`` shares leave of the teacher's (as structured pruning with scope ``layer`` counts
them), at every length a layer of any depth sees (``seq_len``'s bucket, and fewer tokens after
each token-pruned layer), at every layer precision (``mixed``: FP32 and dynamic INT8); the rest of
the model at those precisions; token pruning's cost where ``tokens`` drop some; an exit's cost
where ``exits`` has a rule; and the teacher (FP32, its shape, the bucket) for the report. A search
from a student (``--student``) prices the student's layers: the shapes the shares leave of the
student's, up to its depth; the table stays the teacher's family's (the student shares its width
and head size), so ``--measure-table --student FOLDER`` measures what that search needs.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Optional, Set, Tuple

from compressor.auto.config import AutoConfig
from compressor.auto.latency import LatencyTable, layer_seqs, seq_bucket
from compressor.core.errors import CompressorError

# the layers' precisions and the rest of the model's a precision of the space can give
LAYER_PRECISIONS = {"fp32": ("fp32",), "dynamic": ("dynamic",), "static": ("static",), "mixed": ("fp32", "dynamic")}
# an exit's cost is kept per segment precision (FP32 or INT8); static INT8 takes no exits
EXIT_PRECISIONS = {"fp32": ("fp32",), "dynamic": ("dynamic",), "static": (), "mixed": ("fp32", "dynamic")}
MIN_HEADS, MIN_FFN = 1, 32   # what structured pruning leaves a layer at least (its defaults)


def kept(units: int, share: float, minimum: int) -> int:
    """The units a layer keeps when ``share`` of its ``units`` go (structured pruning, scope layer)."""
    if not share:
        return units
    return units - max(0, min(int(round(share * units)), units - minimum))


def table_needs(config: AutoConfig, teacher_shape: Tuple[int, int], depth: int, seq_len: int,
                source_shapes: Optional[Set[Tuple[int, int]]] = None) -> Dict[str, Set[tuple]]:
    """The entries a search over ``config``'s space can ask of the table, for a teacher of
    ``teacher_shape`` (heads, FFN) at ``seq_len`` tokens whose trials compress a model of ``depth``
    layers of ``source_shapes`` (the teacher's own by default; a student's layers' shapes):
    ``layers`` as ``(precision, seq, heads, ffn)``, ``tokens`` and ``exits`` as ``(precision, seq)``."""
    heads, ffn = teacher_shape
    shapes = {(kept(own_heads, h, MIN_HEADS), kept(own_ffn, f, MIN_FFN))
              for own_heads, own_ffn in (source_shapes or {teacher_shape}) for h in config.heads for f in config.ffn}
    layer_precisions = {p for q in config.precisions for p in LAYER_PRECISIONS[q]}
    first, deepest = seq_bucket(seq_len), depth   # every candidate keeps at most the source's layers
    layers = {("fp32", first, heads, ffn)}   # the teacher, predicted for the report
    layers |= {(p, first, heads, ffn) for p in layer_precisions}   # the rest of a model is priced at its shape
    tokens: Set[tuple] = set()
    for keep in config.tokens:
        seqs = layer_seqs(seq_len, deepest, keep)   # a shallower candidate sees the first of these
        layers |= {(p, s, h, f) for p in layer_precisions for s in set(seqs) for h, f in shapes}
        if keep < 1 and deepest > 1:
            tokens |= {(p, s) for p in layer_precisions for s in set(seqs[:-1])}
    exits: Set[tuple] = set()
    if any(e != "none" for e in config.exits) and 1.0 in config.tokens and deepest > 1:
        exits = {(p, first) for q in config.precisions for p in EXIT_PRECISIONS[q]}
    return {"layers": layers, "tokens": tokens, "exits": exits}


def space_args(config: AutoConfig) -> List[str]:
    """The command-line options that give ``config``'s search space and latency settings."""
    def listed(values) -> str:
        return ",".join(str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)
                        for v in values)

    args = ["--threads", str(config.threads)]
    if config.target != "cpu":
        args += ["--target", config.target]
    args += ["--min-layers", str(config.min_layers), "--heads", listed(config.heads), "--ffn", listed(config.ffn),
             "--tokens", listed(config.tokens), "--precisions", listed(config.precisions),
             "--exits", listed(config.exits)]
    return args


def measure_command(config: AutoConfig, task: str, seq_len: int, table: str) -> str:
    """The command that measures on the target what a search over ``config`` needs of ``table``."""
    student = ["--student", "STUDENT"] if config.student else []
    return " ".join(["compressor auto MODEL --task", task, "--measure-table", *student, "--seq-len", str(seq_len),
                     *space_args(config), "--latency-table", os.path.basename(table) if table else "FILE"])


def teacher_shape(teacher: str) -> Tuple[Tuple[int, int], int]:
    """((heads, FFN) of a layer, layers) of the model in ``teacher``."""
    from compressor.core.arch import arch_of
    from compressor.core.models import load_config

    model_config = load_config(teacher)
    spec = arch_of(model_config)
    return (spec.num_heads(model_config), spec.ffn_size(model_config)), spec.num_layers(model_config)


def target_table(config: AutoConfig, teacher: str, task, rows, seq_len: int, log=None) -> LatencyTable:
    """``config.target_table`` opened read-only for a search of ``teacher`` on ``task``."""
    hint = ("measure it on the target machine (MODEL: this teacher or any model of its family there): "
            + measure_command(config, task.name, seq_len, config.target_table))
    return LatencyTable(config.target_table, teacher, task, rows, threads=config.threads, target=config.target,
                        sentences=config.sentences, log=log, read_only=True, hint=hint)


def source_needs(config: AutoConfig, teacher: str, seq_len: int, student: Optional[str] = None):
    """:func:`table_needs` of a search of ``teacher`` whose trials compress ``student`` (or the teacher)."""
    shape, depth = teacher_shape(teacher)
    if student:
        from compressor.auto.study import _model_layers

        layers = _model_layers(student)
        return table_needs(config, shape, len(layers), seq_len, set(layers))
    return table_needs(config, shape, depth, seq_len)


def check_target_table(config: AutoConfig, teacher: str, task, seq_len: int, log: Callable,
                       student: Optional[str] = None) -> LatencyTable:
    """The target table, once every entry the space can ask for (from ``student`` where the
    trials compress one) is known to be in it (else one error naming the first it lacks and the
    command that measures it on the target)."""
    from compressor.auto.latency import MissingEntry, describe_entry

    table = target_table(config, teacher, task, None, seq_len, log)
    needs = source_needs(config, teacher, seq_len, student)
    lacking = table.missing(**needs)
    if lacking:
        more = f" (and {len(lacking) - 1} more the space can ask for)" if len(lacking) > 1 else ""
        raise MissingEntry(f"the target table {config.target_table} lacks {describe_entry(*lacking[0])}{more}; "
                           f"{table.hint}")
    log(f"latencies predicted for another machine: {table.describe()}, from {config.target_table} "
        f"({sum(len(v) for v in needs.values())} entries the space needs, all there); nothing is timed here")
    return table


def measure_table(teacher: str, path: Optional[str] = None, config=None, task: Optional[str] = None,
                  data_dir: Optional[str] = None, log: Optional[Callable] = None,
                  seq_lens: Optional[List[int]] = None, **settings) -> dict:
    """On the target machine: measure into the latency table ``path`` (default: this machine's in
    the cache) every entry a search over ``config``'s space can ask for, keeping what is there
    (a stopped measurement resumes), and stop. ``teacher``: the search's teacher or any model of
    its family (its config and tokenizer; the timed models have random weights). ``seq_len`` (a
    setting): the length the search times at; 0 takes the mean of the rows ``teacher`` held out
    (one fine-tuned with ``--holdout``). ``seq_lens``: several searches' lengths at once (tasks of
    one family share a table; each model is exported once for all). Returns ``{path, machine,
    seq_lens, entries, measured}``. ``config.student`` (``--student``): measure what a search
    compressing that student needs (its shapes, up to its depth)."""
    from compressor.auto.latency import default_path
    from compressor.auto.study import _mean_tokens
    from compressor.core.data import data_for, holdout, load_data
    from compressor.core.models import read_meta, resolve_model
    from compressor.core.settings import config_from_dict
    from compressor.engine.scoring import _task_for

    log = log or (lambda msg: print(msg, file=sys.stderr))
    if config is None or isinstance(config, dict):
        config = config_from_dict(AutoConfig, {**(config or {}), **settings}, what="auto")
    if config.target_table:
        raise CompressorError("--measure-table measures this machine's table: give it with --latency-table, "
                              "not --target-table")
    config.check()
    folder = os.path.abspath(resolve_model(teacher))
    student = None
    if config.student:
        from compressor.auto.study import check_student

        student = check_student(config.student, folder)
    task_spec, meta = _task_for(folder, task)
    user_data = data_for(folder, task_spec, None)
    max_length = meta.get("max_length", config.max_length)
    seq_lens = sorted(set(seq_lens or [])) or ([config.seq_len] if config.seq_len else [])
    if not seq_lens:
        if holdout.record_of(folder)[0] is None:
            raise CompressorError(f"{folder} held no rows out: give --seq-len (the length the search times at, "
                                  "which its report and auto.json give as seq_len)")
        seq_lens = [_mean_tokens(folder, holdout.held_rows(folder, task_spec, data_dir, user_data,
                                                           needs="--measure-table without --seq-len"), max_length)]
    rows = load_data(task_spec, "train", data_dir, 8, user_data)   # static INT8 calibrates on them
    path = path or config.latency_table or default_path(config.target, config.threads)
    # a model that is not a task checkpoint is given the task's labels: the search's teacher has them
    labels = None if meta.get("task") or meta.get("task_spec") else task_spec.num_labels
    table = LatencyTable(path, folder, task_spec, rows, threads=config.threads, target=config.target,
                         sentences=config.sentences, log=log, num_labels=labels, max_length=max_length)
    needs: Dict[str, Set[tuple]] = {"layers": set(), "tokens": set(), "exits": set()}
    for seq_len in seq_lens:
        for kind, entries in source_needs(config, folder, seq_len, student).items():
            needs[kind] |= entries
    lacking = table.missing(**needs)
    total = sum(len(v) for v in needs.values())
    lengths = "/".join(map(str, seq_lens))
    log(f"latency table {path}: {total} entries for this space at {lengths} tokens, {len(lacking)} to measure, "
        f"on {table.describe()}")
    # each model exported once and timed at every length; the file is written after each length and
    # each precision of token pruning's cost and each exit, so a stopped measurement resumes from there
    table.ensure(needs["layers"])
    table.ensure_tokens(needs["tokens"])
    table.ensure_exits(needs["exits"])
    log(f"latency table {path}: complete for this space ({total} entries)")
    return {"path": os.path.abspath(path), "machine": table.machine, "family": table.family, "seq_lens": seq_lens,
            "entries": {k: len(v) for k, v in needs.items()}, "measured": len(lacking)}
