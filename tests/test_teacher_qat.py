"""QAT's soft targets come from the teacher its ``teacher:`` setting names, as in every method
(tests/test_teacher.py holds the others and the fixtures' helpers)."""
import dataclasses

import pytest

from test_teacher import CASES, _data, _setting, _spy_teacher_loss, _Stop, make_folders, make_which


@pytest.fixture(scope="module")
def folders(tmp_path_factory, minilm_dir):
    return make_folders(tmp_path_factory.mktemp("teachers"), minilm_dir)


@pytest.fixture(scope="module")
def logits(folders):
    return make_which(folders)


@pytest.mark.unit
def test_qat_takes_the_one_teacher_setting():
    from compressor.engine.train_config import DEFAULT_TEACHER, TEACHER_HELP
    from compressor.quantize.configs import OrtQATConfig

    teacher = next(f for f in dataclasses.fields(OrtQATConfig) if f.name == "teacher")
    assert (teacher.default, teacher.metadata["help"]) == (DEFAULT_TEACHER, TEACHER_HELP)


@pytest.mark.parametrize("setting, expected", CASES)
def test_qat_learns_from_the_teacher_its_setting_names(setting, expected, folders, logits, glue_dir,
                                                        monkeypatch, tmp_path):
    from compressor.quantize.api import _qat
    from compressor.quantize.configs import OrtQATConfig

    task, train, dev = _data(glue_dir)
    seen = {}
    _spy_teacher_loss(monkeypatch, seen)
    config = OrtQATConfig(train={"device": "cpu", "max_length": 32}, preset="avx2",
                          **({} if setting is None else {"teacher": _setting(setting, folders)}))
    with pytest.raises(_Stop):
        _qat(folders["input"], str(tmp_path / "trained"), config, config.hardware(), task, train, dev,
             folders["recipe"])
    assert logits(seen["teacher"]) == expected


