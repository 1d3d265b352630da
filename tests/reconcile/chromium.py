"""Headless Chromium (Debian's ``chromium``) for the report tests, and a small PNG reader.

``make test`` installs chromium when it is missing; a test that finds none fails saying so.
Chromium runs with a profile in the test's temporary directory, without network services, and
every run has a deadline. ``read_png`` decodes the screenshot with zlib and numpy (8-bit RGB or
RGBA, not interlaced: what Chromium writes) so a test can look at its pixels.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

RUN_DEADLINE_S = 90
WINDOW_SIZE = (1400, 1300)
# Time the page's scripts may take before the screenshot or the DOM dump is taken (virtual time:
# Chromium returns as soon as the page is idle).
SCRIPT_BUDGET_MS = 10_000
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium(profile: Path, *args: str) -> str:
    """Run headless Chromium once; returns its stdout."""
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("Debian's chromium is not installed; `make test` installs it (apt-get)")
    command = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--virtual-time-budget={SCRIPT_BUDGET_MS}", *args,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_DEADLINE_S, check=False
    )
    assert done.returncode == 0, f"chromium exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def screenshot(page: Path, png: Path, profile: Path) -> None:
    width, height = WINDOW_SIZE
    chromium(profile, f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri())
    assert png.is_file(), "chromium wrote no screenshot"


def dump_dom(page: Path, profile: Path) -> str:
    return chromium(profile, "--dump-dom", page.as_uri())


def read_png(path: Path) -> npt.NDArray[np.uint8]:
    """The pixels as an array (height, width, channels)."""
    data = path.read_bytes()
    assert data.startswith(_PNG_SIGNATURE), "not a PNG"
    pos = len(_PNG_SIGNATURE)
    idat = bytearray()
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, interlace) == (8, 0), "an unexpected PNG format"
            assert colour in (2, 6), "an unexpected PNG format"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    assert len(raw) == height * (stride + 1)
    image = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        start = y * (stride + 1)
        row = _unfilter(
            raw[start], np.frombuffer(raw, np.uint8, stride, start + 1), prior, channels
        )
        image[y] = row
        prior = row
    return image.reshape(height, width, channels)


def _unfilter(
    kind: int, line: npt.NDArray[np.uint8], prior: npt.NDArray[np.uint8], bpp: int
) -> npt.NDArray[np.uint8]:
    """PNG's five row filters undone (RFC 2083, 6.2 to 6.6)."""
    if kind == 0:
        return line.copy()
    if kind == 2:
        return line + prior  # uint8 arithmetic wraps, as the filter's modulo 256 does
    if kind == 1:
        by_channel = line.reshape(-1, bpp).astype(np.uint64)
        return (np.cumsum(by_channel, axis=0) % 256).astype(np.uint8).ravel()
    out = bytearray(line.tobytes())
    up = prior.tobytes()
    for x in range(len(out)):
        left = out[x - bpp] if x >= bpp else 0
        above = up[x]
        if kind == 3:
            out[x] = (out[x] + (left + above) // 2) & 0xFF
            continue
        upper_left = up[x - bpp] if x >= bpp else 0
        estimate = left + above - upper_left
        pa, pb, pc = abs(estimate - left), abs(estimate - above), abs(estimate - upper_left)
        nearest = left if pa <= pb and pa <= pc else above if pb <= pc else upper_left
        out[x] = (out[x] + nearest) & 0xFF
    return np.frombuffer(bytes(out), np.uint8)


def pixels_of(image: npt.NDArray[np.uint8], colour: str) -> int:
    """How many pixels are exactly ``colour`` (#rrggbb)."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    return int((image[:, :, :3] == rgb).all(axis=2).sum())
