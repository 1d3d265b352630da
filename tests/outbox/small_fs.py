"""A real small filesystem for disk-full tests: chaos/disk.py's tmpfs, mounted for one test and
always unmounted. Mounting needs root (CAP_SYS_ADMIN): a test that cannot mount fails saying
so, never skips."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.disk import DiskError, SmallDisk


@contextlib.contextmanager
def small_disk(directory: Path, size_bytes: int) -> Iterator[SmallDisk]:
    """A tmpfs of ``size_bytes`` on ``directory`` for the block (``fill`` takes every byte)."""
    disk = SmallDisk(directory, size_bytes)
    try:
        disk.mount()
    except DiskError as e:
        pytest.fail(f"this test needs a small filesystem of its own: {e}")
    try:
        yield disk
    finally:
        disk.unmount()
