"""The compiled store ships as it is tested: the wheel built with ROCKETBOX_MYPYC=1 (setup.py, as
the image builds it) holds the store compiled by mypyc, and the store's tests, the pop service's
and the long polls' pass against it, in a process that imports the wheel's modules (checked by
the store tests' conftest). The rest of the suite runs the plain-Python store, as a checkout does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.broker.store.conftest import EXPECT_COMPILED_ENV

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
# What the wheel is built from: what the image copies (Dockerfile), without local state.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "broker", "namesrv", "sidecar", "outbox",
           "reconcile", "rocketbox", "rocketbox_api")  # fmt: skip
TESTS = ("tests/broker/store", "tests/broker/test_pop_message.py", "tests/broker/test_arrival.py")
BUILD_TIMEOUT_S = 600
TESTS_TIMEOUT_S = 600


def test_the_store_compiled_by_mypyc_passes_the_store_tests(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.so")
            shutil.copytree(REPO / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-q", "-w", str(wheels), "."],
        cwd=source, env={**os.environ, "ROCKETBOX_MYPYC": "1"}, capture_output=True, text=True,
        timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert build.returncode == 0, f"the compiled wheel did not build:\n{build.stderr[-4000:]}"
    (wheel,) = wheels.glob("rocketbox-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        compiled = [n for n in z.namelist() if n.startswith("broker/store/") and n.endswith(".so")]
        assert len(compiled) == len(list((REPO / "broker/store").rglob("*.py"))), compiled
        z.extractall(site)
    # From outside the checkout, with the wheel first on the path: the tests' own package is
    # found by pytest's rootdir (appended), the code under test in the wheel.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=append",
         f"--ignore={Path(__file__).resolve()}", *(str(REPO / t) for t in TESTS)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site), EXPECT_COMPILED_ENV: "1"},
        capture_output=True, text=True, timeout=TESTS_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert run.returncode == 0, (
        f"the store's tests failed against the compiled store:\n{run.stdout[-6000:]}"
    )
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-2000:]
