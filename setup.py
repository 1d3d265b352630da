"""setuptools' build script, for one option only: everything else is in pyproject.toml.

    ROCKETBOX_MYPYC=1 pip wheel --no-build-isolation --no-deps .

compiles the broker's store (broker/store, the per-message path of every put and every dispatch)
to C with mypyc: appends go faster (docs/benchmarks.md, `make bench-compiled`). It needs
mypy (the version pyproject.toml's dev extra pins) and a C compiler where the wheel is built; the
image (Dockerfile) is built this way. Without ROCKETBOX_MYPYC the package is plain Python, as a
checkout runs it: the same modules, the same tests (tests/broker/store/test_compiled_store.py runs
the store's tests against the compiled wheel).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

COMPILED_MODULES = sorted(str(p) for p in Path("broker/store").rglob("*.py"))

if os.environ.get("ROCKETBOX_MYPYC") == "1":
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(COMPILED_MODULES))
else:
    setup()
