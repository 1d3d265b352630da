"""The client's copy of the sidecar API's protobuf module (rocketbox_client/_proto) is exactly
what ``python client/generate.py`` makes from proto/, and it registers the same file, with the
same bytes, as the server's rocketbox_api.v1.sidecar_pb2: a process imports both, in either
order, and gets one set of message classes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_PROTO = REPO_ROOT / "client" / "rocketbox_client" / "_proto"
GENERATED = ("sidecar_pb2.py", "sidecar_pb2.pyi")
GENERATE_DEADLINE_S = 120.0


def test_the_committed_copy_is_byte_identical_to_a_fresh_generation(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "client/generate.py", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=GENERATE_DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    stale = [n for n in GENERATED if (tmp_path / n).read_bytes() != (CLIENT_PROTO / n).read_bytes()]
    assert not stale, f"{stale} differ from sidecar.proto: run python client/generate.py"


@pytest.mark.parametrize(
    "imports",
    [
        ("rocketbox_api.v1.sidecar_pb2", "rocketbox_client._proto.sidecar_pb2"),
        ("rocketbox_client._proto.sidecar_pb2", "rocketbox_api.v1.sidecar_pb2"),
    ],
)
def test_the_server_and_client_modules_import_in_one_process(imports: tuple[str, str]) -> None:
    first, second = imports
    code = (
        "import importlib\n"
        f"a = importlib.import_module({first!r})\n"
        f"b = importlib.import_module({second!r})\n"
        "assert a.DESCRIPTOR.serialized_pb == b.DESCRIPTOR.serialized_pb\n"
        "m = a.SendRequest(message=b.Message(topic='Orders', body=b'x'))\n"
        "assert b.SendRequest.FromString(m.SerializeToString()) == m\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=GENERATE_DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
