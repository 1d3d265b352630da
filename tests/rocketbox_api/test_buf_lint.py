"""rocketbox's own .proto files pass ``buf lint`` with buf's STANDARD rules, and are formatted as
``buf format`` formats them, per the repository's buf.yaml.

buf.yaml lints exactly the files under proto/ (no other project's .proto in .venv or
node_modules), and its one exception, SERVICE_SUFFIX for rocketbox.admin.v1.BrokerAdmin (a name
its clients already use), is scoped to broker_admin.proto: a rule broken anywhere else, that one
included, still fails. buf is @bufbuild/buf, pinned in tests/node/package.json and installed by
``make test`` (``npm ci`` in tests/node); it runs offline (the well-known types are built in). A
machine without ``node`` or without that package fails this test: it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketbox_api.generate import REPO_ROOT

pytestmark = pytest.mark.slow

NODE_DIR = REPO_ROOT / "tests" / "node"
BUF_PACKAGE = NODE_DIR / "node_modules" / "@bufbuild" / "buf"
# The package's launcher: a Node script that runs the binary of this platform's package
# (@bufbuild/buf-linux-x64, ...), so it works alike on every platform the lock file names.
BUF_LAUNCHER = BUF_PACKAGE / "bin" / "buf"
BUF_DEADLINE_S = 120.0


def buf_command() -> list[str]:
    """How to run the pinned buf: ``[node, launcher]``; fail if it is not installed."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "`node` is not on PATH: buf lint runs the buf of tests/node (@bufbuild/buf), which "
            "needs Node.js >= 18 and npm (then `make test` installs it)"
        )
    if not BUF_LAUNCHER.exists():
        pytest.fail(
            f"{BUF_PACKAGE} is missing: run `make test`, or `cd tests/node && npm ci`, "
            "to install buf"
        )
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["@bufbuild/buf"]
    installed = json.loads((BUF_PACKAGE / "package.json").read_text())["version"]
    assert installed == pinned, f"installed buf {installed}, pinned {pinned}: run npm ci"
    return [node, str(BUF_LAUNCHER)]


def buf(workspace: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``buf ARGS`` in ``workspace`` (where buf.yaml is), with its cache under ``cache``."""
    try:
        return subprocess.run(
            [*buf_command(), *args],
            cwd=workspace,
            env={**os.environ, "BUF_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
            timeout=BUF_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"buf {' '.join(args)} still running after {BUF_DEADLINE_S} s:\n{text_of(e.stderr)}"
        )


def text_of(output: str | bytes | None) -> str:
    """A child's captured output (bytes when a timeout cut it short), as text."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def output(done: subprocess.CompletedProcess[str]) -> str:
    return f"buf {' '.join(done.args[2:])} exited {done.returncode}\n{done.stdout}{done.stderr}"


def test_buf_lints_exactly_the_protos_under_proto(tmp_path: Path) -> None:
    done = buf(REPO_ROOT, tmp_path, "ls-files")
    assert done.returncode == 0, output(done)
    expected = sorted(
        p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "proto").rglob("*.proto")
    )
    assert expected, "no .proto under proto/"
    assert sorted(done.stdout.split()) == expected, output(done)


def test_the_protos_pass_buf_lint_standard(tmp_path: Path) -> None:
    done = buf(REPO_ROOT, tmp_path, "lint")
    assert done.returncode == 0, output(done)
    assert not done.stdout.strip(), output(done)


def test_the_protos_are_formatted_as_buf_format_does(tmp_path: Path) -> None:
    done = buf(REPO_ROOT, tmp_path, "format", "--diff", "--exit-code")
    assert done.returncode == 0, f"run `buf format -w` from the repository root\n{output(done)}"


def test_the_lint_fails_a_proto_that_breaks_a_standard_rule(tmp_path: Path) -> None:
    """The config is not vacuous: in a copy of the workspace, a new file breaking STANDARD rules
    fails, and so does the exempt rule anywhere but broker_admin.proto."""
    workspace = tmp_path / "workspace"
    shutil.copytree(REPO_ROOT / "proto", workspace / "proto")
    shutil.copy2(REPO_ROOT / "buf.yaml", workspace / "buf.yaml")
    (workspace / "proto" / "rocketbox" / "v1" / "lint_canary.proto").write_text(
        'syntax = "proto3";\n\npackage rocketbox.v1;\n\n'
        "enum Colour {\n  RED = 0;\n}\n\n"
        "service Canary {\n  rpc Ping(PingRequest) returns (PingResponse);\n}\n\n"
        "message PingRequest {}\n\nmessage PingResponse {}\n"
    )
    done = buf(workspace, tmp_path / "cache", "lint")
    assert done.returncode != 0, output(done)
    canary = [line for line in done.stdout.splitlines() if "lint_canary.proto" in line]
    assert any('"RED" should be prefixed with "COLOUR_"' in line for line in canary), output(done)
    assert any('"Canary" should be suffixed with "Service"' in line for line in canary), output(
        done
    )
    others = [line for line in done.stdout.splitlines() if "lint_canary.proto" not in line]
    assert not others, output(done)
