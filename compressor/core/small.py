"""Students that are not transformers: a BiLSTM and a CNN text classifier (Tang et al. 2019).

They read the teacher tokenizer's ids, take ``(input_ids, attention_mask,
token_type_ids=None)`` and return an output with ``.logits`` (and ``.loss``
given labels), like a Hugging Face classifier, so training, scoring,
prediction and ONNX export treat them like any other checkpoint. A folder
holds ``config.json`` (whose ``model_type`` names the class),
``model.safetensors``, the tokenizer, and ``compressor.json`` of kind ``small``.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch
from torch import nn
import torch.nn.functional as F

from compressor.core.errors import CompressorError
from compressor.core.io import read_json, write_json
from compressor.core.loaders import register_loader
from compressor.core.models import load_tokenizer

WEIGHTS = "model.safetensors"


class SmallConfig:
    """Hyper-parameters plus the label fields that scoring and prediction read."""

    def __init__(self, model_type: str, vocab_size: int, num_labels: int = 2,
                 embedding_dim: int = 64, hidden_size: int = 128, dropout: float = 0.1,
                 pad_token_id: int = 0, kernel_sizes: Sequence[int] = (3, 4, 5),
                 id2label: Optional[dict] = None, problem_type: Optional[str] = None, **_):
        self.model_type = model_type
        self.vocab_size = int(vocab_size)
        self.num_labels = int(num_labels)
        self.embedding_dim = int(embedding_dim)
        self.hidden_size = int(hidden_size)
        self.dropout = float(dropout)
        self.pad_token_id = int(pad_token_id)
        self.kernel_sizes = [int(k) for k in kernel_sizes]
        self.id2label = {int(k): v for k, v in (id2label or {}).items()} or \
            {i: f"LABEL_{i}" for i in range(self.num_labels)}
        self.label2id = {v: k for k, v in self.id2label.items()}
        self.problem_type = problem_type
        self.type_vocab_size = 1
        self.architectures = [CLASSES[model_type].__name__]

    def to_dict(self) -> dict:
        return {"model_type": self.model_type, "architectures": self.architectures,
                "vocab_size": self.vocab_size, "num_labels": self.num_labels,
                "embedding_dim": self.embedding_dim, "hidden_size": self.hidden_size,
                "dropout": self.dropout, "pad_token_id": self.pad_token_id,
                "kernel_sizes": self.kernel_sizes,
                "id2label": {str(k): v for k, v in self.id2label.items()},
                "problem_type": self.problem_type}


class _SmallClassifier(nn.Module):
    compressor_kind = "small"  # what save_checkpoint records; load_small rebuilds it

    def __init__(self, config: SmallConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim,
                                      padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embedding

    def features(self, embedded: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[batch, length, embedding]`` -> ``[batch, features]``: each subclass pools its own way."""
        raise NotImplementedError(f"{type(self).__name__} must define features()")

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **_):
        from transformers.modeling_outputs import SequenceClassifierOutput

        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        logits = self.head(self.dropout(self.features(self.embedding(input_ids), attention_mask)))
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.float())
            else:
                loss = F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def save_pretrained(self, path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        write_json(os.path.join(path, "config.json"), self.config.to_dict())
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  os.path.join(path, WEIGHTS))


def _masked_max(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over real positions of ``[batch, length, features]``."""
    fill = torch.finfo(states.dtype).min
    return states.masked_fill(mask[:, :, None] == 0, fill).max(dim=1).values


class BiLSTMClassifier(_SmallClassifier):
    """Embedding, one bidirectional LSTM layer, max-pool over tokens, a ReLU layer, the labels."""

    def __init__(self, config: SmallConfig):
        super().__init__(config)
        self.lstm = nn.LSTM(config.embedding_dim, config.hidden_size, batch_first=True,
                            bidirectional=True)
        self.hidden = nn.Linear(2 * config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def features(self, embedded, mask):
        states, _ = self.lstm(embedded)
        return _masked_max(states, mask)

    def head(self, pooled):
        return self.classifier(self.dropout(F.relu(self.hidden(pooled))))


class CNNClassifier(_SmallClassifier):
    """Kim (2014): convolutions of several widths over the embeddings, max-pooled, then the labels."""

    def __init__(self, config: SmallConfig):
        super().__init__(config)
        self.convs = nn.ModuleList(nn.Conv1d(config.embedding_dim, config.hidden_size, k,
                                             padding=k // 2) for k in config.kernel_sizes)
        self.classifier = nn.Linear(config.hidden_size * len(config.kernel_sizes), config.num_labels)

    def features(self, embedded, mask):
        x = embedded.transpose(1, 2)
        pooled = []
        for conv in self.convs:
            states = F.relu(conv(x))[:, :, :mask.shape[1]].transpose(1, 2)
            pooled.append(_masked_max(states, mask))
        return torch.cat(pooled, dim=-1)

    def head(self, pooled):
        return self.classifier(pooled)


CLASSES = {"bilstm": BiLSTMClassifier, "cnn": CNNClassifier}

def build_small(kind: str, tokenizer, task, embedding_dim: int = 64, hidden_size: int = 128,
                dropout: float = 0.1, teacher=None) -> _SmallClassifier:
    """A new small classifier over ``tokenizer``'s vocabulary for ``task``.

    Given the ``teacher``, its word embeddings reduced to ``embedding_dim`` by
    PCA start the student's embeddings (a word-vector start, as Tang et al. had
    from word2vec, but in the teacher's own vocabulary).
    """
    if kind not in CLASSES:
        raise CompressorError(f"unknown small student '{kind}'; use {', '.join(CLASSES)}")
    labels = task.labels if task.labels is not None else ("score",)
    config = SmallConfig(kind, vocab_size=len(tokenizer), num_labels=task.num_labels,
                         embedding_dim=embedding_dim, hidden_size=hidden_size, dropout=dropout,
                         pad_token_id=tokenizer.pad_token_id or 0,
                         id2label=dict(enumerate(labels)),
                         problem_type="regression" if task.is_regression else "single_label_classification")
    model = CLASSES[kind](config)
    if teacher is not None:
        words = teacher.get_input_embeddings().weight.detach().float().cpu()
        rows = min(words.shape[0], config.vocab_size)
        if embedding_dim <= min(words.shape):
            centred = words[:rows] - words[:rows].mean(0, keepdim=True)
            _, _, v = torch.pca_lowrank(centred, q=embedding_dim, center=False, niter=4)
            reduced = centred @ v[:, :embedding_dim]
            reduced = reduced / reduced.std().clamp_min(1e-6) * 0.5
            with torch.no_grad():
                model.embedding.weight[:rows] = reduced
                model.embedding.weight[config.pad_token_id].zero_()
    return model


@register_loader("small")
def load_small(path: str, task=None, **_):
    """(model, tokenizer) of a small classifier folder written by ``save_pretrained``."""
    from safetensors.torch import load_file

    config_file, weights = os.path.join(path, "config.json"), os.path.join(path, WEIGHTS)
    kind = read_json(config_file).get("model_type") if os.path.isfile(config_file) else None
    if kind not in CLASSES:
        raise CompressorError(f"{config_file}: model_type {kind!r} is no small classifier this "
                              f"version can load (known: {', '.join(CLASSES)})")
    try:
        config = SmallConfig(**read_json(config_file))
        model = CLASSES[config.model_type](config)
        model.load_state_dict(load_file(weights))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise CompressorError(f"corrupt checkpoint {path}: cannot read its small classifier "
                              f"({first})") from None
    if task is not None and config.num_labels != task.num_labels:
        raise CompressorError(f"{path} classifies into {config.num_labels} labels but task "
                              f"{task.name} has {task.num_labels}")
    model.eval()
    return model, load_tokenizer(path)
