"""Where each encoder architecture keeps its parts.

This is the only module that spells module paths such as ``bert.encoder.layer``
or config keys such as ``n_layers``. Pruning, distillation, sharing and Theseus
ask an :class:`ArchSpec` for layers, attention projections and FFN blocks, so
supporting a new architecture means adding one entry to ``ARCHITECTURES``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from compressor.core.errors import CompressorError


@dataclass(frozen=True)
class ArchSpec:
    """Module paths (relative to the task model, or to one encoder layer) and config keys.

    Attention projections come either as ``query``, ``key`` and ``value`` (one Linear each)
    or fused as ``qkv``: one Linear whose output rows are the query, key and value blocks in
    that order, each ``hidden_size`` rows of ``num_heads`` heads (ModernBERT's ``Wqkv``).
    Callers ask :meth:`qkv_projections` or :meth:`qkv_weights` and never check which.
    A gated FFN (``ffn_gated``) has an ``ffn_in`` twice ``ffn_size`` wide: the input half,
    then the gate half, multiplied after the activation (ModernBERT's GLU ``Wi``).
    """

    model_type: str
    base: str = ""                # the bare encoder inside a *ForSequenceClassification model
    embeddings: str = ""
    layers: str = ""              # the ModuleList of encoder layers
    query: str = ""               # the rest are relative to one layer
    key: str = ""
    value: str = ""
    qkv: str = ""                 # instead of query, key, value: one fused projection
    attention_output: str = ""
    attention_norm: str = ""
    ffn_in: str = ""
    ffn_out: str = ""
    ffn_norm: str = ""
    classifier: str = ""          # the head, relative to the task model
    post_embeddings: str = ""     # a module between the embeddings and layer 1 (ELECTRA's projection)
    final_norm: str = ""          # a module after the last layer, before the head (ModernBERT's norm)
    ffn_gated: bool = False       # ffn_in is [input; gate], each ffn_size rows
    # config attribute names
    num_layers_key: str = "num_hidden_layers"
    hidden_key: str = "hidden_size"
    heads_key: str = "num_attention_heads"
    ffn_key: str = "intermediate_size"
    # extra parameters shared by every layer (MPNet's relative position bias)
    shared_layer_params: tuple = ()
    uses_token_type_ids: bool = True
    # the layer constructor's argument for its position, where a layer is built by position
    # (ModernBERT: only the first has no attention norm; every global_attn_every_n_layers-th
    # attends globally, the others locally with another rotary base). A model given other
    # layers rebuilds them for their new positions, as loading it again would.
    layer_position_arg: str = ""

    def __post_init__(self):
        if bool(self.qkv) == bool(self.query and self.key and self.value):
            raise ValueError(f"{self.model_type}: give query, key and value, or qkv")

    @property
    def fused_qkv(self) -> bool:
        return bool(self.qkv)

    # -- module access -------------------------------------------------
    def base_model(self, model: nn.Module) -> nn.Module:
        return _get(model, self.base) if _has(model, self.base) else model

    def _path(self, model: nn.Module, path: str) -> nn.Module:
        """Resolve ``path`` on a task model, or on a bare encoder (the path less ``base.``)."""
        if _has(model, path):
            return _get(model, path)
        prefix = self.base + "."
        if path.startswith(prefix) and _has(model, path[len(prefix):]):
            return _get(model, path[len(prefix):])
        raise CompressorError(
            f"{type(model).__name__} has no module '{path}': is it a {self.model_type} model?")

    def get_embeddings(self, model: nn.Module) -> nn.Module:
        return self._path(model, self.embeddings)

    def get_layers(self, model: nn.Module) -> nn.ModuleList:
        return self._path(model, self.layers)

    def set_layers(self, model: nn.Module, layers: nn.ModuleList) -> None:
        path = self.layers if _has(model, self.layers) else self.layers[len(self.base) + 1:]
        if self.layer_position_arg:
            every = getattr(model.config, "global_attn_every_n_layers", None)
            if isinstance(getattr(model.config, "layer_types", None), list) and every:
                # transformers 5 reads each position's attention kind from this list
                model.config.layer_types = ["full_attention" if i % every == 0 else "sliding_attention"
                                            for i in range(len(layers))]
            layers = nn.ModuleList(self._rebuilt(model.config, layer, i) for i, layer in enumerate(layers))
        parent, _, name = path.rpartition(".")
        setattr(_get(model, parent) if parent else model, name, layers)
        setattr(model.config, self.num_layers_key, len(layers))

    def _rebuilt(self, config, layer: nn.Module, position: int) -> nn.Module:
        """``layer``'s weights in a layer built for ``position``."""
        import inspect

        arg = self.layer_position_arg
        params = inspect.signature(type(layer).__init__).parameters
        if arg not in params:   # transformers 5 names it layer_idx
            arg = next((a for a in ("layer_idx", "layer_id") if a in params), arg)
        fresh = type(layer)(config, **{arg: position})
        weights = layer.state_dict()
        if set(fresh.state_dict()) != set(weights):
            raise CompressorError(
                f"{self.model_type} builds its first layer without an attention norm and the "
                "others with one: a model cut from its layers keeps layer 1 first, and only there "
                "(a student: pick every or first, or layers that start with 1)")
        fresh.load_state_dict(weights)
        first = next(layer.parameters())
        return fresh.to(device=first.device, dtype=first.dtype).train(layer.training)

    def has_module(self, model: nn.Module, path: str) -> bool:
        """Whether ``path`` (relative to the task model, or to its bare encoder) is there."""
        prefix = self.base + "."
        return bool(path) and (_has(model, path) or (path.startswith(prefix)
                                                     and _has(model, path[len(prefix):])))

    def resolve(self, model: nn.Module, path: str) -> str:
        """``path`` as it is spelt on ``model`` (a task model, or its bare encoder)."""
        prefix = self.base + "."
        return path if _has(model, path) else path[len(prefix):]

    def get_classifier(self, model: nn.Module) -> Optional[nn.Module]:
        return _get(model, self.classifier) if _has(model, self.classifier) else None

    def attention(self, layer: nn.Module) -> Dict[str, nn.Linear]:
        """The attention projections of one layer by role: ``query``, ``key``, ``value``
        (or the fused ``qkv``) and ``attention_output``."""
        names = ("qkv",) if self.fused_qkv else ("query", "key", "value")
        return {name: _get(layer, getattr(self, name)) for name in names + ("attention_output",)}

    def qkv_projections(self, layer: nn.Module) -> List[Tuple[nn.Linear, Tuple[str, ...]]]:
        """Each Linear that computes queries, keys or values, with which of ``q``, ``k``, ``v``
        its output holds, in order along the last dimension (equal blocks)."""
        if self.fused_qkv:
            return [(_get(layer, self.qkv), ("q", "k", "v"))]
        return [(_get(layer, getattr(self, name)), (name[0],)) for name in ("query", "key", "value")]

    def qkv_weights(self, layer: nn.Module) -> Dict[str, Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        """``{"q"|"k"|"v": (weight, bias)}``: views of the parameters, rows = output features.

        Head ``h`` of ``d = hidden / heads`` is rows ``h*d:(h+1)*d`` of each, in both
        layouts; pruning a head takes those rows out of q, k and v (out of each block of a
        fused ``qkv``) and the same columns out of ``attention_output``.
        """
        parts = {}
        for linear, names in self.qkv_projections(layer):
            rows = linear.weight.shape[0] // len(names)
            for i, name in enumerate(names):
                part = slice(i * rows, (i + 1) * rows)
                parts[name] = (linear.weight[part],
                               linear.bias[part] if linear.bias is not None else None)
        return parts

    def ffn(self, layer: nn.Module) -> Dict[str, nn.Linear]:
        return {"ffn_in": _get(layer, self.ffn_in), "ffn_out": _get(layer, self.ffn_out)}

    def ffn_weights(self, layer: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
        """``in`` and ``gate`` (rows = FFN neurons; ``gate`` None unless gated) and ``out``
        (columns = neurons): views. Pruning neuron ``j`` takes row ``j`` of ``in`` and of
        ``gate`` (and their biases) and column ``j`` of ``out``."""
        w_in, w_out = _get(layer, self.ffn_in).weight, _get(layer, self.ffn_out).weight
        if not self.ffn_gated:
            return {"in": w_in, "gate": None, "out": w_out}
        half = w_in.shape[0] // 2
        return {"in": w_in[:half], "gate": w_in[half:], "out": w_out}

    def norms(self, layer: nn.Module) -> Dict[str, nn.Module]:
        """The layer's norms; ModernBERT's first ``attention_norm`` is an Identity."""
        return {"attention_norm": _get(layer, self.attention_norm),
                "ffn_norm": _get(layer, self.ffn_norm)}

    # -- config access -------------------------------------------------
    def num_layers(self, config) -> int:
        return getattr(config, self.num_layers_key)

    def hidden_size(self, config) -> int:
        return getattr(config, self.hidden_key)

    def num_heads(self, config) -> int:
        return getattr(config, self.heads_key)

    def ffn_size(self, config) -> int:
        return getattr(config, self.ffn_key)


_BERT_LAYER = dict(
    query="attention.self.query", key="attention.self.key", value="attention.self.value",
    attention_output="attention.output.dense", attention_norm="attention.output.LayerNorm",
    ffn_in="intermediate.dense", ffn_out="output.dense", ffn_norm="output.LayerNorm",
)

ARCHITECTURES: Dict[str, ArchSpec] = {
    "bert": ArchSpec("bert", base="bert", embeddings="bert.embeddings",
                     layers="bert.encoder.layer", classifier="classifier", **_BERT_LAYER),
    "roberta": ArchSpec("roberta", base="roberta", embeddings="roberta.embeddings",
                        layers="roberta.encoder.layer", classifier="classifier",
                        uses_token_type_ids=False, **_BERT_LAYER),
    # RoBERTa's layout under other names (positions count from the padding id, as RoBERTa's)
    "xlm-roberta": ArchSpec("xlm-roberta", base="roberta", embeddings="roberta.embeddings",
                            layers="roberta.encoder.layer", classifier="classifier",
                            uses_token_type_ids=False, **_BERT_LAYER),
    "camembert": ArchSpec("camembert", base="roberta", embeddings="roberta.embeddings",
                          layers="roberta.encoder.layer", classifier="classifier",
                          uses_token_type_ids=False, **_BERT_LAYER),
    # BERT's layers; embeddings of embedding_size are projected to hidden_size
    # (electra.embeddings_project) before the first layer, so hidden state 0 is hidden_size wide
    "electra": ArchSpec("electra", base="electra", embeddings="electra.embeddings",
                        layers="electra.encoder.layer", classifier="classifier",
                        post_embeddings="electra.embeddings_project", **_BERT_LAYER),
    "distilbert": ArchSpec(
        "distilbert", base="distilbert", embeddings="distilbert.embeddings",
        layers="distilbert.transformer.layer", classifier="classifier",
        query="attention.q_lin", key="attention.k_lin", value="attention.v_lin",
        attention_output="attention.out_lin", attention_norm="sa_layer_norm",
        ffn_in="ffn.lin1", ffn_out="ffn.lin2", ffn_norm="output_layer_norm",
        num_layers_key="n_layers", hidden_key="dim", heads_key="n_heads", ffn_key="hidden_dim",
        uses_token_type_ids=False),
    "mpnet": ArchSpec(
        "mpnet", base="mpnet", embeddings="mpnet.embeddings", layers="mpnet.encoder.layer",
        classifier="classifier",
        query="attention.attn.q", key="attention.attn.k", value="attention.attn.v",
        attention_output="attention.attn.o", attention_norm="attention.LayerNorm",
        ffn_in="intermediate.dense", ffn_out="output.dense", ffn_norm="output.LayerNorm",
        shared_layer_params=("mpnet.encoder.relative_attention_bias",),
        uses_token_type_ids=False),
    # pre-norm layers, rotary positions, no biases by default; the classifier sits on "head"
    # (dense, activation, norm) over the first token or the mean
    "modernbert": ArchSpec(
        "modernbert", base="model", embeddings="model.embeddings", layers="model.layers",
        classifier="classifier", final_norm="model.final_norm",
        qkv="attn.Wqkv", attention_output="attn.Wo", attention_norm="attn_norm",
        ffn_in="mlp.Wi", ffn_out="mlp.Wo", ffn_norm="mlp_norm", ffn_gated=True,
        uses_token_type_ids=False, layer_position_arg="layer_id"),
}


def arch_of(model_or_config) -> ArchSpec:
    """The spec for a model or config, by its ``model_type``."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise CompressorError(
            f"architecture '{model_type}' is not supported yet; supported: "
            f"{', '.join(sorted(ARCHITECTURES))} (add an entry to compressor/arch.py)") from None


def uses_token_type_ids(config) -> bool:
    """Whether the model takes segment ids (it errors, or silently misbehaves, on ones it lacks).

    A model with no segment embeddings (``type_vocab_size`` 1 or absent, as in the
    small BiLSTM/CNN students) takes none, whatever its architecture.
    """
    if getattr(config, "type_vocab_size", 0) <= 1:
        return False
    return arch_of(config).uses_token_type_ids


def _has(module: nn.Module, path: str) -> bool:
    try:
        _get(module, path)
        return True
    except AttributeError:
        return False


def _get(module: nn.Module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module
