"""A recipe handed a trained teacher (--teacher) scores it on the recipe's device: the model goes
where its batches go. On the GPU machine the teacher stayed on the CPU while the batches went to
CUDA, and every recipe of the seed systems stopped at its first stage."""
import numpy as np
import torch

import compressor.scoring as scoring
from compressor.recipe import run_recipe
from tests.conftest import save_sst2_classifier


def test_the_teacher_and_its_batches_are_on_one_device(tmp_path, minilm_dir, glue_dir, monkeypatch):
    teacher = save_sst2_classifier(tmp_path / "teacher", minilm_dir)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"task: sst2\nteacher: {teacher}\ndata: {{train_limit: 8, dev_limit: 8}}\n"
                      "stages:\n  - evaluate: {split: dev}\n")
    # a device other than the CPU the checkpoint loads on ('meta': no GPU needed)
    other = torch.device("meta")
    monkeypatch.setattr("compressor.device.resolve_device", lambda *a, **k: other)
    monkeypatch.setattr("compressor.recipe.builtin.resolve_device", lambda *a, **k: other)
    seen = []

    def spy(model, tokenizer, examples, max_length, batch_size=64, device=None, **kw):
        seen.append((next(model.parameters()).device, device))
        return np.zeros((len(examples), model.config.num_labels), dtype=np.float32)

    monkeypatch.setattr(scoring, "predict_logits", spy)
    run_recipe(str(recipe), str(tmp_path / "run"), data_dir=glue_dir, log=lambda _: None)
    assert len(seen) == 2                       # the teacher stage, then the evaluate stage
    assert all(model == device == other for model, device in seen), seen
