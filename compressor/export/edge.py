"""A deployment environment for the torch-free runtime, built from this install without a network.

``build_runtime_env(dest)`` makes a Python virtual environment (no system
site-packages) holding only the runtime's packages (onnxruntime, tokenizers,
numpy, and what they import) plus ``compressor.export.runtime`` (and the package's
``__init__`` and ``errors`` modules it passes through). ``copy=True`` copies
the files, so the folder can be shipped to a box of the same platform; the
default links them (quick, for checking that nothing needs torch).
"""
from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from typing import Dict, Iterable, List

RUNTIME_PACKAGES = ("onnxruntime", "tokenizers", "numpy")


def distribution_closure(names: Iterable[str]) -> List[str]:
    """The distributions ``names`` need at run time (required dependencies, no extras), installed here."""
    seen: Dict[str, None] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = _norm(name)
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[key] = None
        for req in dist.requires or []:
            if "extra ==" in req or "extra==" in req:
                continue
            marker_ok = True
            if ";" in req:
                from packaging.markers import Marker

                try:
                    marker_ok = Marker(req.split(";", 1)[1]).evaluate()
                except Exception:
                    marker_ok = False
            if marker_ok:
                todo.append(_req_name(req))
    return sorted(seen)


def install_bytes(names: Iterable[str]) -> Dict[str, int]:
    """Bytes on disk of each installed distribution (its RECORD's files)."""
    sizes = {}
    for name in names:
        dist = md.distribution(name)
        total = 0
        for f in dist.files or []:
            path = dist.locate_file(f)
            if os.path.isfile(path):
                total += os.path.getsize(path)
        sizes[name] = total
    return sizes


def build_runtime_env(dest: str, copy: bool = False, packages: Iterable[str] = RUNTIME_PACKAGES,
                      with_dependencies: bool = False) -> str:
    """Create the environment at ``dest``; return its Python executable.

    By default only ``packages`` go in (what the runtime imports; ``tokenizers`` declares
    ``huggingface_hub`` for downloads, which the runtime never does);
    ``with_dependencies`` adds every declared dependency, as pip would.
    """
    import venv

    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True, clear=True).create(dest)
    python = os.path.join(dest, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name in (distribution_closure(packages) if with_dependencies else packages):
        dist = md.distribution(name)
        tops = set()
        for f in dist.files or []:
            top = f.parts[0]
            if top.endswith(".dist-info") or top == ".." or top.startswith("__pycache__"):
                if top.endswith(".dist-info"):
                    tops.add(top)
                continue
            tops.add(top)
        for top in tops:
            src = os.path.join(str(dist.locate_file("")), top)
            dst = os.path.join(site, top)
            if not os.path.exists(src) or os.path.exists(dst):
                continue
            if copy:
                (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, dst)
            else:
                os.symlink(src, dst)
    # the runtime and the small modules it imports on the way, nothing else of the toolkit
    export = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(export)
    for f in ("__init__.py", "core/__init__.py", "core/version.py", "core/errors.py", "core/io.py",
              "core/registry.py", "core/grouping.py", "export/__init__.py", "export/runtime.py"):
        os.makedirs(os.path.dirname(os.path.join(site, "compressor", f)), exist_ok=True)
        shutil.copy2(os.path.join(package, f), os.path.join(site, "compressor", f))
    return python


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _req_name(req: str) -> str:
    import re

    return re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0]


if __name__ == "__main__":
    print(build_runtime_env(sys.argv[1], copy="--copy" in sys.argv))
