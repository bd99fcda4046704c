"""Typed configs: every bad setting of a typed section is reported by `recipe validate` at its
FILE:LINE; one config type per quantisation method, dispatched by type; a loss added by name."""
import dataclasses
import textwrap

import pytest
import transformers

from compressor.cli import main
from compressor.core.data import UserData
from compressor.distill import DistillConfig, LOSSES, LossSettings, distill, register_loss
from compressor.core.models import checkpoint_meta, save_checkpoint
from compressor.quantize import configs as Q
from compressor.core.settings import config_from_dict, setting
from conftest import save_sst2_classifier, write_reviews

pytestmark = pytest.mark.unit

HEAD = "name: t\ntask: sst2\nteacher: {model: m}\nstages:\n"


def validate(capsys, tmp_path, stages):
    """``compressor recipe validate`` on a recipe with these stages: (path, problem lines)."""
    path = tmp_path / "r.yaml"
    path.write_text(HEAD + textwrap.dedent(stages))
    with pytest.raises(SystemExit) as exit_info:
        main(["recipe", "validate", str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in err, err
    return str(path), err.strip().splitlines()


@pytest.mark.parametrize("stages, line, message", [
    # bench: a peer it does not know
    ("""\
  - bench:
      sentences: 10
      peers: [pytorch-fp32, tensorrt]
""", 7, "unknown peer 'tensorrt'"),
    # quantize: a setting of static given to dynamic
    ("""\
  - quantize:
      method: dynamic
      calibration: entropy
""", 7, "no setting 'calibration' (methods taking it: onnxruntime static, auto)"),
    # quantize_torch: INC takes no hardware preset
    ("""\
  - quantize_torch:
      backend: inc
      method: static
      preset: avx2
""", 8, "method static of backend inc takes"),
    # quantize: a backend of the other stage
    ("""\
  - quantize:
      backend: torchao
""", 6, "backend torchao is the stage 'quantize_torch'"),
    # student: a setting of another kind
    ("""\
  - distill:
      student:
        kind: layers
        hidden_size: 312
""", 8, "student has no setting 'hidden_size' (kinds taking it: config, bilstm, cnn)"),
    ("""\
  - distill:
      student: {kind: lstm}
""", 6, "student kind 'lstm' is unknown"),
    # losses: a name no loss is registered under, and the old flat spelling of a setting
    ("""\
  - distill:
      losses:
        kd: 1
        telepathy: 2
""", 8, "unknown loss 'telepathy'"),
    ("""\
  - distill:
      losses: {kd: 1, temperature: 2}
""", 6, "'temperature' is a setting of kd"),
    # losses: a setting the loss does not have, and one it has with a bad value
    ("""\
  - distill:
      losses:
        kd:
          weight: 1
          temprature: 2
""", 9, "losses.kd has no setting 'temprature'; it takes weight, temperature"),
    ("""\
  - distill:
      losses:
        hidden: {weight: 1, mapping: middle}
""", 7, "losses.hidden.mapping 'middle' is unknown"),
    ("""\
  - distill:
      losses:
        kd:
          temperature: 0
""", 8, "losses.kd.temperature must be positive"),
], ids=["bench-peer", "quantize-other-method", "inc-preset", "quantize-torch-backend", "student-key",
        "student-kind", "loss-name", "loss-flat-setting", "loss-setting", "loss-mapping", "loss-value"])
def test_validate_reports_a_bad_setting_of_each_section_at_its_line(capsys, tmp_path, stages, line,
                                                                     message):
    path, lines = validate(capsys, tmp_path, stages)
    assert len(lines) == 1 and lines[0].startswith(f"{path}:{line}: ") and message in lines[0], lines


def test_every_problem_of_every_section_at_once(capsys, tmp_path):
    path, lines = validate(capsys, tmp_path, """\
  - distill:
      epochs: many
      student: {kind: config, heads: -1, colour: red}
      losses:
        kd: {weight: -1}
        attention: {measure: l1}
  - quantize: {method: mixed, max_drop: -1, exclude: [x]}
""")
    assert [l.split(": ", 1)[0] for l in lines] == [f"{path}:{n}" for n in (6, 7, 7, 9, 10, 11, 11)], lines


def test_one_config_type_per_method_holds_only_its_settings():
    types = {}
    for backend, methods in Q.BACKENDS.items():
        for method in methods:
            config = Q.quantize_config(backend, method)
            assert (config.backend, config.method) == (backend, method)
            types[backend, method] = type(config)
    assert len(set(types.values())) == len(types) == 12
    names = {key: {f.name for f in dataclasses.fields(cls)} for key, cls in types.items()}
    assert "calibration" in names["onnxruntime", "static"] and "calibration" not in names["onnxruntime", "dynamic"]
    assert "train" in names["onnxruntime", "qat"] and "train" not in names["onnxruntime", "mixed"]
    assert "epochs" not in names["onnxruntime", "qat"]   # a training setting lives in the train section
    assert "preset" not in names["inc", "static"] and "smoothquant_alpha" not in names["torchao", "dynamic"]
    assert names["onnxruntime", "fp16"] == {"backend", "method", "threads"}
    with pytest.raises(Q.CompressorError, match="no setting 'calibration'"):
        Q.quantize_config("onnxruntime", "dynamic", calibration="entropy")
    # a config round-trips through its mapping, as a recipe stores it
    static = Q.OrtStaticConfig(calibration="entropy", preset="avx512_vnni")
    assert config_from_dict(Q.QuantizeConfig, dataclasses.asdict(static)) == static
    qat = Q.OrtQATConfig(train={"lr": 2e-5, "max_steps": 3})
    assert config_from_dict(Q.QuantizeConfig, dataclasses.asdict(qat)) == qat


def test_each_config_type_dispatches_to_its_function():
    from compressor.quantize import api

    functions = {cls: Q.quantizer_for(cls()) for cls in Q.variants(Q.QuantizeConfig).values()}
    assert functions[Q.OrtStaticConfig] is api.ort_static
    assert functions[Q.OrtDynamicConfig] is api.ort_dynamic
    assert functions[Q.TorchaoDynamicConfig] is api.torchao_int8
    assert functions[Q.IncDynamicConfig] is api.inc_int8
    assert len({f for cls, f in functions.items() if cls.produces_onnx}) == 6


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, minilm_dir):
    """A tiny random BERT SST-2 classifier checkpoint."""
    return save_sst2_classifier(tmp_path_factory.mktemp("cls") / "bert", minilm_dir, max_length=32)


def test_quantize_looks_the_method_up_by_config_type(classifier, tmp_path):
    """A new method: one config class and one registered function; quantize finds it by type."""
    from compressor.quantize import quantize

    @dataclasses.dataclass
    class HalfWidthConfig(Q.TorchQuantizeConfig):
        method: str = Q.tag("toy")
        bits: int = setting(4, check=lambda v, name, c: None if v in (2, 4) else f"{name} must be 2 or 4")

    calls = []

    @Q.register_quantizer(HalfWidthConfig)
    def toy(job, config):
        calls.append((job.model, config.bits))
        return {"engine": "none", "metrics": {"accuracy": 0.5}, "size_bytes": 0}

    try:
        record = quantize(classifier, str(tmp_path / "q"), HalfWidthConfig(bits=2))
        assert calls == [(classifier, 2)] and record["method"] == "toy" and record["config"]["bits"] == 2
        with pytest.raises(Q.CompressorError, match="bits must be 2 or 4"):
            quantize(classifier, str(tmp_path / "q2"), HalfWidthConfig(bits=3))
    finally:
        del Q.QUANTIZERS[HalfWidthConfig]


@dataclasses.dataclass
class LogitNormSettings(LossSettings):
    target: float = setting(1.0, check=lambda v, name, c: None if v > 0 else f"{name} must be positive")


def test_a_loss_registered_by_name_trains_through_the_config(classifier, tmp_path, capsys):
    """Adding a loss: one registered function and its settings; nothing else changes."""
    calls = []

    @register_loss("logit_norm", LogitNormSettings, uses=("teacher_logits",))
    def logit_norm(signals, settings):
        calls.append(settings.target)
        norms = signals.student.logits.float().norm(dim=-1)
        return ((norms - settings.target) ** 2).mean() + 0 * signals.teacher_logits.sum()

    try:
        data = UserData(write_reviews(tmp_path / "train.csv", 48), write_reviews(tmp_path / "dev.csv", 16, 48),
                        ("review",), "sentiment")
        teacher = str(tmp_path / "teacher")
        model = transformers.AutoModelForSequenceClassification.from_pretrained(classifier, num_labels=2)
        save_checkpoint(model, transformers.AutoTokenizer.from_pretrained(classifier), teacher,
                        checkpoint_meta(data.task(), 16, "test"))
        config = DistillConfig(train={"max_steps": 3, "epochs": 0, "batch_size": 16, "max_length": 16, "device": "cpu"},
                               student={"kind": "layers", "num_layers": 1},
                               losses={"kd": 1, "logit_norm": {"weight": 0.5, "target": 3}})
        record = distill(teacher, str(tmp_path / "student"), config=config, user_data=data)
        assert record["steps"] == 3 and calls and set(calls) == {3.0}
        assert record["config"]["losses"]["logit_norm"] == {"weight": 0.5, "target": 3.0}
        capsys.readouterr()   # what distilling printed (a tiny random teacher is at chance: a warning)

        # the recipe checker knows it, with its settings, at once
        path, lines = validate(capsys, tmp_path, """\
  - distill:
      losses:
        logit_norm: {weight: 1, target: -1}
""")
        assert lines == [f"{path}:7: stage 'distill': losses.logit_norm.target must be positive"]
    finally:
        del LOSSES["logit_norm"]


def test_recipe_stages_lists_each_type_and_section(capsys):
    main(["recipe", "stages"])
    out = capsys.readouterr().out
    assert "method static of backend onnxruntime: threads, calibration" in out
    assert "student: kind config: num_layers, hidden_size" in out
    assert "losses: kd (weight, temperature)" in out
    assert "peers" in out
