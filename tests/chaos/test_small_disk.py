"""chaos/disk.py, a small tmpfs for an outbox:

- mounted with the size asked; ``fill`` leaves not one byte, so that anyone's next write fails
  with ENOSPC; ``free`` gives the room back;
- unmounted at the end, even while a file on it is still open (detached lazily): nothing stays
  mounted on the directory;
- a second mount on a mounted directory, and a size out of its limits, are refused clearly.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from chaos.disk import SIZE_BYTES_MAX, SIZE_BYTES_MIN, DiskError, SmallDisk

pytestmark = pytest.mark.slow

SIZE_BYTES = 1024 * 1024


def test_fill_leaves_no_room_and_free_gives_it_back(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path / "outbox", SIZE_BYTES)
    disk.mount()
    try:
        assert os.path.ismount(disk.mount_dir)
        assert disk.free_bytes() == SIZE_BYTES
        (disk.mount_dir / "before").write_bytes(b"x" * 1000)

        filled = disk.fill()
        assert filled > SIZE_BYTES - 8192
        assert disk.free_bytes() == 0
        with pytest.raises(OSError, match="No space left on device") as full:
            (disk.mount_dir / "after").write_bytes(b"x")
        assert full.value.errno == errno.ENOSPC

        disk.free()
        assert disk.free_bytes() >= filled
        (disk.mount_dir / "after").write_bytes(b"x" * 1000)
    finally:
        disk.unmount()
    assert not os.path.ismount(tmp_path / "outbox")


def test_a_busy_disk_is_still_unmounted(tmp_path: Path) -> None:
    with SmallDisk(tmp_path / "outbox", SIZE_BYTES) as disk:
        held = (disk.mount_dir / "held").open("wb")
    try:
        assert not os.path.ismount(tmp_path / "outbox")
        assert not disk.mounted
    finally:
        held.close()


def test_bad_mounts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"size_bytes must be within {SIZE_BYTES_MIN}"):
        SmallDisk(tmp_path, SIZE_BYTES_MIN - 1)
    with pytest.raises(ValueError, match=str(SIZE_BYTES_MAX)):
        SmallDisk(tmp_path, SIZE_BYTES_MAX + 1)
    with SmallDisk(tmp_path / "outbox", SIZE_BYTES):
        with pytest.raises(DiskError, match="a mount point already"):
            SmallDisk(tmp_path / "outbox", SIZE_BYTES).mount()
        with pytest.raises(DiskError, match="not mounted"):
            SmallDisk(tmp_path / "elsewhere", SIZE_BYTES).fill()
    assert not os.path.ismount(tmp_path / "outbox")
