"""A student cut out of its teacher (``kind: config, init: teacher``): at the teacher's width it
is the teacher's kept layers; narrower, it keeps the channels, heads and neurons that carry the
most activation, and it starts where a random student cannot."""
import pytest
import torch

from compressor.core.arch import arch_of
from compressor.core.data import get_task
from compressor.core.errors import CompressorError
from compressor.core.models import load_for_task
from compressor.engine import subclone
from compressor.engine.students import ConfigStudent, LayersStudent, build_student

pytestmark = pytest.mark.unit
TASK = get_task("sst2")


def _teacher(tiny_models, arch, layers=4):
    torch.manual_seed(0)
    model, tok = load_for_task(tiny_models[arch], TASK, attn_implementation="eager")
    if arch_of(model).num_layers(model.config) < layers:   # deepen: more layers to pick from
        spec = arch_of(model)
        import copy
        kept = list(spec.get_layers(model))
        spec.set_layers(model, torch.nn.ModuleList(copy.deepcopy(kept[i % len(kept)]) for i in range(layers)))
        for layer in spec.get_layers(model)[len(kept):]:
            for p in layer.parameters():
                torch.nn.init.normal_(p, std=0.05) if p.dim() > 1 else None
    return model.eval(), tok


def _inputs(tok, texts=("a fine film", "dull and far too long", "it works")):
    ids = tok(list(texts), return_tensors="pt", padding=True)
    ids.pop("token_type_ids", None)
    return ids


def _batches(tok):
    return [dict(_inputs(tok, ("a fine film with good actors", "dull", "the plot goes nowhere fast")))]


@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert", "mpnet"])
def test_at_the_teachers_width_it_is_the_teachers_kept_layers(tiny_models, arch):
    teacher, tok = _teacher(tiny_models, arch)
    spec = arch_of(teacher)
    full = ConfigStudent(num_layers=2, init="teacher", hidden_size=spec.hidden_size(teacher.config),
                         heads=spec.num_heads(teacher.config), ffn_size=spec.ffn_size(teacher.config))
    student, _, made = build_student(full, teacher, tok, TASK, batches=_batches(tok))
    layers, _, kept = build_student(LayersStudent(num_layers=2), teacher, tok, TASK)
    assert made["teacher_layers"] == kept["teacher_layers"] == [1, 3]
    assert made["init"] == "teacher" and made["importance"] == "activations"
    ids = _inputs(tok)
    with torch.no_grad():
        assert torch.allclose(student.eval()(**ids).logits, layers.eval()(**ids).logits, atol=1e-5)


def test_embeddings_narrower_than_the_layers_are_kept_whole(tiny_models):
    """ELECTRA's embeddings (16 wide) are projected up to the layers' 32: only the projection's
    output rows are residual channels."""
    import transformers
    from conftest import tiny_config

    torch.manual_seed(0)
    config = tiny_config("electra")
    config.num_labels = 2
    teacher = transformers.AutoModelForSequenceClassification.from_config(config, attn_implementation="eager").eval()
    _, tok = _teacher(tiny_models, "bert", layers=2)
    narrow = ConfigStudent(num_layers=1, init="teacher", hidden_size=24, heads=4, ffn_size=48)
    student, _, made = build_student(narrow, teacher, tok, TASK, batches=_batches(tok))
    assert student.config.embedding_size == 16 and made["importance"] == "activations"
    assert student.electra.embeddings_project.weight.shape == (24, 16)
    with torch.no_grad():
        assert torch.equal(student.electra.embeddings.word_embeddings.weight,
                           teacher.electra.embeddings.word_embeddings.weight)


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_a_narrow_student_keeps_the_most_active_neurons_and_heads(tiny_models, arch):
    """FFN neurons the teacher never fires and a head whose value projection is zero are the ones
    left out: the student computes what the teacher computes."""
    teacher, tok = _teacher(tiny_models, arch, layers=2)
    spec = arch_of(teacher)
    size = spec.hidden_size(teacher.config) // spec.num_heads(teacher.config)
    dead = list(range(0, spec.ffn_size(teacher.config), 2))       # half the neurons never fire
    with torch.no_grad():
        for layer in spec.get_layers(teacher):
            ffn = spec.ffn(layer)
            ffn["ffn_in"].weight[dead] = 0
            ffn["ffn_in"].bias[dead] = -1e4                          # GELU(-1e4) = 0
            ffn["ffn_out"].weight[:, dead] = 0
            att = spec.attention(layer)
            att["value"].weight[2 * size:3 * size] = 0              # head 3 writes nothing
            att["value"].bias[2 * size:3 * size] = 0
    heads = spec.num_heads(teacher.config)
    narrow = ConfigStudent(num_layers=2, init="teacher", hidden_size=spec.hidden_size(teacher.config) // heads * (heads - 1),
                           heads=heads - 1, ffn_size=spec.ffn_size(teacher.config) // 2)
    importance = subclone.activation_importance(teacher, _batches(tok))
    chosen = subclone.select(importance, [0, 1], heads, spec.hidden_size(teacher.config), heads - 1,
                             spec.ffn_size(teacher.config) // 2)
    assert 2 not in chosen["heads"].tolist()
    for kept in chosen["ffn"]:
        assert not set(kept.tolist()) & set(dead)
    student, _, made = build_student(narrow, teacher, tok, TASK, batches=_batches(tok))
    assert made["teacher_heads"] == [h + 1 for h in range(heads) if h != 2]
    assert student.config.num_attention_heads == heads - 1
    # the same cut at the teacher's residual width gives the teacher's outputs
    wide = spec.hidden_size(teacher.config)
    s = ConfigStudent(num_layers=2, init="teacher", hidden_size=wide, heads=heads,
                      ffn_size=spec.ffn_size(teacher.config) // 2)
    cut, _, _ = build_student(s, teacher, tok, TASK, batches=_batches(tok))
    ids = _inputs(tok)
    with torch.no_grad():
        assert torch.allclose(cut.eval()(**ids).logits, teacher(**ids).logits, atol=1e-4)


def test_a_narrow_student_starts_nearer_its_teacher_than_a_random_one(tiny_models):
    teacher, tok = _teacher(tiny_models, "bert", layers=4)
    ids = _inputs(tok)
    with torch.no_grad():
        target = teacher(**ids, output_hidden_states=True).hidden_states[0]
    spec = dict(num_layers=2, hidden_size=24, heads=4, ffn_size=48)
    cut, _, made = build_student(ConfigStudent(init="teacher", **spec), teacher, tok, TASK, batches=_batches(tok))
    torch.manual_seed(0)
    rand, _, _ = build_student(ConfigStudent(**spec), teacher, tok, TASK)
    kept = subclone.select(subclone.activation_importance(teacher, _batches(tok)), [0, 2], 4, 24, 4, 48)["hidden"]
    with torch.no_grad():
        ours = cut(**ids, output_hidden_states=True).hidden_states[0]
        theirs = rand(**ids, output_hidden_states=True).hidden_states[0]
    # embeddings: the teacher's kept channels, re-normalised over fewer of them
    def corr(a, b):
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float(a @ b / (a.norm() * b.norm()))
    assert corr(ours, target[..., kept]) > 0.9 > abs(corr(theirs, target[..., kept])) + 0.5
    assert made["importance"] == "activations"
    _, _, by_norm = build_student(ConfigStudent(init="teacher", **spec), teacher, tok, TASK)
    assert by_norm["importance"] == "weight norms"


def test_init_teacher_refuses_a_student_wider_than_its_teacher(tiny_models):
    teacher, tok = _teacher(tiny_models, "bert", layers=2)
    for spec, what in ((dict(hidden_size=64, heads=4), "hidden_size is 32"),
                       (dict(hidden_size=32, heads=4, ffn_size=128), "ffn_size is 64"),
                       (dict(hidden_size=16, heads=8), "heads is 4"),
                       (dict(model_type="distilbert", hidden_size=16, heads=2), "architecture")):
        with pytest.raises(CompressorError, match=what):
            build_student(ConfigStudent(num_layers=1, init="teacher", **spec), teacher, tok, TASK)
    with pytest.raises(CompressorError, match="init"):
        from compressor.engine.students import student_config
        student_config({"kind": "config", "init": "pretrained"})


def test_the_layer_losses_projections_start_as_the_cuts_inverse(tiny_models):
    from compressor.engine.distiller import make_projections

    teacher, tok = _teacher(tiny_models, "bert", layers=2)
    student, _, made = build_student(ConfigStudent(num_layers=1, hidden_size=24, heads=4, ffn_size=48,
                                                   init="teacher"), teacher, tok, TASK, batches=_batches(tok))
    from compressor.distill import DistillConfig
    losses = DistillConfig(losses={"kd": 1, "hidden": 1}).losses
    kept = made["residual_channels"]
    assert len(kept) == 24 and kept == sorted(kept)
    maps = make_projections(student, teacher, losses, kept)
    states = torch.randn(2, 5, 24)
    for proj in maps.values():
        out = proj(states)
        assert torch.equal(out[..., kept], states)
        assert not out[..., [c for c in range(32) if c not in kept]].any()
    drawn = make_projections(student, teacher, losses)      # a random student's: drawn at random
    assert not torch.equal(next(iter(drawn.values()))(states)[..., kept], states)
