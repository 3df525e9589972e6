"""JSON-lines inputs, possibly compressed, read block by block.

Parsed with the json module so that each needed value is kept as text, as written (a number's
literal, a string's content; true/false; an array or object as compact JSON): pyarrow's reader
infers types from the values, so one unreleased 2.5 would turn every released 1 into 1.0, and one
string among numbers would fail the run. A value column is converted from that text to its
number type (a JSON number, or a string holding one; null or a missing field is a null).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dpselect.ingest.rows import import_pyarrow
from dpselect.io._source import BatchSource, InputError, open_text, to_numbers

__all__ = ["jsonl_source"]


def jsonl_source(path: str, columns: Sequence[str], block_size: int, value_types: dict[str, Any]) -> BatchSource:
    """The needed columns of a JSON-lines file, one batch per block of whole lines."""
    pa = import_pyarrow()
    size = os.path.getsize(path)
    stream, raw = open_text(path)
    schema = pa.schema([pa.field(c, value_types.get(c, pa.string())) for c in columns])
    position = [0]
    # One decoder for every line (json.loads with hooks would build one per call).
    decode = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str).decode

    def batches() -> Iterator[Any]:
        number = 1  # of the first line not yet parsed
        try:
            for data in _line_blocks(stream, raw, block_size, position):
                text = _utf8(data, number, path)
                first = number
                number += data.count(b"\n") + 1
                objs, lines = _parse(text, first, decode, path) if text else ([], [])
                if objs:
                    # One batch per block, holding only the needed columns: the parsed
                    # objects (every field of every line) are dropped at once.
                    yield pa.record_batch([_column(objs, lines, c, first, value_types, path) for c in columns],
                                          schema=schema)
        finally:
            stream.close()
            if raw is not stream:
                raw.close()

    return BatchSource(batches(), schema, lambda: min(1.0, position[0] / size) if size else None)


def _line_blocks(stream: Any, raw: Any, block_size: int, position: list[int]) -> Iterator[bytes]:
    """The decompressed input in blocks of whole lines (line breaks between them dropped), the
    last block being what follows the last line break (possibly empty). ``position[0]`` is the
    file offset after each read, for the progress bar."""
    tail = b""
    while True:
        chunk = bytes(stream.read(block_size))
        try:
            position[0] = raw.tell()
        except (OSError, ValueError):
            pass
        data = tail + chunk
        if not chunk:
            yield data
            return
        cut = data.rfind(b"\n")  # parse whole lines only; the tail waits for the next block
        if cut < 0:
            tail = data
            continue
        data, tail = data[:cut], data[cut + 1:]
        yield data


def _utf8(data: bytes, number: int, path: str) -> str:
    """A block's text, or InputError naming the line (``number`` is the block's first)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = number + data[: exc.start].count(b"\n")
        raise InputError(f"{path!r} line {bad}: not UTF-8 text") from exc


def _parse(text: str, first: int, decode: Callable[[str], Any], path: str
           ) -> tuple[list[dict[str, Any]], list[str]]:
    """(the objects, their lines) of a block's text whose first line is number ``first``; empty
    lines are skipped, anything else that is not a JSON object is an InputError naming its line."""
    objs: list[dict[str, Any]] = []
    kept: list[str] = []
    for offset, line in enumerate(text.split("\n")):
        try:
            obj = decode(line)
        except ValueError as exc:
            if not line.strip():
                continue  # an empty line
            raise InputError(f"{path!r} line {first + offset}: not valid JSON ({exc})") from exc
        if type(obj) is not dict:
            raise InputError(f"{path!r} line {first + offset}: expected a JSON object, got {type(obj).__name__}")
        objs.append(obj)
        kept.append(line)
    return objs, kept


def _as_text(value: Any, line: str, name: str) -> str | None:
    """A value that is not a string as text: true/false, or an array or object as compact JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    # An array or object: its compact JSON text (parsed again without the number hooks, so
    # numbers inside it are written as numbers).
    return json.dumps(json.loads(line)[name], separators=(",", ":"), ensure_ascii=False)


def _column(objs: list[dict[str, Any]], lines: list[str], name: str, first: int, value_types: dict[str, Any],
            path: str) -> Any:
    """Column ``name`` of a block's objects: text, or the number type asked for a value column."""
    pa = import_pyarrow()
    values = [obj.get(name) for obj in objs]
    try:
        text = pa.array(values, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # booleans, arrays or objects among them
        text = pa.array([_as_text(v, line, name) for v, line in zip(values, lines)], pa.string())
    if name not in value_types:
        return text
    return to_numbers(text, value_types[name], name, path,
                      lambda i: f"on line {first + i} (or after it, past empty lines)")
