"""The committed ``rocketbox_api`` modules are exactly what ``python -m rocketbox_api.generate``
makes from proto/: a .proto edited without regenerating (or a generated file edited by hand, or
one left behind by a deleted .proto) fails here. And they import under ``rocketbox_api``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocketbox_api.generate import REPO_ROOT, generated_files, proto_files

pytestmark = pytest.mark.slow

GENERATE_DEADLINE_S = 120.0


def test_committed_modules_are_byte_identical_to_a_fresh_generation(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rocketbox_api.generate", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=GENERATE_DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fresh = generated_files(tmp_path)
    assert fresh, "the generator produced nothing"
    assert generated_files(REPO_ROOT) == fresh, "stale or missing generated files"
    stale = [
        str(path)
        for path in fresh
        if (tmp_path / path).read_bytes() != (REPO_ROOT / path).read_bytes()
    ]
    assert not stale, f"{stale} differ from their .proto: run python -m rocketbox_api.generate"


def test_every_proto_gives_importable_modules_under_rocketbox_api() -> None:
    assert "rocketbox_api/admin/v1/broker_admin.proto" in proto_files()
    from rocketbox_api.admin.v1 import broker_admin_pb2, broker_admin_pb2_grpc  # noqa: PLC0415 - imported by the test that checks they import

    service = broker_admin_pb2.DESCRIPTOR.services_by_name["BrokerAdmin"]
    assert service.full_name == "rocketbox.admin.v1.BrokerAdmin"
    assert hasattr(broker_admin_pb2_grpc, "BrokerAdminStub")
