"""The wheel with the store compiled by mypyc (setup.py, ROCKETBOX_MYPYC=1), built once per store.

The build is most of test_compiled_store.py's time, and what it compiles is broker/store alone:
the wheel is kept under build/compiled-store/, keyed by a hash of the store's sources, setup.py,
what pyproject.toml tells the build and mypy, the Python and the mypy (mypyc) that compile
them, and built again only when one of those changed. The other packages in the wheel are plain
copies of their sources: the test takes those from the checkout (site_of), so a kept wheel never
tests stale code.

``python -m tests.broker.store.compiled_wheel`` builds it ahead (make test, beside the lint).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import mypy.version

REPO = Path(__file__).resolve().parents[3]
CACHE = REPO / "build" / "compiled-store"
COMPILED_PACKAGE = "broker/store"
# What the wheel is built from: what the image copies (Dockerfile), without local state.
PACKAGES = ("broker", "namesrv", "sidecar", "outbox", "reconcile", "rocketbox", "rocketbox_api")
FILES = ("pyproject.toml", "setup.py", "README.md")
# What the compiled modules depend on besides the store: setup.py, and the tables of
# pyproject.toml the build and mypyc read (a change to the linters' or the tests' settings
# reuses the wheel).
KEY_FILES = ("setup.py",)
KEY_TABLES = ("build-system", "project", "setuptools", "mypy")
BUILD_TIMEOUT_S = 600
IGNORED = shutil.ignore_patterns("__pycache__", "*.so")


def cache_key() -> str:
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\n{sys.platform}\nmypy {mypy.version.__version__}\n".encode())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    tables = {**project, **project.get("tool", {})}
    digest.update(json.dumps({t: tables.get(t) for t in KEY_TABLES}, sort_keys=True).encode())
    paths = [REPO / f for f in KEY_FILES]
    paths += sorted(p for p in (REPO / COMPILED_PACKAGE).rglob("*") if p.is_file() and _kept(p))
    for path in paths:
        digest.update(f"{path.relative_to(REPO)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:32]


def _kept(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix != ".so"


def compiled_wheel() -> Path:
    """The compiled wheel of the checkout's store: the kept one, or one built now."""
    key = cache_key()
    CACHE.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE / ".lock"):
        kept = sorted((CACHE / key).glob("rocketbox-*.whl"))
        if kept:
            return kept[0]
        wheel = _build(key)
        for other in CACHE.iterdir():  # one store's wheel is kept, not every one ever built
            if other.is_dir() and other.name != key:
                shutil.rmtree(other, ignore_errors=True)
        return wheel


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # make test's build ahead and the test itself may overlap: the second waits for the first.
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(key: str) -> Path:
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="building-") as tmp:
        source = Path(tmp) / "source"
        source.mkdir()
        for name in PACKAGES:
            shutil.copytree(REPO / name, source / name, ignore=IGNORED)
        for name in FILES:
            shutil.copy2(REPO / name, source / name)
        wheels = Path(tmp) / "wheels"
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
             "--disable-pip-version-check", "-q", "-w", str(wheels), "."],
            cwd=source, env={**os.environ, "ROCKETBOX_MYPYC": "1"}, capture_output=True,
            text=True, timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        if build.returncode != 0:
            raise RuntimeError(f"the compiled wheel did not build:\n{build.stderr[-4000:]}")
        (wheel,) = wheels.glob("rocketbox-*.whl")
        built = Path(tmp) / key
        built.mkdir()
        wheel.rename(built / wheel.name)
        built.rename(CACHE / key)  # whole or not at all: a killed build leaves no wheel
    return CACHE / key / wheel.name


def site_of(wheel: Path, site: Path) -> list[str]:
    """Install ``wheel``'s compiled store into ``site`` beside the checkout's other packages, as
    a fresh build would hold them; returns the store's compiled modules."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        compiled = [n for n in names if n.startswith(f"{COMPILED_PACKAGE}/") and n.endswith(".so")]
        # The store's modules and mypyc's runtime beside them (a module at the top): the parts
        # built from what the key covers.
        kept = [n for n in names if n.startswith(f"{COMPILED_PACKAGE}/") or "/" not in n]
        z.extractall(site, members=kept)
    for name in PACKAGES:
        skip = COMPILED_PACKAGE.removeprefix(f"{name}/") if name == "broker" else None

        def ignore(directory: str, entries: list[str], skip: str | None = skip) -> set[str]:
            ignored = set(IGNORED(directory, entries))
            if skip is not None and Path(directory) == REPO / "broker":
                ignored.add(skip)
            return ignored

        shutil.copytree(REPO / name, site / name, ignore=ignore, dirs_exist_ok=True)
    return compiled


if __name__ == "__main__":
    sys.stdout.write(f"compiled store: {compiled_wheel().relative_to(REPO)}\n")
