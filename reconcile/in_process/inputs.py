"""The ledgers and the outbox export as Arrow tables, read in this process.

Arrow's JSON reader parses whole chunks of lines in C. It has no permissive mode, so a chunk it
refuses (a torn line, a field of the wrong type) is read again line by line in Python, each line
held to the rules Spark's permissive reader applies in the Spark engine (input_formats.py): a
line that is not a JSON object, or has a field of the wrong type, is malformed, its text kept for
the drill-down; the fields that did read are kept (Spark's partial results), the others null.
Only the columns the job reads are parsed, as Spark prunes the others: a ledger line's
``durable`` of the wrong type harms nothing. Only the refused chunk pays Python's price.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from reconcile.errors import InputError
from reconcile.input_formats import (
    ACK_STATES,
    ENTRY_STATES,
    LEDGER_ARROW_SCHEMA,
    MALFORMED_TEXT_CHARS_MAX,
    OUTBOX_ARROW_SCHEMA,
    OUTBOX_COLUMN_NAMES,
    export_kind,
)

# Bytes of JSON lines parsed at a time: a chunk refused is read again line by line.
JSON_CHUNK_BYTES = 4 * 1024 * 1024
# Bytes read at a time looking for a line's end.
_LINE_END_SEARCH_BYTES = 64 * 1024
_INT_BITS = {pa.int32(): 32, pa.int64(): 64}
# The ledger columns the classification reads.
_LEDGER_READ = pa.schema(
    [LEDGER_ARROW_SCHEMA.field(c) for c in ("message_id", "topic", "state", "time_ms", "cause")]
)


def read_ledgers(
    paths: tuple[Path, ...], byte_ranges: tuple[tuple[int, int | None], ...] | None = None
) -> pa.Table:
    """Every line of every ledger (or of its byte range: an incremental run reads what is new):
    the columns the classification reads, ``malformed``, ``line`` (a malformed line's text,
    cut) and ``source`` (the file, as a URI)."""
    ranges = byte_ranges or tuple((0, None) for _ in paths)
    tables = [
        _with_source(read_json_lines(p, _LEDGER_READ, start, end), p)
        for p, (start, end) in zip(paths, ranges, strict=True)
    ]
    raw = pa.concat_tables(tables)
    bad = pc.or_kleene(pc.is_valid(raw["line"]), _missing(raw["message_id"]))
    bad = pc.or_kleene(bad, pc.is_null(raw["topic"]))
    bad = pc.or_kleene(bad, pc.is_null(raw["time_ms"]))
    bad = pc.or_kleene(bad, pc.invert(_is_in(raw["state"], ACK_STATES)))
    columns = ["message_id", "topic", "state", "time_ms", "cause"]
    return pa.table(
        {
            **{c: raw[c] for c in columns},
            "malformed": pc.fill_null(bad, True),
            "line": raw["line"],
            "source": raw["source"],
        }
    )


def read_outbox(path: Path) -> pa.Table:
    """Every exported entry: OUTBOX_COLUMN_NAMES and ``malformed``."""
    if export_kind(path) == "jsonl":
        raw = read_json_lines(path, OUTBOX_ARROW_SCHEMA)
        unparsed = pc.is_valid(raw["line"])
    else:
        try:
            raw = pq.read_table(path)
        except (OSError, pa.ArrowException) as e:
            raise InputError(f"outbox export {path} cannot be read as Parquet: {e}") from e
        missing = [name for name in OUTBOX_COLUMN_NAMES if name not in raw.column_names]
        if missing:
            raise InputError(f"outbox export {path} lacks the columns {missing}")
        raw = raw.select(list(OUTBOX_COLUMN_NAMES)).cast(OUTBOX_ARROW_SCHEMA)
        unparsed = pa.chunked_array([pa.array([False] * raw.num_rows, pa.bool_())])
    bad = pc.or_kleene(unparsed, _missing(raw["message_id"]))
    bad = pc.or_kleene(bad, pc.invert(_is_in(raw["state"], ENTRY_STATES)))
    return pa.table(
        {**{c: raw[c] for c in OUTBOX_COLUMN_NAMES}, "malformed": pc.fill_null(bad, True)}
    )


def read_json_lines(
    path: Path, schema: pa.Schema, start_byte: int = 0, end_byte: int | None = None
) -> pa.Table:
    """The lines of ``path`` as ``schema``'s columns and ``line`` (null, or the text of a line
    that could not be read as the schema, cut to MALFORMED_TEXT_CHARS_MAX). With a byte range,
    the lines from ``start_byte`` (a line's start) to ``end_byte`` (a line's end, or the file's)."""
    try:
        with path.open("rb") as f:
            f.seek(start_byte)
            limit = None if end_byte is None else end_byte - start_byte
            tables = [_parse_chunk(chunk, schema) for chunk in _line_chunks(f, limit)]
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}") from e
    if not tables:
        return _parse_lines([], schema)
    return pa.concat_tables(tables)


def line_end_after(f: BinaryIO, at: int, size: int) -> int:
    """The position just after the first line end at or after ``at - 1`` (so ``at`` itself when
    a line ends just before it), or ``size``: where the line holding ``at - 1`` ends."""
    f.seek(at - 1)
    pos = at - 1
    while pos < size:
        block = f.read(_LINE_END_SEARCH_BYTES)
        if not block:
            break
        found = block.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(block)
    return size


def _line_chunks(f: io.BufferedReader, limit: int | None) -> Iterator[bytes]:
    """The file from where it stands, ``limit`` bytes of it (or all), in chunks of about
    JSON_CHUNK_BYTES that end at a line's end (or the range's)."""
    rest = b""
    left = limit
    while block := f.read(JSON_CHUNK_BYTES if left is None else min(JSON_CHUNK_BYTES, left)):
        if left is not None:
            left -= len(block)
        block = rest + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            rest = block
            continue
        rest = block[cut:]
        yield block[:cut]
    if rest:
        yield rest


def _parse_chunk(chunk: bytes, schema: pa.Schema) -> pa.Table:
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(io.BytesIO(chunk), parse_options=options)
    except pa.ArrowInvalid:
        return _parse_lines(chunk.splitlines(), schema)
    table = table.select(schema.names).cast(schema)
    return table.append_column("line", pa.nulls(table.num_rows, pa.string()))


def _parse_lines(lines: list[bytes], schema: pa.Schema) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for raw in lines:
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            continue  # as Spark's reader: blank lines are no records
        row, whole = _parse_line(text, schema)
        if not whole:
            row["line"] = text[:MALFORMED_TEXT_CHARS_MAX]
        rows.append(row)
    full = pa.schema([*schema, pa.field("line", pa.string())])
    return pa.Table.from_pylist(rows, schema=full)


def _parse_line(text: str, schema: pa.Schema) -> tuple[dict[str, Any], bool]:
    """The fields of a line that read as the schema's types, and whether all of them did (and
    the line is a JSON object at all)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}, False
    if not isinstance(value, dict):
        return {}, False
    row: dict[str, Any] = {}
    whole = True
    for field in schema:
        item = value.get(field.name)
        if item is None:
            continue
        typed = _typed(item, field.type)
        if typed is None:
            whole = False
        else:
            row[field.name] = typed
    return row, whole


def _typed(item: Any, kind: pa.DataType) -> Any:
    """``item`` as Spark's JSON reader takes it for ``kind``: a string field takes any value
    (a number or object as its JSON text), an integer only an integer in range, a boolean only
    true or false. None when it cannot."""
    if pa.types.is_string(kind):
        return item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
    if pa.types.is_boolean(kind):
        return item if isinstance(item, bool) else None
    if isinstance(item, bool) or not isinstance(item, int):
        return None
    bits = _INT_BITS[kind]
    return item if -(2 ** (bits - 1)) <= item < 2 ** (bits - 1) else None


def _with_source(table: pa.Table, path: Path) -> pa.Table:
    # As Spark names a file read (Hadoop's URI of it): file:/dir/name.
    source = path.resolve().as_uri().replace("file:///", "file:/", 1)
    return table.append_column("source", pa.repeat(pa.scalar(source, pa.string()), table.num_rows))


def _missing(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(pc.utf8_length(column), 0), True)


def _is_in(column: pa.ChunkedArray, values: tuple[str, ...]) -> pa.ChunkedArray:
    return pc.fill_null(pc.is_in(column, value_set=pa.array(values)), False)
