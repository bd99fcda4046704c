"""bench/experiments/device_bring_back.sh: a folder packed in parts on the GPU machine, given back
8 parts a call, joins here into the same files, and a missing part is caught by the checksum."""
import os
import subprocess

import pytest

pytestmark = pytest.mark.unit
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "bench", "experiments", "device_bring_back.sh")


def bring_back(*args, cwd, home, out=None):
    env = {**os.environ, "HOME": str(home), "BRING_BACK_PART_MB": "1"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", SCRIPT, *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_parts_given_over_two_calls_join_into_the_same_files(tmp_path):
    model = tmp_path / "run" / "05-quantize"
    model.mkdir(parents=True)
    (model / "model.onnx").write_bytes(os.urandom(10 * 2**20 + 123))
    (model / "manifest.json").write_text("{}")
    home = tmp_path / "home"
    packed = bring_back("pack", "int8", "05-quantize", cwd=tmp_path / "run", home=home)
    assert packed.returncode == 0 and "11 parts" in packed.stdout and "3 call(s)" in packed.stdout, packed.stderr
    calls = [tmp_path / "call0", tmp_path / "call1", tmp_path / "call2"]
    for i, out in enumerate(calls):
        out.mkdir()
        assert bring_back("give", "int8", str(i), cwd=tmp_path, home=home, out=out).returncode == 0
    assert len(os.listdir(calls[0])) == 4 and "int8.sha256.txt" in os.listdir(calls[2])
    # the calls' folders in any order
    done = bring_back("unpack", str(tmp_path / "back"), str(calls[2]), str(calls[1]), str(calls[0]), cwd=tmp_path, home=home)
    assert done.returncode == 0 and "sha256 checked" in done.stdout, done.stderr
    back = tmp_path / "back" / "05-quantize"
    assert (back / "model.onnx").read_bytes() == (model / "model.onnx").read_bytes()
    # nothing is overwritten; a lost part is one line, nothing unpacked
    again = bring_back("unpack", str(tmp_path / "back"), str(calls[0]), cwd=tmp_path, home=home)
    assert again.returncode == 2 and "exists" in again.stderr
    os.remove(calls[0] / "int8.part.003")
    for given in (calls, calls[:2]):   # with the sha256 file, and without it (the last call lost)
        cut = bring_back("unpack", str(tmp_path / "cut"), *map(str, given), cwd=tmp_path, home=home)
        assert cut.returncode == 1 and "a part is missing or cut" in cut.stderr and not (tmp_path / "cut").exists()
        assert not (tmp_path / "cut.tmp").exists()
