"""Where each encoder architecture keeps its parts.

This is the only module that spells module paths such as ``bert.encoder.layer``
or config keys such as ``n_layers``. Pruning, distillation, sharing and Theseus
ask an :class:`ArchSpec` for layers, attention projections and FFN blocks, so
supporting a new architecture means adding one entry to ``ARCHITECTURES``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from torch import nn

from .errors import CompressorError


@dataclass(frozen=True)
class ArchSpec:
    """Module paths (relative to the task model, or to one encoder layer) and config keys."""

    model_type: str
    base: str                     # the bare encoder inside a *ForSequenceClassification model
    embeddings: str
    layers: str                   # the ModuleList of encoder layers
    query: str                    # the rest are relative to one layer
    key: str
    value: str
    attention_output: str
    attention_norm: str
    ffn_in: str
    ffn_out: str
    ffn_norm: str
    classifier: str               # the head, relative to the task model
    # config attribute names
    num_layers_key: str = "num_hidden_layers"
    hidden_key: str = "hidden_size"
    heads_key: str = "num_attention_heads"
    ffn_key: str = "intermediate_size"
    # extra parameters shared by every layer (MPNet's relative position bias)
    shared_layer_params: tuple = ()
    uses_token_type_ids: bool = True

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
        parent, _, name = path.rpartition(".")
        setattr(_get(model, parent) if parent else model, name, layers)
        setattr(model.config, self.num_layers_key, len(layers))

    def get_classifier(self, model: nn.Module) -> Optional[nn.Module]:
        return _get(model, self.classifier) if _has(model, self.classifier) else None

    def attention(self, layer: nn.Module) -> Dict[str, nn.Linear]:
        """The four attention projections of one encoder layer."""
        return {name: _get(layer, getattr(self, name))
                for name in ("query", "key", "value", "attention_output")}

    def ffn(self, layer: nn.Module) -> Dict[str, nn.Linear]:
        return {"ffn_in": _get(layer, self.ffn_in), "ffn_out": _get(layer, self.ffn_out)}

    def norms(self, layer: nn.Module) -> Dict[str, nn.LayerNorm]:
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
