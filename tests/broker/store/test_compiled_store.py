"""The compiled store ships as it is tested: the wheel built with ROCKETBOX_MYPYC=1 (setup.py, as
the image builds it) holds the store compiled by mypyc, and the store's tests, the pop service's
and the long polls' pass against it, in a process that imports the wheel's modules (checked by
the store tests' conftest). The rest of the suite runs the plain-Python store, as a checkout
does. The wheel is built only when the store changed (compiled_wheel.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker.store.compiled_wheel import REPO, compiled_wheel, site_of
from tests.broker.store.conftest import EXPECT_COMPILED_ENV

pytestmark = pytest.mark.slow

TESTS = ("tests/broker/store", "tests/broker/test_pop_message.py", "tests/broker/test_arrival.py")
TESTS_TIMEOUT_S = 600


def test_the_store_compiled_by_mypyc_passes_the_store_tests(tmp_path: Path) -> None:
    site = tmp_path / "site"
    compiled = site_of(compiled_wheel(), site)
    assert len(compiled) == len(list((REPO / "broker/store").rglob("*.py"))), compiled
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
