"""``rocketbox reconcile``: prove from the brokers' commitlogs that nothing acknowledged was lost.

Exit codes: reconcile/errors.py's table (``EXIT_CODES``), shown by ``--help``. A commitlog not
read whole is no verdict (reconcile/unread.py), said in one sentence on stderr; the summary is
written, and its first line never says NOTHING LOST. An outbox URL is exported here (to
``<out>/inputs/outbox.parquet``) before Spark starts: only this module opens a backend.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from outbox.errors import OutboxError
from outbox.export import export_parquet
from outbox.factory import BACKENDS, redact
from reconcile.errors import EXIT_CODES, ExitCode, InputError, ReconcileError
from rocketbox.outbox_session import open_for_reading
from rocketbox.up_layout import up_ack_ledger, up_broker_dir, up_broker_stores, up_outbox_dir
from rocketbox.wording import plural

OUTBOX_EXPORT_NAME = "outbox.parquet"
# pyproject's reconcile extra: the job (PySpark), its summaries (pandas), report.html (plotly).
RECONCILE_EXTRA_MODULES = ("pyspark", "pandas", "plotly")


def _spark_conf(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in value:
        key, sep, setting = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE")
        pairs.append((key.strip(), setting))
    return tuple(pairs)


def _exit_codes_help() -> str:
    """The exit code table for the help's epilog, one code a line (\\b: click keeps the lines)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {code:d}  {meaning}" for code, meaning in EXIT_CODES)


@click.command(
    "reconcile",
    short_help="Find lost or duplicated messages: commitlog, outbox, acks.",
    epilog=_exit_codes_help(),
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="A `rocketbox up` data directory: its broker stores, its RocksDB outbox and its ack "
    "ledger (DATA_DIR/broker or every DATA_DIR/brokers/<broker-name>-<broker-id> of a "
    "cluster, DATA_DIR/outbox, DATA_DIR/acks.jsonl), each unless given below.",
)
@click.option(
    "--commitlog",
    "commitlogs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A broker's store directory (holding commitlog/) or its commitlog directory; "
    "repeatable: one per broker group of a cluster, and slaves' copies, which count once.",
)
@click.option(
    "--outbox",
    "outbox_source",
    metavar="URL-or-EXPORT",
    help="An outbox export (.jsonl, or .parquet file or directory), or an outbox URL "
    "(rocksdb:///path, redis://…, mysql+pymysql://…) exported first; a RocksDB one is opened "
    "read-only, so it may be a running sidecar's.",
)
@click.option(
    "--acks",
    "ledgers",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="LEDGER",
    help="An acknowledgement ledger (JSON lines, the sidecar's --ack-ledger); repeatable.",
)
@click.option(
    "--engine",
    type=click.Choice(["auto", "spark", "in-process"]),
    default="auto",
    show_default=True,
    help="in-process: Arrow in this process, no JVM, seconds on small data; spark: any size, "
    "any --master; auto: in process up to --in-process-records-max records with a local "
    "master, else Spark.",
)
@click.option(
    "--in-process-records-max",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Commitlog records auto takes in process (held in memory: about 1.5 GB a million) "
    "before it runs Spark; the records an incremental run reads at a time.",
)
@click.option(
    "--master", default="local[*]", help="Spark master: local[*], local[N], spark://host:port …"
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Output directory: summary.json, report.html, details/ (Parquet).",
)
@click.option(
    "--checkpoint",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Run incrementally: read only what is new since the run that left this checkpoint "
    "directory, settle what it left open, and leave a new one (in process).",
)
@click.option(
    "--full",
    is_flag=True,
    help="With --checkpoint: recompute everything from the inputs' start and start the "
    "checkpoint over.",
)
@click.option(
    "--settle-minutes",
    default=10,
    show_default=True,
    type=click.IntRange(1, 7 * 24 * 60),
    help="With --checkpoint: a message settles once nothing about it was seen for this long "
    "before the latest time seen.",
)
@click.option("--bucket-minutes", default=10, type=click.IntRange(1, 7 * 24 * 60))
@click.option(
    "--drill-down-ids-max",
    default=100,
    type=click.IntRange(1, 100_000),
    help="Message ids per finding in summary.json and the report (all are in details/).",
)
@click.option(
    "--shuffle-partitions",
    default=None,
    type=click.IntRange(min=1),
    help="The Spark engine's buckets of message ids, a task each (and "
    "spark.sql.shuffle.partitions) [default: one per 256 MiB of input, at least 4 a core]",
)
@click.option(
    "--conf",
    "spark_conf",
    multiple=True,
    callback=_spark_conf,
    metavar="KEY=VALUE",
    help="A Spark setting (e.g. spark.executor.memory=4g); repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole summary as JSON.")
def reconcile_command(
    data_dir: Path | None,
    commitlogs: tuple[Path, ...],
    outbox_source: str | None,
    ledgers: tuple[Path, ...],
    engine: str,
    in_process_records_max: int,
    master: str,
    out_dir: Path,
    checkpoint: Path | None,
    full: bool,
    settle_minutes: int,
    bucket_minutes: int,
    drill_down_ids_max: int,
    shuffle_partitions: int | None,
    spark_conf: tuple[tuple[str, str], ...],
    as_json: bool,
) -> None:
    """Join the commitlog with the outbox and the acknowledgement ledgers on message id; count
    lost, duplicated, recovered, unexpected, pending and dead messages per topic and bucket.
    Reads the commitlogs of rocketbox and of Apache RocketMQ 4.x / 5.x (with or without the
    __CRC32# property). A commitlog not read whole is no verdict: one sentence on stderr."""
    _check_reconcile_extra()
    # The job's libraries (pyarrow, plotly; PySpark when Spark runs) load only for this command.
    from reconcile.config import (  # noqa: PLC0415 - the reconcile extra loads only for this command
        JobConfig,
        SparkSettings,
    )
    from reconcile.job import run  # noqa: PLC0415 - the reconcile extra loads only for this command
    from reconcile.report import write_outputs  # noqa: PLC0415 - the reconcile extra loads only here

    if data_dir is not None:
        commitlogs, outbox_source, ledgers = _up_inputs(
            data_dir, commitlogs, outbox_source, ledgers
        )
    _check_incremental_options(checkpoint, full, engine)
    if not commitlogs or outbox_source is None:
        missing = "--commitlog" if not commitlogs else "--outbox"
        raise click.UsageError(f"Missing option '{missing}' (or --data-dir of a `rocketbox up`)")
    try:
        outbox_path = _outbox_export(outbox_source, out_dir)
        config = JobConfig(
            commitlogs=commitlogs,
            outbox=outbox_path,
            out_dir=out_dir,
            ledgers=ledgers,
            engine=engine,
            in_process_records_max=in_process_records_max,
            checkpoint=checkpoint,
            full=full,
            settle_ms=settle_minutes * 60_000,
            spark=SparkSettings(
                master=master, shuffle_partitions=shuffle_partitions, conf=spark_conf
            ),
            bucket_ms=bucket_minutes * 60_000,
            drill_down_ids_max=drill_down_ids_max,
            extra={"outbox_source": redact(outbox_source)},
        )
        summary = run(config, progress=_progress())
        summary_path, report_path = write_outputs(summary, out_dir)
    except ReconcileError as e:
        click.echo(f"reconcile: {e}", err=True)
        raise SystemExit(e.exit_code) from e
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(summary_text(summary, summary_path, report_path))
    _exit_with_verdict(summary)


def _exit_with_verdict(summary: dict[str, Any]) -> None:
    """Exit with what the run found: no verdict over a log read in part, else lost or not."""
    unread = summary["unread"]
    if unread is not None:
        click.echo(f"reconcile: {unread['sentence']}", err=True)
        raise SystemExit(unread["exit_code"])
    if summary["verdict"] == "LOST":
        raise SystemExit(ExitCode.LOST)


def _check_incremental_options(checkpoint: Path | None, full: bool, engine: str) -> None:
    if full and checkpoint is None:
        raise click.UsageError("--full starts a checkpoint over: give --checkpoint DIR")
    if checkpoint is not None and engine == "spark":
        raise click.UsageError("--checkpoint runs in process: not with --engine spark")


def _up_inputs(
    data_dir: Path,
    commitlogs: tuple[Path, ...],
    outbox_source: str | None,
    ledgers: tuple[Path, ...],
) -> tuple[tuple[Path, ...], str, tuple[Path, ...]]:
    """The inputs ``rocketbox up --data-dir DATA_DIR`` keeps, where not given explicitly: every
    broker store (one broker's, or a cluster's masters and slaves); its ledger only when it
    exists (``up --ack-ledger ''`` keeps none)."""
    ledger = up_ack_ledger(data_dir)
    if not ledgers and ledger.is_file():
        ledgers = (ledger,)
    if not commitlogs:
        # None found: DATA_DIR/broker, which the job then reports missing (exit 3).
        commitlogs = tuple(up_broker_stores(data_dir)) or (up_broker_dir(data_dir),)
    return (
        commitlogs,
        outbox_source or f"rocksdb://{up_outbox_dir(data_dir)}",
        ledgers,
    )


def _check_reconcile_extra() -> None:
    """The job's libraries are pyproject's ``reconcile`` extra (PySpark and its kin, most of an
    install), which a sidecar-only install leaves out: say which is missing and how to add it."""
    missing = [name for name in RECONCILE_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise click.ClickException(
            f"rocketbox reconcile needs {', '.join(missing)} (the reconcile extra): "
            "pip install 'rocketbox[reconcile]' (make run installs it)"
        )


def _outbox_export(source: str, out_dir: Path) -> Path:
    """The export file to read: ``source`` itself, or an export of the outbox it names."""
    scheme, sep, _ = source.partition("://")
    if not sep or scheme.lower() not in BACKENDS:
        return Path(source)
    path = out_dir / "inputs" / OUTBOX_EXPORT_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Read-only: the sidecar may be running beside this command, holding a RocksDB outbox.
        with open_for_reading(source) as outbox:
            export_parquet(outbox, path)
    except (OutboxError, OSError) as e:
        raise InputError(f"cannot export the outbox {redact(source)}: {e}") from e
    return path


def summary_text(summary: dict[str, Any], summary_path: Path, report_path: Path) -> str:
    t = summary["totals"]
    c = summary["commitlog"]
    ledger = summary["ledgers"]
    outbox = summary["outbox"]
    lost = summary["verdict_lost"]
    verdict = f"{lost:,} LOST" if lost else "NOTHING LOST"
    if summary["unread"] is not None:
        verdict = "NO VERDICT, the commitlog was not read whole; counted in what was read"
    lines = [
        f"reconcile: {verdict}: {plural(t['messages'], 'message', grouped=True)}: "
        f"ok {t['ok']:,}, lost {t['lost']:,}, duplicated {t['duplicated']:,} "
        f"({plural(t['duplicate_copies'], 'extra copy', grouped=True)}), "
        f"recovered {t['recovered']:,} ({t['resend_pending']:,} still pending), "
        f"unexpected {t['unexpected']:,}, pending {t['pending']:,}, dead {t['dead']:,}, "
        f"unchecked {t['unchecked']:,}",
        f"commitlog: {plural(c['segments'], 'segment', grouped=True)}, "
        f"{plural(c['records'], 'record', grouped=True)} "
        f"({c['system_topic_records']:,} in system topics, {c['records_without_id']:,} without "
        f"id, {c['parked_records']:,} parked, {c['rollback_records']:,} rolled back)",
    ]
    lines += _incremental_text(summary)
    lines += _sources_text(c)
    several = len(c["sources"]) > 1
    lines += [
        f"commitlog: {s['where']}: scan of {s['segment']}{_in(s, several)} stopped at "
        f"phy_offset {s['phy_offset']:,}: {s['reason']}"
        for s in c["stops"]
    ]
    lines += [
        f"commitlog: no segment{_in(g, several)} holds phy_offsets {g['from_phy_offset']:,} "
        f"to {g['to_phy_offset']:,}"
        for g in c["gaps"]
    ]
    lines.append(
        f"ledgers: {plural(ledger['lines'], 'line', grouped=True)} "
        f"({ledger['malformed']:,} malformed); outbox: "
        f"{plural(outbox['entries'], 'entry', grouped=True)} ({outbox['pending']:,} pending, "
        f"{outbox['delivered']:,} delivered, {outbox['dead']:,} dead, "
        f"{outbox['malformed']:,} malformed)"
    )
    lines.append(
        f"written: {report_path}, {summary_path}, {summary['details']['messages']} "
        f"({summary['elapsed_s']} s {_engine_text(summary)})"
    )
    return "\n".join(lines)


def _engine_text(summary: dict[str, Any]) -> str:
    inputs = summary["inputs"]
    if summary["engine"] == "spark":
        return f"with Spark on {inputs['master']}"
    return "in process (no Spark: a small commitlog)" if "records_max" in inputs else "in process"


def _progress() -> Callable[[str], None] | None:
    """Progress lines on stderr while the job runs, when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None

    def say(line: str) -> None:
        click.echo(f"reconcile: {line}", err=True)

    return say


def _incremental_text(summary: dict[str, Any]) -> list[str]:
    """What an incremental run read and settled, and the count since the checkpoint began."""
    run = summary.get("incremental")
    if run is None:
        return []
    since = run["cumulative"]["totals"]
    return [
        f"incremental: run {run['run']:,}{' (started over)' if run['started_over'] else ''}: "
        f"{plural(run['new_records'], 'new record', grouped=True)}, "
        f"{plural(run['new_ledger_lines'], 'new ledger line', grouped=True)}; settled "
        f"{run['settled']['messages']:,} ({run['settled']['lost']:,} lost), open "
        f"{run['open']['messages']:,} ({run['open']['lost']:,} lost so far, provisionally: "
        f"they settle {run['settle_ms'] // 60_000} min after the watermark "
        f"{run['watermark'] or 'none yet'})",
        f"incremental: since the checkpoint began: "
        f"{plural(since['messages'], 'message', grouped=True)}: ok {since['ok']:,}, "
        f"lost {since['lost']:,}, duplicated {since['duplicated']:,}, recovered "
        f"{since['recovered']:,}, unexpected {since['unexpected']:,}, pending "
        f"{since['pending']:,}, dead {since['dead']:,}, unchecked {since['unchecked']:,}",
    ]


def _sources_text(c: dict[str, Any]) -> list[str]:
    """A line per commitlog directory and one for the slave copies folded, when several."""
    if len(c["sources"]) < 2:
        return []
    lines = [
        f"commitlog: {s['directory']}: {plural(s['records'], 'record', grouped=True)} "
        f"({s['kept_records']:,} kept) stored by {', '.join(s['store_hosts']) or 'no broker'}"
        for s in c["sources"]
    ]
    lines.append(
        f"commitlog: {plural(len(c['sources']), 'directory', grouped=True)} read; "
        f"{plural(c['slave_copies'], 'slave copy', grouped=True)} of a master's record "
        "counted once"
    )
    return lines


def _in(where: dict[str, Any], several: bool) -> str:
    return f" in {where['directory']}" if several else ""
