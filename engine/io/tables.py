"""Tables: CSV/TSV, Parquet and JSON Lines, read into pyarrow tables (no pandas needed)."""

from __future__ import annotations

from pathlib import Path

from engine.io import Format, FormatError, by_extension, extension_of
from engine.io.limits import loads_json

PARQUET_MAGIC = b"PAR1"
MAX_PROBLEMS_SHOWN = 20


def read_table(path: str | Path, problems: list[str] | None = None):
    """A ``pyarrow.Table``; ``FormatError`` names the file, and the line where one is known.
    A JSON Lines line that is not a JSON object is skipped and listed in ``problems``
    (``line N: what``); only a file with no readable line is refused."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    path = Path(path)
    ext = extension_of(path)
    try:
        if ext == ".parquet" or _starts_with(path, PARQUET_MAGIC):
            return pq.read_table(path)
        if ext in (".jsonl", ".ndjson"):
            return pa.Table.from_pylist(read_jsonl_records(path, problems))
        delimiter = "\t" if ext in (".tsv", ".tab") else ","
        return pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter))
    except FormatError:
        raise
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise FormatError(path, f"not a readable table ({exc})") from None


def _starts_with(path: Path, magic: bytes) -> bool:
    with open(path, "rb") as handle:
        return handle.read(len(magic)) == magic


def read_jsonl_records(path: Path, problems: list[str] | None = None) -> list[dict]:
    """Every JSON object line; bad lines are skipped into ``problems`` (a list kept by the
    caller, or a local one), and a file with bad lines and no good one is a ``FormatError``
    naming the first."""
    bad: list[str] = [] if problems is None else problems
    records = []
    with open(path, encoding="utf-8", errors="strict") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = loads_json(line, path, f"line {number}")
            except FormatError as exc:
                bad.append(exc.problem)
                continue
            if not isinstance(record, dict):
                bad.append(f"line {number}: expected a JSON object")
                continue
            records.append(record)
    if not records and bad:
        raise FormatError(path, f"no readable line ({bad[0]}; {len(bad)} bad lines)")
    return records


def _sniff_parquet(path: Path, head: bytes) -> int:
    return 2 if head.startswith(PARQUET_MAGIC) else 0


def _sniff_jsonl(path: Path, head: bytes) -> int:
    if extension_of(path) not in (".jsonl", ".ndjson"):
        return 0
    return 2 if head.lstrip().startswith(b"{") else 1


def _inspect_table(path: Path) -> dict:
    problems: list[str] = []
    try:
        table = read_table(path, problems)
    except UnicodeDecodeError:
        raise FormatError(path, "not text (binary content in a text table)") from None
    summary = {"rows": table.num_rows, "columns": table.num_columns}
    if problems:
        summary["skipped"] = len(problems)
    return {"summary": summary,
            "metadata": {"schema": {f.name: str(f.type) for f in table.schema},
                         "problems": problems[:MAX_PROBLEMS_SHOWN]}}


FORMATS = [
    Format("csv", "CSV/TSV table", (".csv", ".tsv", ".tab"),
           by_extension(".csv", ".tsv", ".tab"), _inspect_table, kinds=("table",)),
    Format("parquet", "Parquet table", (".parquet",), _sniff_parquet, _inspect_table,
           kinds=("table",)),
    Format("jsonl", "JSON Lines table", (".jsonl", ".ndjson"), _sniff_jsonl, _inspect_table,
           kinds=("table",)),
]
