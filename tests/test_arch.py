"""The architecture registry finds the same parts in every supported encoder."""
import pytest
import torch
import transformers
from torch import nn

from compressor.core.arch import ARCHITECTURES, arch_of, uses_token_type_ids
from compressor.core.errors import CompressorError
from conftest import ARCHS, tiny_config

pytestmark = pytest.mark.unit


def classifier(arch):
    config = tiny_config(arch)
    config.vocab_size = 200
    config.num_labels = 2
    torch.manual_seed(0)
    return transformers.AutoModelForSequenceClassification.from_config(config)


@pytest.mark.parametrize("arch", ARCHS)
def test_parts_have_the_shapes_the_config_says(arch):
    model = classifier(arch)
    spec = arch_of(model)
    hidden, ffn = spec.hidden_size(model.config), spec.ffn_size(model.config)
    layers = spec.get_layers(model)
    assert isinstance(layers, nn.ModuleList) and len(layers) == spec.num_layers(model.config) == 2
    assert spec.num_heads(model.config) == 4
    for layer in layers:
        attn = spec.attention(layer)
        assert set(attn) == {"query", "key", "value", "attention_output"}
        assert all(isinstance(m, nn.Linear) for m in attn.values())
        assert attn["query"].weight.shape == (hidden, hidden)
        ffn_parts = spec.ffn(layer)
        assert ffn_parts["ffn_in"].weight.shape == (ffn, hidden)
        assert ffn_parts["ffn_out"].weight.shape == (hidden, ffn)
        assert all(isinstance(m, nn.LayerNorm) for m in spec.norms(layer).values())
    assert spec.get_embeddings(model).word_embeddings.weight.shape[0] == 200
    assert spec.get_classifier(model) is not None
    # the bare encoder answers the same questions
    assert len(spec.get_layers(spec.base_model(model))) == 2


@pytest.mark.parametrize("arch", ARCHS)
def test_dropping_a_layer_keeps_the_model_runnable(arch):
    model = classifier(arch).eval()
    spec = arch_of(model)
    spec.set_layers(model, nn.ModuleList([spec.get_layers(model)[0]]))
    assert spec.num_layers(model.config) == 1
    ids = torch.randint(5, 200, (2, 7))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert out.logits.shape == (2, 2)


def test_segment_ids_only_where_the_model_has_them():
    assert uses_token_type_ids(tiny_config("bert"))
    for arch in ("roberta", "distilbert", "mpnet"):
        assert not uses_token_type_ids(tiny_config(arch))


def test_mpnet_shares_its_relative_position_bias():
    assert ARCHITECTURES["mpnet"].shared_layer_params == ("mpnet.encoder.relative_attention_bias",)


def test_unknown_architecture_is_refused_in_one_line():
    config = transformers.GPT2Config()
    with pytest.raises(CompressorError, match="architecture 'gpt2' is not supported yet"):
        arch_of(config)
