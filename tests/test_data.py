"""Data layer: every real GLUE file parses, and every bad input is a one-line error."""

import os
from pathlib import Path

import pytest

from compressor.core.data import (
    TASKS, custom_task, embedded_dir, get_task, load_split, read_glue_file, read_user_file,
    resolve_data_dir,
)
from compressor.core.errors import CompressorError

pytestmark = pytest.mark.unit

GLUE_DIR = os.environ.get("GLUE_DIR") or str(Path(__file__).resolve().parent.parent.parent / "shared" / "glue_data")

COUNTS = {  # from the GLUE folder's README
    "sst2": (67349, 872, 1821), "mrpc": (3667, 408, 1725), "rte": (2490, 277, 3000),
    "cola": (8551, 1043, 1063), "stsb": (5749, 1500, 1379), "wnli": (635, 71, 146),
}


@pytest.fixture(scope="module")
def glue():
    assert os.path.isdir(GLUE_DIR), f"GLUE data not found at {GLUE_DIR}; set GLUE_DIR"
    return {(t, s): load_split(t, s, GLUE_DIR) for t in COUNTS for s in ("train", "dev", "test")}


def error(fn, *args, **kw) -> str:
    with pytest.raises(CompressorError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


# --- the real GLUE files -------------------------------------------------------

@pytest.mark.parametrize("task", list(COUNTS))
def test_glue_counts_and_labels(glue, task):
    spec = get_task(task)
    for split, n in zip(("train", "dev", "test"), COUNTS[task]):
        ds = glue[task, split]
        assert len(ds) == n, (task, split)
        assert ds.split == split and ds.source.endswith(spec.splits[split])
        for ex in ds.examples:
            assert len(ex.texts) == len(spec.text_fields)
            assert all(t and t == t.rstrip() for t in ex.texts)
            if split == "test":
                assert ex.label is None
            elif spec.is_regression:
                assert isinstance(ex.label, float) and 0.0 <= ex.label <= 5.0
            else:
                assert isinstance(ex.label, int) and 0 <= ex.label < spec.num_labels
        assert ds.labelled == (split != "test")
    # both classes occur in train
    if not spec.is_regression:
        assert {e.label for e in glue[task, "train"].examples} == set(range(spec.num_labels))


def test_glue_quirks(glue):
    mrpc = glue["mrpc", "train"].examples
    assert not mrpc[0].texts[0].startswith("\ufeff")
    assert mrpc[0].texts[0].startswith("Amrozi accused his brother")
    assert '" the witness "' in mrpc[0].texts[0]  # quotes survive (QUOTE_NONE)
    # SST-2 uses PTB quotes (`` ''); MRPC and RTE have bare '"', even opening a field.
    assert glue["mrpc", "dev"].examples[0].texts[1].startswith('" The foodservice pie business')
    for task in ("mrpc", "rte"):
        for split in ("train", "dev", "test"):
            ds = glue[task, split]
            with open(ds.source, encoding="utf-8-sig") as f:
                quoted_lines = sum('"' in line for line in f)
            assert sum(any('"' in t for t in e.texts) for e in ds.examples) == quoted_lines > 0
    assert glue["sst2", "dev"].examples[0].texts == ("it 's a charming and often affecting journey .",)
    assert glue["sst2", "test"].examples[0].guid == "0"
    cola = glue["cola", "train"].examples[0]  # header-less: sentence is column 4
    assert cola.texts == ("Our friends won't buy this analysis, let alone the next one we propose.",)
    assert cola.label == 1
    assert glue["stsb", "dev"].examples[0].texts == ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.")
    assert glue["stsb", "dev"].examples[0].label == 5.0
    assert glue["rte", "train"].examples[0].label == get_task("rte").labels.index("not_entailment")


def test_limit_takes_first_rows():
    ds = load_split("rte", "dev", GLUE_DIR, limit=5)
    assert [e.guid for e in ds.examples] == ["0", "1", "2", "3", "4"]


# --- registry ------------------------------------------------------------------

def test_registry():
    assert set(TASKS) == {"sst2", "mrpc", "rte", "cola", "stsb", "wnli", "qnli", "qqp", "mnli", "mnli_mm"}
    assert get_task("SST-2") is TASKS["sst2"] and get_task("sts-b").is_regression
    assert get_task("MNLI-mm").splits["dev"] == "dev_mismatched.tsv"
    assert get_task("mnli-m").splits["test"] == "test_matched.tsv"
    assert get_task("stsb").num_labels == 1 and get_task("mnli").num_labels == 3
    assert get_task("mrpc").main_metric == "f1" and get_task("cola").metrics == ("mcc",)
    hash(get_task("sst2"))
    msg = error(get_task, "sst3")
    assert msg.startswith("unknown task 'sst3'; known tasks: sst2, mrpc")


def test_custom_task_validation():
    t = custom_task("mine", ["text"], ["neg", "pos"], ["accuracy", "f1"])
    assert t.num_labels == 2 and t.main_metric == "accuracy"
    assert custom_task("r", ["a", "b"], None).metrics == ("pearson", "spearman")
    assert "unknown metric" in error(custom_task, "x", ["t"], ["a", "b"], ["bleu"])
    assert "f1 is binary" in error(custom_task, "x", ["t"], ["a", "b", "c"], ["f1"])
    assert "regression" in error(custom_task, "x", ["t"], None, ["accuracy"])


# --- where data comes from -----------------------------------------------------

def test_embedded_slice(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    train, dev = load_split("sst2", "train", "embedded"), load_split("sst2", "dev", "embedded")
    assert (len(train), len(dev)) == (16000, 872) and train.source == "embedded"
    assert train.labelled and {e.label for e in train.examples} == {0, 1}
    assert os.path.isfile(os.path.join(embedded_dir(), "README.md"))
    assert "embedded data holds only sst2 train and dev" in error(load_split, "sst2", "test", "embedded")
    assert "embedded" in error(load_split, "rte", "dev", "embedded")


def test_glue_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GLUE_DIR", GLUE_DIR)
    assert resolve_data_dir(None) == GLUE_DIR
    assert len(load_split("wnli", "dev")) == 71
    monkeypatch.setenv("GLUE_DIR", str(tmp_path))  # empty dir: explicit arg must win
    assert resolve_data_dir(GLUE_DIR) == GLUE_DIR
    assert len(load_split("wnli", "dev", GLUE_DIR)) == 71
    assert f"no WNLI/dev.tsv under {tmp_path}" in error(load_split, "wnli", "dev")
    monkeypatch.setenv("GLUE_DIR", "embedded")
    assert load_split("sst2", "dev").source == "embedded"


def test_no_data_anywhere(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    assert resolve_data_dir(None) is None
    msg = error(load_split, "mrpc", "dev")  # `datasets` is not installed here
    assert msg.startswith("no GLUE data for mrpc: pass --data-dir DIR or set GLUE_DIR")
    assert "(DIR/MRPC/train.tsv, dev.tsv, test.tsv)" in msg


# --- errors on bad GLUE input --------------------------------------------------

def test_unknown_split_and_missing_folder(tmp_path):
    assert error(load_split, "sst2", "validation", GLUE_DIR) == "unknown split 'validation' for task sst2; splits: train, dev, test"
    msg = error(load_split, "sst2", "train", str(tmp_path))
    assert msg.startswith(f"no SST-2/train.tsv under {tmp_path}")
    assert "does not exist" in error(load_split, "sst2", "train", str(tmp_path / "nope"))


def _sst2_dir(tmp_path, lines):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(tmp_path)


def test_malformed_label(tmp_path):
    d = _sst2_dir(tmp_path, ["sentence\tlabel", "good film \t1", "bad film \tpositive", "ok \t0"])
    msg = error(load_split, "sst2", "train", d)
    assert "train.tsv:3: label 'positive' is not one of 0, 1" in msg


def test_too_few_columns_and_empty_text(tmp_path):
    d = _sst2_dir(tmp_path, ["sentence\tlabel", "good film \t1", "no label here"])
    assert "train.tsv:3: expected 2 tab-separated columns, found 1" in error(load_split, "sst2", "train", d)
    p = tmp_path / "SST-2" / "train.tsv"
    p.write_text("sentence\tlabel\n  \t1\n")
    assert "train.tsv:2: empty text in column 'sentence'" in error(read_glue_file, "sst2", p, "train")
    p.write_text("text\tlabel\nfine\t1\n")
    assert "train.tsv:1: expected a header row with column(s) sentence" in error(read_glue_file, "sst2", p, "train")


def test_bad_score(tmp_path):
    p = tmp_path / "train.tsv"
    p.write_text("index\tsentence1\tsentence2\tscore\n0\ta\tb\t4.5\n1\ta\tb\thigh\n")
    assert error(read_glue_file, "stsb", p, "train") == f"{p}:3: score 'high' is not a number"


# --- users' own files ----------------------------------------------------------

def test_user_tsv_with_task(tmp_path):
    p = tmp_path / "reviews.tsv"
    p.write_text('text\tlabel\tid\nsaid "great" \t1\ta7\nmeh\t0\ta8\n')
    ds = read_user_file(p, ["text"], "label", task="sst2")
    assert ds.task is get_task("sst2") and ds.source == str(p)
    assert [(e.texts, e.label, e.guid) for e in ds.examples] == [(('said "great"',), 1, "a7"), (("meh",), 0, "a8")]


def test_user_csv_quoted_commas_and_inferred_labels(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text('first,second,tag\n"a, b","c ""d""",yes\nx,y,no\n"e\nf",g,yes\n')
    ds = read_user_file(p, ["first", "second"], "tag")
    assert ds.task.name == "pairs" and ds.task.labels == ("no", "yes") and ds.task.metrics == ("accuracy",)
    assert ds.examples[0].texts == ("a, b", 'c "d"') and ds.examples[0].label == 1
    assert [e.guid for e in ds.examples] == ["2", "3", "4"]  # line where each row starts
    assert ds.examples[2].texts == ("e\nf", "g")


def test_user_jsonl_regression_and_numeric_classes(tmp_path):
    p = tmp_path / "scores.jsonl"
    p.write_text('{"s": "one", "y": 0.5}\n\n{"s": "two", "y": 3}\n')
    ds = read_user_file(p, ["s"], "y")
    assert ds.task.is_regression and [e.label for e in ds.examples] == [0.5, 3.0]
    q = tmp_path / "classes.jsonl"
    q.write_text("".join(f'{{"s": "t{i}", "y": {y}}}\n' for i, y in enumerate([2, 10, 0, 1, 2.0])))
    ds = read_user_file(q, ["s"], "y")
    assert ds.task.labels == ("0", "1", "2", "10")  # numeric order, not string order
    assert [e.label for e in ds.examples] == [2, 3, 0, 1, 2]
    unl = read_user_file(q, ["s"])
    assert not unl.labelled and unl.task.labels == () and len(unl) == 5


def test_user_file_errors(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("text,label\nhello,1\n")
    assert error(read_user_file, p, ["sentence"], "label") == f"{p}:1: no column 'sentence'; the file has: text, label"
    p.write_text("text,label\nhello,1\nbye\n")
    assert error(read_user_file, p, ["text"], "label") == f"{p}:3: found 1 fields, the header has 2"
    p.write_text("text,label\nhello,1\nbye,maybe\n")
    assert "d.csv:3: label 'maybe' is not one of 0, 1 (task sst2)" in error(read_user_file, p, ["text"], "label", task="sst2")
    j = tmp_path / "d.jsonl"
    j.write_text('{"text": "a"}\n{"txt": "b"}\n')
    assert error(read_user_file, j, ["text"]) == f"{j}:2: no key 'text'; the file has: txt"
    j.write_text('{"text": "a"}\n{"text": oops}\n')
    assert f"{j}:2: not valid JSON" in error(read_user_file, j, ["text"])
    x = tmp_path / "d.xlsx"
    x.write_text("")
    assert "unsupported file type '.xlsx'" in error(read_user_file, x, ["text"])
    assert "takes 2 text column(s)" in error(read_user_file, p, ["text"], task="mrpc")


class _FakeHub(list):
    def select(self, idx):
        return _FakeHub(self[i] for i in idx)


def test_hub_path_maps_fields_and_labels(monkeypatch):
    """`datasets` is optional and absent here; a stand-in checks the mapping and error wrapping."""
    import sys
    import types
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        if config == "cola":
            raise ConnectionError("offline\nsecond line")
        return _FakeHub([{"premise": "p ", "hypothesis": "h", "label": -1, "idx": 7},
                         {"premise": "q", "hypothesis": "i", "label": 2, "idx": 8}])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.delenv("GLUE_DIR", raising=False)
    ds = load_split("mnli-mm", "dev", limit=1)
    assert calls[-1] == ("glue", "mnli", "validation_mismatched") and ds.source == "hub:glue/mnli"
    assert [(e.texts, e.label, e.guid) for e in ds.examples] == [(("p", "h"), None, "7")]
    assert [e.label for e in load_split("mnli", "train").examples] == [None, 2]
    msg = error(load_split, "cola", "dev")
    assert msg.startswith("no GLUE data for cola") and "ConnectionError: offline second line" in msg


def test_a_file_read_again_unchanged_is_not_parsed_again_and_a_changed_one_is(tmp_path, monkeypatch):
    import dataclasses

    from compressor.core.data import readers

    parsed = []
    real = readers._read_glue_file
    monkeypatch.setattr(readers, "_read_glue_file", lambda *a: parsed.append(a[1]) or real(*a))
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\na gripping film\t1\nflat and dull\t0\n")
    first, again = (read_glue_file("sst2", str(path), "train") for _ in range(2))
    assert len(parsed) == 1 and first.examples == again.examples and first.examples is not again.examples
    first.examples.pop()   # each read has its own list, and rows cannot be changed in place
    assert len(again.examples) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.examples[0].label = 0
    assert len(read_glue_file("sst2", str(path), "train", limit=1).examples) == 1 and len(parsed) == 2
    path.write_text("sentence\tlabel\na gripping film\t1\n")   # changed: read again
    assert len(read_glue_file("sst2", str(path), "train").examples) == 1 and len(parsed) == 3
