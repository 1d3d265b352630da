"""``python -m chaos``: run the chaos suite's scenarios and print their table.

Exit status: 0 when every scenario passed, 1 when any failed (a lost message, or a duplicate in
a scenario that allows none: see chaos/runner.py), 2 on a usage error. The table is printed after
each scenario and for all of them at the end, and written as Markdown to ``<out>/table.md``.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from chaos.checker import RECONCILE_MASTER_DEFAULT
from chaos.plan import MESSAGES_MAX
from chaos.report import Row, markdown, print_rows
from chaos.runner import (
    DRAIN_DEADLINE_S_DEFAULT,
    LOAD_DEADLINE_S_DEFAULT,
    MESSAGES_DEFAULT,
    Settings,
    run_scenario,
)
from chaos.scenarios import SCENARIOS

TABLE_FILE = "table.md"
TABLE_WIDTH = 160


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--scenario",
    "names",
    multiple=True,
    type=click.Choice(list(SCENARIOS)),
    help="A scenario to run; repeatable. Default: every one, in the listed order.",
)
@click.option(
    "--messages",
    default=MESSAGES_DEFAULT,
    show_default=True,
    type=click.IntRange(1, MESSAGES_MAX),
    help="Messages each scenario's load sends (Send, SendBatch and SendStream together).",
)
@click.option("--seed", default=1, show_default=True, type=int, help="Every scenario's seed.")
@click.option(
    "--out",
    "out_dir",
    default=Path("build/chaos"),
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where each scenario's records, logs and reconciliation go (one directory each).",
)
@click.option(
    "--drain-deadline-s",
    default=DRAIN_DEADLINE_S_DEFAULT,
    show_default=True,
    type=click.FloatRange(min=1),
    help="How long the outbox may take to drain after a scenario's faults are healed.",
)
@click.option(
    "--load-deadline-s",
    default=LOAD_DEADLINE_S_DEFAULT,
    show_default=True,
    type=click.FloatRange(min=1),
)
@click.option(
    "--reconcile-master",
    default=RECONCILE_MASTER_DEFAULT,
    show_default=True,
    help="The Spark master of each scenario's rocketbox reconcile.",
)
@click.option(
    "--sidecar-ids/--no-sidecar-ids",
    default=True,
    show_default=True,
    help="Give each sidecar a --sidecar-id (a restarted sidecar then ends its own leases).",
)
@click.option("--keep-data", is_flag=True, help="Keep the stores and outboxes of passed scenarios.")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def main(
    names: tuple[str, ...],
    messages: int,
    seed: int,
    out_dir: Path,
    drain_deadline_s: float,
    load_deadline_s: float,
    reconcile_master: str,
    sidecar_ids: bool,
    keep_data: bool,
    list_only: bool,
) -> None:
    """Run the chaos suite's scenarios against real rocketbox processes and services; print a
    table per scenario (sent, STORED, SPOOLED, REJECTED, lost, duplicated, time to drain)."""
    # Piped (make, CI logs), rich would fold the table to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else TABLE_WIDTH)
    if list_only:
        for scenario in SCENARIOS.values():
            console.print(f"{scenario.name}: {scenario.summary}")
        return
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr
    )
    # The drain is watched by opening the outbox again and again: its "open" lines are noise.
    logging.getLogger("outbox").setLevel(logging.WARNING)
    settings = Settings(
        out_dir=out_dir,
        messages=messages,
        seed=seed,
        load_deadline_s=load_deadline_s,
        drain_deadline_s=drain_deadline_s,
        reconcile_master=reconcile_master,
        sidecar_ids=sidecar_ids,
        keep_data=keep_data,
    )
    # SIGTERM unwinds like Ctrl-C: each stage stops the processes and servers it started.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    started = time.monotonic()
    for name in names or tuple(SCENARIOS):
        rows.append(run_scenario(SCENARIOS[name], settings))
        print_rows(rows[-1:], f"chaos: {name}", console)
    title = (
        f"chaos: {len(rows)} scenarios, {messages:,} messages each, seed {seed} "
        f"({time.monotonic() - started:.0f} s)"
    )
    print_rows(rows, title, console)
    (out_dir / TABLE_FILE).write_text(markdown(rows), encoding="utf-8")
    console.print(f"written: {out_dir / TABLE_FILE}")
    if not all(row.ok for row in rows):
        sys.exit(1)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
