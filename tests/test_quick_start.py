"""The README's quick start, run as written.

The first block, ``make run``, is the Makefile's recipe (checked here) started in a temporary
directory whose ``.venv`` is this checkout's, with its four listeners on free ports through their
environment variables (the test session holds the defaults). Every later block is typed into one
shell, as into the second terminal the quick start describes, with ``ROCKETBOX_SIDECAR`` and
``ROCKETBOX_BROKER`` naming those ports; every command must exit 0, and each prints what the
README's comments promise.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rocketbox_process import READY_DEADLINE_S, REPO_ROOT, STOP_DEADLINE_S, wait_until

pytestmark = pytest.mark.slow

README = REPO_ROOT / "README.md"
MAKEFILE = REPO_ROOT / "Makefile"
SIDECAR_LINE = re.compile(r"^sidecar listening on [^\s:]+:(\d+)", re.MULTILINE)
BROKER_LINE = re.compile(r"broker listening on [^\s:]+:(\d+)")
# The second terminal's commands, each marked in the shell's output so that its lines are its own.
MARK = ":::quick-start-step:::"
# Spark starts a JVM and the consumers long-poll: generous, and only a bound on a hung step.
SHELL_DEADLINE_S = 600.0
SPOOLED_N = 5


def quick_start_blocks() -> list[list[str]]:
    """The ``sh`` blocks of the README's "Quick start" section, as lists of lines."""
    text = README.read_text()
    start = text.index("\n## Quick start\n")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def make_run_recipe() -> str:
    """`make run`'s command line, with the Makefile's variables filled in."""
    text = MAKEFILE.read_text()
    recipe: str
    data_dir: str
    [recipe] = re.findall(r"^run: .*\n\t(.+)$", text, flags=re.M)
    [data_dir] = re.findall(r"^DATA_DIR \?= (.+)$", text, flags=re.M)
    return recipe.replace("$(BIN)/", "").replace("$(DATA_DIR)", data_dir)


def command_outputs(output: str, commands: list[str]) -> dict[str, str]:
    """Each command's part of the shell's output, by its command line."""
    parts = output.split(MARK + "\n")[1:]
    assert len(parts) == len(commands), output
    return dict(zip(commands, parts, strict=True))


def output_of(outputs: dict[str, str], command_start: str) -> str:
    [found] = [out for command, out in outputs.items() if command.startswith(command_start)]
    return found


@pytest.fixture
def up(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    listeners = ("BROKER", "SIDECAR", "METRICS", "ROCKETMQ")
    env = os.environ | {f"ROCKETBOX_UP_{name}_LISTEN": "127.0.0.1:0" for name in listeners}
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(
        [".venv/bin/" + make_run_recipe().split()[0], *make_run_recipe().split()[1:]],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C, as the quick start stops it
        code = proc.wait(STOP_DEADLINE_S)
        log.close()
        assert code == 0, (tmp_path / "up.log").read_text()


def test_make_run_is_rocketbox_up_on_data() -> None:
    assert make_run_recipe() == "rocketbox up --data-dir ./data"
    assert quick_start_blocks()[0] == ["make run"]


def test_the_quick_start_runs_as_written(tmp_path: Path, up: subprocess.Popen[str]) -> None:
    log = tmp_path / "up.log"
    wait_until(
        lambda: SIDECAR_LINE.search(log.read_text()) and BROKER_LINE.search(log.read_text()),
        READY_DEADLINE_S,
        "rocketbox up's listening lines",
    )
    [sidecar_port] = SIDECAR_LINE.findall(log.read_text())
    [broker_port] = BROKER_LINE.findall(log.read_text())
    commands = [line for block in quick_start_blocks()[1:] for line in block]
    script = "set -e\n" + "".join(f"echo '{MARK}'\n{command}\n" for command in commands)
    env = os.environ | {
        "ROCKETBOX_SIDECAR": f"127.0.0.1:{sidecar_port}",
        "ROCKETBOX_BROKER": f"127.0.0.1:{broker_port}",
    }
    shell = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=SHELL_DEADLINE_S, check=False,
    )  # fmt: skip
    output = shell.stdout + shell.stderr
    assert shell.returncode == 0, f"{output}\n--- up ---\n{log.read_text()}"
    outputs = command_outputs(shell.stdout, commands)

    assert output_of(outputs, "rocketbox send Orders 'order 1").startswith("STORED ")
    first = output_of(outputs, "rocketbox consume Orders --group quickstart --count 1")
    assert "order 1 created" in first, first
    spooled = output_of(outputs, "rocketbox send Orders 'order 2")
    assert re.search(rf"\bSPOOLED\b\D*{SPOOLED_N}\b", spooled), spooled
    assert "THROTTLED" in spooled, spooled
    # Pending: waiting for their back-off, or being resent (and throttled again) at this moment;
    # "in flight" counts those of them a resend holds right now (OutboxStats), not more entries.
    stats = output_of(outputs, "rocketbox outbox stats")
    pending = re.findall(r"^│ pending +│ +(\d+) │$", stats, re.M)
    assert [int(n) for n in pending] == [SPOOLED_N], stats
    # Those still waiting for their back-off when it ran (the resend pool takes the others).
    retried = output_of(outputs, "rocketbox outbox retry-now")
    made_due = re.search(r"(\d+) pending entr(?:y|ies) made due now", retried)
    assert made_due is not None, retried
    assert int(made_due.group(1)) <= SPOOLED_N, retried
    drained = output_of(outputs, "rocketbox consume Orders --group quickstart --count 5")
    assert drained.count("order 2 created") == SPOOLED_N, drained
    # Without a terminal, watch prints one JSON line per sample; the last one after the drain.
    last = json.loads(output_of(outputs, "rocketbox outbox watch").splitlines()[-1])
    assert (last["pending"], last["in_flight"], last["delivered"]) == (0, 0, SPOOLED_N), last
    reconciled = output_of(outputs, "rocketbox reconcile")
    assert "NOTHING LOST" in reconciled, reconciled
    assert (tmp_path / "reconciliation" / "report.html").is_file()
