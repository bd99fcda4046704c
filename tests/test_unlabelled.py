"""General distillation's unlabelled text: every GLUE training file's sentences under the data
folder, one per example, each once, with none of the task's dev sentences."""
import pytest

from compressor.core.data import get_task, load_data, unlabelled_text
from compressor.core.errors import CompressorError

pytestmark = pytest.mark.unit


def test_the_pool_holds_every_tasks_training_sentences_and_none_of_the_dev_set(glue_dir):
    task = get_task("stsb")
    train, dev = load_data(task, "train", glue_dir), load_data(task, "dev", glue_dir)
    pool = unlabelled_text(task, glue_dir, own=train, dev=dev)
    texts = [ex.texts for ex in pool.examples]
    assert all(len(t) == 1 for t in texts)                          # each sentence of a pair alone
    sentences = [t[0] for t in texts]
    assert len(sentences) == len(set(sentences))                    # each once
    assert not {s for ex in dev.examples for s in ex.texts} & set(sentences)
    # STS-B's dev shares sentences with its own training file: they are left out, not kept
    shared = {s for ex in train.examples for s in ex.texts} & {s for ex in dev.examples for s in ex.texts}
    assert shared
    for name in ("sst2", "cola", "rte", "mrpc"):
        assert f"{name} train" in pool.source
        other = load_data(get_task(name), "train", glue_dir, limit=20)
        assert not {s.strip() for ex in other.examples for s in ex.texts} - set(sentences)
    assert {ex.label for ex in pool.examples} == {0.0}              # a placeholder no layer loss reads


def test_a_sample_is_seeded_and_without_a_folder_the_task_rows_alone_are_the_text(glue_dir, monkeypatch):
    task = get_task("rte")
    train = load_data(task, "train", glue_dir, limit=30)
    a = unlabelled_text(task, glue_dir, own=train, rows=50, seed=1)
    assert len(a) == 50
    assert [e.texts for e in a.examples] == [e.texts for e in unlabelled_text(task, glue_dir, own=train, rows=50, seed=1).examples]
    assert [e.texts for e in a.examples] != [e.texts for e in unlabelled_text(task, glue_dir, own=train, rows=50, seed=2).examples]
    monkeypatch.delenv("GLUE_DIR", raising=False)                  # no folder from the environment either
    alone = unlabelled_text(task, None, own=train)
    assert {e.texts[0] for e in alone.examples} == {s.strip() for ex in train.examples for s in ex.texts}
    assert alone.source == "unlabelled text of rte train"
    with pytest.raises(CompressorError, match="needs unlabelled text"):
        unlabelled_text(task, None)
