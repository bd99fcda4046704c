"""The package's shape: the layer contract holds, the wheel holds the library and nothing else,
and the command line answers quickly."""
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.unit
def test_no_module_imports_a_layer_above_it(monkeypatch):
    """.importlinter's contract: cli > recipe > bench > methods (independent) > export > engine > core."""
    pytest.importorskip("importlinter")
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)   # the contract names the package as found from the checkout's root
    assert lint_imports(config_filename=os.path.join(ROOT, ".importlinter")) == 0, \
        "an import breaks the layer contract: run lint-imports for the chain"


@pytest.mark.unit
def test_methods_are_found_without_a_list_of_module_names():
    from compressor.core.registry import all_stages, discover

    found = discover("stage")
    assert {"compressor.distill.stage", "compressor.prune.stage", "compressor.quantize.stage",
            "compressor.export.stage", "compressor.bench.stage", "compressor.recipe.stage"} <= set(found)
    assert {"finetune", "distill", "prune", "quantize", "export", "bench", "share", "theseus",
            "early_exit"} <= set(all_stages())


@pytest.mark.e2e
def test_the_wheel_holds_the_library_and_no_studies_or_results(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path), ROOT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"compressor"} | {t for t in tops if t.endswith(".dist-info")}, tops
    assert not [n for n in names if "/experiments/" in n or "/results/" in n or n.startswith("tests/")]
    for module in ("compressor/core/registry.py", "compressor/export/runtime.py",
                   "compressor/bench/harness.py", "compressor/cli/__init__.py",
                   "compressor/recipe/demo.yaml", "compressor/core/data/embedded/sst2/train.tsv"):
        assert module in names, module


@pytest.mark.unit
def test_help_does_not_import_torch():
    code = ("import sys\nfrom compressor.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout[-500:] + out.stderr[-500:]
