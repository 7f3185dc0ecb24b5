"""Chat transcripts: JSONL chats (role/content), HH-RLHF Human:/Assistant: pairs, per-turn CSV.

Three layouts are read into one model, ``Transcript`` (an id, turns, metadata):

* JSONL chat, one message per line ``{"role", "content", ...}`` (lines sharing a
  ``transcript``/``conversation``/``dialogue_id`` value form one transcript; without one, the
  file is one transcript), or one transcript per line ``{"messages": [{role, content}], ...}``;
* HH-RLHF pairs ``{"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": ...}``, each
  line two transcripts (``<line>/chosen``, ``<line>/rejected``), plain or gzip-compressed;
* CSV per-turn metrics: a ``turn`` column, optional ``transcript``, ``role``, ``content``, and
  numeric columns (beliefs, scores) kept per turn.

A malformed line never loses the file: it is reported as ``(line number, problem)`` in
``TranscriptFile.problems`` and the other lines are kept; only a file with nothing readable
raises ``FormatError``. Extra fields of a message (labels, notes, metrics) stay in
``Turn.meta`` and are written back by ``write_jsonl``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.io import Format, FormatError, extension_of
from engine.io.limits import loads_json, open_decompressed

GZIP_MAGIC = b"\x1f\x8b"
GROUP_KEYS = ("transcript", "conversation", "dialogue_id", "conversation_id")
HH_MARKER = re.compile(r"\n\n(Human|Assistant): ?")
HH_ROLES = {"Human": "user", "Assistant": "assistant"}
TEXT_COLUMNS = {"transcript", "role", "content", "label", "note"}
MAX_PROBLEMS_SHOWN = 20
BOOLEANS = {"true": 1.0, "false": 0.0}


@dataclass
class Turn:
    role: str
    content: str
    meta: dict = field(default_factory=dict)


@dataclass
class Transcript:
    id: str
    turns: list[Turn]
    meta: dict = field(default_factory=dict)


@dataclass
class TranscriptFile:
    path: str
    layout: str                                   # "chat", "hh", "metrics"
    transcripts: list[Transcript]
    problems: list[tuple[int, str]] = field(default_factory=list)


# -- reading -----------------------------------------------------------------------------------

def read_transcripts(path: str | Path, limit: int | None = None) -> TranscriptFile:
    """Every transcript of ``path`` (at most ``limit``); bad lines go to ``problems``."""
    path = Path(path)
    if extension_of(path) in (".csv", ".tsv"):
        return _read_metrics_csv(path)
    records, problems = _json_lines(path)
    if not records:
        raise FormatError(path, _nothing_readable(problems))
    first = records[0][1]
    if "chosen" in first or "rejected" in first:
        found = _from_hh(records, problems, limit)
        layout = "hh"
    else:
        found = _from_chat(records, problems, limit)
        layout = "chat"
    if not found:
        raise FormatError(path, _nothing_readable(problems))
    return TranscriptFile(str(path), layout, found, sorted(problems))


def _nothing_readable(problems: list[tuple[int, str]]) -> str:
    if not problems:
        return "no transcript in it"
    line, problem = problems[0]
    return f"no readable transcript (line {line}: {problem}; {len(problems)} bad lines)"


def _open_binary(path: Path) -> io.BufferedIOBase:
    """Plain or gzip bytes, within the decompression budgets (``engine.io.limits``)."""
    return open_decompressed(path)


def _open_text(path: Path) -> io.TextIOBase:
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8", errors="strict", newline="")


def _lines(path: Path) -> Iterator[tuple[int, str | None, str]]:
    """(number, text or None, problem) per line; a line that is not UTF-8 is a problem."""
    try:
        with _open_binary(path) as raw:
            for number, data in enumerate(raw, 1):
                try:
                    yield number, data.decode("utf-8"), ""
                except UnicodeDecodeError:
                    yield number, None, "not UTF-8 text"
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"cannot read it ({exc})") from None


def _json_lines(path: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    records, problems = [], []
    for number, line, problem in _lines(path):
        if line is None:
            problems.append((number, problem))
            continue
        if not line.strip():
            continue
        try:
            record = loads_json(line, path)
        except FormatError as exc:
            problems.append((number, exc.problem))
            continue
        if not isinstance(record, dict):
            problems.append((number, "expected a JSON object"))
            continue
        records.append((number, record))
    return records, problems


def parse_hh(text: str) -> list[Turn]:
    """``\\n\\nHuman: ...\\n\\nAssistant: ...`` as turns; ValueError when no marker is found."""
    pieces = HH_MARKER.split(text)
    if len(pieces) < 3:
        raise ValueError("no Human:/Assistant: turns")
    return [Turn(HH_ROLES[speaker], content.strip())
            for speaker, content in zip(pieces[1::2], pieces[2::2], strict=True)]


def _from_hh(records, problems, limit) -> list[Transcript]:
    found: list[Transcript] = []
    for number, record in records:
        for side in ("chosen", "rejected"):
            text = record.get(side)
            if text is None:
                continue
            if not isinstance(text, str):
                problems.append((number, f"{side!r} is not a string"))
                continue
            try:
                turns = parse_hh(text)
            except ValueError as exc:
                problems.append((number, f"{side}: {exc}"))
                continue
            found.append(Transcript(f"{number}/{side}", turns, {"line": number, "side": side}))
        if "chosen" not in record and "rejected" not in record:
            problems.append((number, "neither 'chosen' nor 'rejected'"))
        if limit is not None and len(found) >= limit:
            return found[:limit]
    return found


def _message(record: dict) -> Turn:
    role, content = record.get("role"), record.get("content")
    if not isinstance(role, str) or not isinstance(content, str):
        raise ValueError("a message needs string 'role' and 'content'")
    meta = {k: v for k, v in record.items() if k not in ("role", "content", *GROUP_KEYS)}
    return Turn(role, content, meta)


def _from_chat(records, problems, limit) -> list[Transcript]:
    grouped: dict[str, Transcript] = {}
    for number, record in records:
        if "messages" in record:
            messages = record["messages"]
            try:
                if not isinstance(messages, list):
                    raise ValueError("'messages' is not a list")
                turns = [_message(m if isinstance(m, dict) else {}) for m in messages]
            except ValueError as exc:
                problems.append((number, str(exc)))
                continue
            key = str(record.get("id", number))
            meta = {k: v for k, v in record.items() if k not in ("messages", "id")}
            grouped[key] = Transcript(key, turns, {"line": number, **meta})
        else:
            try:
                turn = _message(record)
            except ValueError as exc:
                problems.append((number, str(exc)))
                continue
            key = next((str(record[k]) for k in GROUP_KEYS if k in record), "0")
            grouped.setdefault(key, Transcript(key, [], {"line": number})).turns.append(turn)
        if limit is not None and len(grouped) > limit:
            grouped.popitem()
            break
    return list(grouped.values())


def _read_metrics_csv(path: Path) -> TranscriptFile:
    problems: list[tuple[int, str]] = []
    grouped: dict[str, Transcript] = {}
    try:
        with _open_text(path) as text:
            reader = csv.DictReader(text, delimiter="\t" if path.suffix == ".tsv" else ",")
            if not reader.fieldnames or "turn" not in reader.fieldnames:
                raise FormatError(path, "a per-turn metrics CSV needs a 'turn' column")
            for row in reader:
                number = reader.line_num
                try:
                    turn = _metrics_turn(row)
                except ValueError as exc:
                    problems.append((number, str(exc)))
                    continue
                key = row.get("transcript") or "0"
                grouped.setdefault(key, Transcript(key, [], {"line": number})).turns.append(turn)
    except (UnicodeDecodeError, csv.Error, OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"not a readable CSV ({exc})") from None
    if not grouped:
        raise FormatError(path, _nothing_readable(problems))
    return TranscriptFile(str(path), "metrics", list(grouped.values()), problems)


def _metrics_turn(row: dict) -> Turn:
    if None in row:
        raise ValueError("more cells than columns")
    try:
        meta: dict = {"turn": int(row["turn"])}
    except (TypeError, ValueError):
        raise ValueError(f"turn {row.get('turn')!r} is not an integer") from None
    for name, value in row.items():
        if name in TEXT_COLUMNS or name == "turn" or value in (None, ""):
            continue
        if value.lower() in BOOLEANS:
            meta[name] = BOOLEANS[value.lower()]
            continue
        try:
            meta[name] = float(value)
        except ValueError:
            raise ValueError(f"{name} {value!r} is not a number") from None
    for name in ("label", "note"):
        if row.get(name):
            meta[name] = row[name]
    return Turn(row.get("role") or "", row.get("content") or "", meta)


# -- writing -----------------------------------------------------------------------------------

def transcript_lines(transcripts: list[Transcript]) -> Iterator[dict]:
    """One JSON object per message: ``{transcript, turn, role, content, **meta}``."""
    for transcript in transcripts:
        for index, turn in enumerate(transcript.turns):
            yield {"transcript": transcript.id, "turn": index, "role": turn.role,
                   "content": turn.content, **{k: v for k, v in turn.meta.items()
                                               if k != "turn"}}


def write_jsonl(path: str | Path, transcripts: list[Transcript]) -> Path:
    """Atomically; read back by ``read_transcripts`` (grouped by ``transcript``)."""
    from engine.atomic import write_atomic

    text = "".join(json.dumps(_jsonable(line), ensure_ascii=False) + "\n"
                   for line in transcript_lines(transcripts))
    return _write(path, text, write_atomic)


def write_metrics_csv(path: str | Path, columns: list[str], rows: list[list]) -> Path:
    from engine.atomic import write_atomic

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if _is_nan(v) else v for v in row] for row in rows])
    return _write(path, buffer.getvalue(), write_atomic)


def _write(path: str | Path, text: str, write_atomic) -> Path:
    target = Path(path)
    data = text.encode("utf-8")
    write_atomic(target, lambda handle: handle.write(data))
    return target


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return None if _is_nan(value) else value


# -- the registry ------------------------------------------------------------------------------

def _decompressed_head(path: Path, head: bytes) -> bytes:
    if not head.startswith(GZIP_MAGIC):
        return head
    try:
        return zlib.decompressobj(wbits=31).decompress(head, 4096)
    except zlib.error:
        return b""


def _sniff(path: Path, head: bytes) -> int:
    """Transcripts go to the dialogue panel, whichever way the file is opened: a JSON Lines
    file whose records are chats (``messages`` of role/content turns, per-turn role/content
    records, HH-RLHF ``chosen`` pairs) scores 3, above the generic ``jsonl`` table's 2; per-turn
    CSVs whose header names turns score 2, above the CSV table's 1."""
    ext = extension_of(path)
    text = _decompressed_head(path, head)
    chat_like = text.lstrip().startswith(b"{") and (
        (b'"chosen"' in text and b"Human:" in text)
        or (b'"role"' in text and b'"content"' in text))
    if ext in (".jsonl.gz", ".json.gz", ".ndjson.gz"):
        return 2 if chat_like else 0
    if ext in (".jsonl", ".ndjson"):
        return 3 if chat_like else 0
    if ext == ".csv":
        header = text.split(b"\n", 1)[0].decode("utf-8", "replace").strip().split(",")
        return 2 if "turn" in header and ("role" in header or "content" in header) else 0
    return 0


def _inspect(path: Path) -> dict:
    found = read_transcripts(path)
    roles: dict[str, int] = {}
    for transcript in found.transcripts:
        for turn in transcript.turns:
            roles[turn.role] = roles.get(turn.role, 0) + 1
    return {"summary": {"transcripts": len(found.transcripts),
                        "turns": sum(roles.values()), "malformed_lines": len(found.problems)},
            "metadata": {"layout": found.layout, "roles": roles,
                         "problems": [f"line {n}: {p}" for n, p in
                                      found.problems[:MAX_PROBLEMS_SHOWN]]}}


FORMATS = [
    Format("transcripts", "chat transcripts (JSONL chats, HH-RLHF pairs, per-turn CSV)",
           (".jsonl", ".jsonl.gz", ".csv"), _sniff, _inspect, panel="dialogue",
           kinds=("transcript",)),
]
