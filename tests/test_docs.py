"""The documentation: the README stays short and its links resolve; the MkDocs site builds with
``--strict`` (a broken link or anchor fails), including the pages generated from the code."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
README_MAX_LINES = 250


def test_readme_is_short():
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move detail into docs/")


def test_readme_links_resolve():
    """Every relative link and image of the README names a file or folder of the checkout."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)   # code blocks hold no links
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not os.path.exists(os.path.join(ROOT, target.split("#")[0])):
            missing.append(target)
    assert not missing, f"README.md links to paths that do not exist: {missing}"


def _load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install '.[docs]' (the test extra includes it)")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        f"mkdocs build --strict failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")

    # the generated settings reference has a section for every registered stage
    settings_page = site / "reference" / "settings" / "index.html"
    assert settings_page.is_file(), "the build wrote no reference/settings page"
    html = settings_page.read_text(encoding="utf-8")
    from compressor.core.registry import get_stage

    # the toolkit's stages (tests register stages of their own in this process)
    stages = [name for name in _load_hooks().registered_stages()
              if get_stage(name).run.__module__.startswith("compressor.")]
    absent = [name for name in stages if f'id="stage-{name.replace("_", "-")}"' not in html]
    assert not absent, f"stages missing from the settings reference: {absent}"

    commands_page = site / "reference" / "commands" / "index.html"
    assert commands_page.is_file(), "the build wrote no reference/commands page"
    assert "compressor finetune" in commands_page.read_text(encoding="utf-8")

    # the reference is generated in memory, never a hand-kept file under docs/
    assert not os.path.exists(os.path.join(ROOT, "docs", "reference", "settings.md"))
