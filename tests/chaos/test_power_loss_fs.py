"""chaos/power_loss_fs.py and chaos/power_loss.py, a disk that loses power, against real processes:
a writer process does its writes on the mount, the power is cut (its unsynced writes dropped, the
writer SIGKILLed), and a fresh mount over the same backing directory shows what survived.

- a write never synced is gone; a write followed by fsync, by fdatasync, or through an O_DSYNC
  descriptor is kept;
- metadata is durable at once: explicit size changes (ftruncate, O_TRUNC, fallocate) and
  namespace changes (create, rename, unlink, mkdir): a file created and never synced is there,
  empty; a synced file renamed is there under its new name; a file preallocated and renamed into
  place is there at its size, zeros where its unsynced writes were;
- writes through a shared mapping are kept once msync'ed or fdatasync'ed, and lost otherwise (the
  broker's commitlog is written that way), also when the kernel wrote them back before the cut;
- a real RocksDB (rocksdict) keeps every write it synced, and loses the unsynced ones written
  after its last synced write, which SIGKILL alone would have kept;
- before the cut every process reads what was written, synced or not; after it the mount answers
  EIO until it is remounted;
- past its unsynced-bytes limit the filesystem writes the file back, as a kernel would;
- bad settings and requests are refused, naming the limit.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from chaos.power_loss import UNSYNCED_BYTES_MIN, PowerLossDisk, PowerLossError

pytestmark = pytest.mark.slow

WRITER_DEADLINE_S = 60.0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerLossDisk]:
    with PowerLossDisk(tmp_path / "disk") as mounted:
        yield mounted


def run_then_cut(disk: PowerLossDisk, script: str) -> dict[str, Any]:
    """``script`` run in a writer process on the mount (its cwd), which then waits; the power
    cut; the writer SIGKILLed; the disk mounted again. What the cut dropped."""
    body = textwrap.dedent(script) + "\nprint('written', flush=True)\nsys.stdin.read()\n"
    with subprocess.Popen(
        [sys.executable, "-c", "import os, sys, mmap\n" + body],
        cwd=disk.mount_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as writer:  # fmt: skip
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline() == "written\n", "the writer failed (stderr above)"
            dropped = disk.cut()
        finally:
            writer.kill()
            writer.wait(WRITER_DEADLINE_S)
    disk.remount()
    return dropped


def test_an_unsynced_write_is_gone_and_a_synced_one_kept(disk: PowerLossDisk) -> None:
    dropped = run_then_cut(
        disk,
        """
        fd = os.open("fsynced", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"synced"); os.fsync(fd); os.write(fd, b" and more")
        fd = os.open("fdatasynced", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"synced"); os.fdatasync(fd)
        fd = os.open("dsync", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
        os.write(fd, b"synced by O_DSYNC")
        with open("never", "wb") as f:
            f.write(b"x" * 10_000)
        """,
    )
    m = disk.mount_dir
    assert (m / "fsynced").read_bytes() == b"synced"
    assert (m / "fdatasynced").read_bytes() == b"synced"
    assert (m / "dsync").read_bytes() == b"synced by O_DSYNC"
    assert (m / "never").read_bytes() == b""
    assert dropped["unsynced_files"] == 2
    assert (disk.backing_dir / "fsynced").read_bytes() == b"synced"


def test_explicit_size_changes_are_durable_at_once_and_data_is_not(disk: PowerLossDisk) -> None:
    for name in ("cut", "reopened"):
        fd = os.open(disk.mount_dir / name, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"s" * 10_000)
        os.fsync(fd)
        os.close(fd)
    run_then_cut(
        disk,
        """
        fd = os.open("cut", os.O_RDWR); os.ftruncate(fd, 10)
        with open("reopened", "wb") as f:
            f.write(b"new")
        # The broker's way to a new segment: preallocated, renamed into place, written, unsynced.
        fd = os.open("segment.creating", os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, 3 * 4096)
        os.rename("segment.creating", "segment")
        os.pwrite(fd, b"record", 0)
        """,
    )
    assert (disk.mount_dir / "cut").read_bytes() == b"s" * 10
    assert (disk.mount_dir / "reopened").read_bytes() == b""
    assert (disk.mount_dir / "segment").read_bytes() == bytes(3 * 4096)


def test_namespace_changes_are_durable_at_once(disk: PowerLossDisk) -> None:
    (disk.mount_dir / "doomed").write_bytes(b"doomed")
    run_then_cut(
        disk,
        """
        open("created", "wb").close()
        fd = os.open("renamed.tmp", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"renamed"); os.fsync(fd); os.close(fd)
        os.rename("renamed.tmp", "renamed")
        os.unlink("doomed")
        os.mkdir("made")
        """,
    )
    assert sorted(os.listdir(disk.mount_dir)) == ["created", "made", "renamed"]
    assert (disk.mount_dir / "created").read_bytes() == b""
    assert (disk.mount_dir / "renamed").read_bytes() == b"renamed"


def test_mapped_writes_are_kept_once_synced(disk: PowerLossDisk) -> None:
    run_then_cut(
        disk,
        """
        fd = os.open("mapped", os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, 3 * 4096); os.fsync(fd)
        m = mmap.mmap(fd, 3 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        m[0:6] = b"fdsync"; os.fdatasync(fd)
        m[4096:4101] = b"msync"; m.flush()
        m[8192:8197] = b"never"
        """,
    )
    kept = (disk.mount_dir / "mapped").read_bytes()
    assert len(kept) == 3 * 4096
    assert kept.replace(b"\0", b"") == b"fdsyncmsync"


def test_page_cache_written_back_before_a_cut_is_counted_and_dropped(disk: PowerLossDisk) -> None:
    fd = os.open(disk.mount_dir / "mapped", os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 2 * 4096)
    os.fsync(fd)
    mapped = mmap.mmap(fd, 2 * 4096)
    mapped[4096:4101] = b"dirty"
    # The page is dirty in the kernel's cache: the filesystem has not seen it yet.
    assert disk.stats()["unsynced_bytes"] == 0
    disk.write_back_page_cache()
    assert disk.stats()["unsynced_bytes"] == 4096
    assert disk.cut()["unsynced_bytes"] == 4096
    mapped.close()
    with pytest.raises(OSError, match="Input/output error"):
        os.close(fd)
    disk.remount()
    assert (disk.mount_dir / "mapped").read_bytes() == bytes(2 * 4096)


# Raw mode, as the outbox opens it: rocksdict's own mode keeps its settings in a file of its own,
# which it does not sync.
ROCKSDB_WRITER = """
import rocksdict
db = rocksdict.Rdict("db", rocksdict.Options(raw_mode=True))
synced = rocksdict.WriteOptions(); synced.sync = True
for i in range(200):
    db.put(b"synced-%03d" % i, b"v" * 300, synced)
for i in range(50):
    db.put(b"unsynced-%03d" % i, b"v" * 300)
"""


def rocksdb_keys(path: Path) -> tuple[int, int]:
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    try:
        keys = [k for k, _ in db.items() if isinstance(k, bytes)]
    finally:
        db.close()
    synced = sum(1 for k in keys if k.startswith(b"synced-"))
    return synced, sum(1 for k in keys if k.startswith(b"unsynced-"))


def test_rocksdb_keeps_its_synced_writes_and_loses_the_rest(disk: PowerLossDisk) -> None:
    dropped = run_then_cut(disk, ROCKSDB_WRITER)
    assert rocksdb_keys(disk.mount_dir / "db") == (200, 0)
    assert dropped["unsynced_bytes"] > 0


def test_sigkill_alone_keeps_rocksdbs_unsynced_writes(disk: PowerLossDisk) -> None:
    # The contrast: the same writer SIGKILLed with the power on loses nothing.
    with subprocess.Popen(
        [sys.executable, "-c", ROCKSDB_WRITER + "print('written', flush=True)\ninput()\n"],
        cwd=disk.mount_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as writer:  # fmt: skip
        assert writer.stdout is not None
        assert writer.stdout.readline() == "written\n"
        writer.kill()
        writer.wait(WRITER_DEADLINE_S)
    assert rocksdb_keys(disk.mount_dir / "db") == (200, 50)


def test_unsynced_writes_are_read_until_the_cut_and_then_eio(disk: PowerLossDisk) -> None:
    path = disk.mount_dir / "f"
    with path.open("wb") as f:
        f.write(b"a" * 5000)
    reader = subprocess.run(
        ["cat", str(path)], capture_output=True, check=True, timeout=WRITER_DEADLINE_S
    )
    assert reader.stdout == b"a" * 5000
    os.truncate(path, 100)
    os.truncate(path, 6000)
    assert path.read_bytes() == b"a" * 100 + bytes(5900)
    assert path.stat().st_size == 6000
    assert disk.stats()["unsynced_files"] == 1
    disk.cut()
    with pytest.raises(OSError, match="Input/output error") as dead:
        path.read_bytes()
    assert dead.value.errno == errno.EIO
    with pytest.raises(OSError, match="Input/output error"):
        (disk.mount_dir / "new").write_bytes(b"x")
    disk.remount()
    # The size it was given is durable; the data written never was.
    assert path.read_bytes() == bytes(6000)
    assert disk.stats() == {
        "unsynced_files": 0, "unsynced_bytes": 0, "dead": False, "syncs": 0, "writes": 0,
        "writebacks": 0,
    }  # fmt: skip


def test_past_its_limit_the_file_being_written_is_written_back(tmp_path: Path) -> None:
    with PowerLossDisk(tmp_path / "disk", unsynced_bytes_max=64 * 1024) as disk:
        dropped = run_then_cut(
            disk,
            """
            with open("big", "wb", buffering=0) as f:
                for _ in range(50):
                    f.write(b"b" * 4000)
                f.write(b"tail")
            """,
        )
        assert dropped["writebacks"] > 0
        kept = (disk.mount_dir / "big").read_bytes()
        # Written back each time the unsynced total passed 64 KiB; not the tail written after.
        assert 64 * 1024 <= len(kept) <= 200_000
        assert kept == b"b" * len(kept)


def test_bad_settings_and_requests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=f"unsynced_bytes_max must be at least {UNSYNCED_BYTES_MIN}"
    ):
        PowerLossDisk(tmp_path, unsynced_bytes_max=1)
    with PowerLossDisk(tmp_path / "disk") as disk:
        with pytest.raises(PowerLossError, match="already mounted"):
            disk.mount()
        with pytest.raises(PowerLossError, match="a mount point already"):
            PowerLossDisk(tmp_path / "disk").mount()
        with socket.socket(socket.AF_UNIX) as s:
            s.connect("\0" + disk.control_name)
            s.sendall(b'{"op": "explode"}\n')
            answer = json.loads(s.makefile().readline())
        assert "op must be 'stats' or 'cut'" in answer["error"]
    assert not os.path.ismount(tmp_path / "disk" / "mnt")
    with pytest.raises(PowerLossError, match="not mounted"):
        disk.cut()
