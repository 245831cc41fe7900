"""`pip install --no-build-isolation` of the client into a fresh venv works
offline, and `import cubicle` there finds the installed package."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import List, Tuple

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# setuptools builds a wheel by itself from 70.1 on; before, only with the
# `wheel` package beside it. pip is run from the system site-packages the
# venv sees, so the venv needs none of its own.
CAN_BUILD = r"""
import importlib.util, sys
import setuptools
version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
has_wheel = importlib.util.find_spec("wheel") is not None
has_pip = importlib.util.find_spec("pip") is not None
sys.exit(0 if has_pip and (has_wheel or version >= (70, 1)) else 3)
"""


def interpreters() -> Tuple[List[str], List[str]]:
    """Interpreters here that can build and install the client offline, and
    why the others cannot: this one, and the system's."""
    usable, why = [], []
    seen = set()
    for python in (sys.executable, "/usr/bin/python3"):
        real = os.path.realpath(python)
        if real in seen or not os.access(real, os.X_OK):
            continue
        seen.add(real)
        check = subprocess.run([python, "-c", CAN_BUILD], capture_output=True, text=True, timeout=60)
        if check.returncode == 0:
            usable.append(python)
        else:
            why.append(f"{python}: no pip, or setuptools < 70.1 without the wheel package ({check.stderr.strip()})")
    return usable, why


def project_version() -> str:
    with open(os.path.join(SOURCE, "pyproject.toml")) as f:
        return next(line.split('"')[1] for line in f if line.startswith("version = "))


class InstallTest(unittest.TestCase):
    def test_pip_install_without_build_isolation_into_a_fresh_venv(self) -> None:
        usable, why = interpreters()
        if not usable:
            self.skipTest("no interpreter here can build a wheel offline: " + "; ".join(why))
        for python in usable:
            with self.subTest(python=python):
                self.install_and_import(python)

    def install_and_import(self, python: str) -> None:
        tmp = tempfile.mkdtemp(prefix="itest-pyclient-install-")
        try:
            # A copy: setuptools writes build/ and *.egg-info beside the sources.
            src = os.path.join(tmp, "src")
            shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
            venv = os.path.join(tmp, "venv")
            subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True,
                           timeout=120)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            vpython = os.path.join(venv, "bin", "python")
            install = subprocess.run([vpython, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                                      "--no-deps", "--quiet", src], capture_output=True, text=True, env=env,
                                     timeout=240)
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
            where = subprocess.run([vpython, "-c", "import cubicle; print(cubicle.__file__, cubicle.__version__)"],
                                   capture_output=True, text=True, env=env, cwd=tmp, timeout=60)
            self.assertEqual(where.returncode, 0, where.stderr)
            path, version = where.stdout.split()
            self.assertTrue(path.startswith(os.path.realpath(venv)) or path.startswith(venv), path)
            self.assertEqual(version, project_version(), "the package's version is the project's")
        finally:
            shutil.rmtree(tmp)
        self.assertFalse(os.path.exists(tmp))


if __name__ == "__main__":
    unittest.main()
