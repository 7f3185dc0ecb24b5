"""The workspace: a folder with an SQLite index (WAL) and one folder per run.

Layout (CONTRACT.md, "Workspace")::

    studio.sqlite            runs, artifacts, datasets, edits (keyed by document identity),
                             documents (what each identity's file was), file_hashes (a cache)
    runs/<run_id>/params.json   resolved parameters, seed, versions, where it ran
                  metrics.jsonl  log.txt  result.json  artifacts/  checkpoints/<name>/
    cache/<hash>/            pretrained bases shared by runs with the same config
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.atomic import read_jsonl, write_json_atomic

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    method TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    cluster TEXT NOT NULL DEFAULT 'local',
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    notes TEXT NOT NULL DEFAULT '',
    owner_pid INTEGER
);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS datasets (
    id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    format TEXT NOT NULL,
    added REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS edits (
    document TEXT NOT NULL,
    seq INTEGER NOT NULL,
    command TEXT NOT NULL,
    saved REAL NOT NULL,
    PRIMARY KEY (document, seq)
);
CREATE TABLE IF NOT EXISTS documents (
    identity TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    opened_hash TEXT NOT NULL,
    last_hash TEXT NOT NULL,
    saved REAL NOT NULL,
    aside INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    hash TEXT NOT NULL
);
"""


def default_workspace() -> Path:
    """``$STUDIO_WORKSPACE``, else a folder under the user's data directory."""
    if os.environ.get("STUDIO_WORKSPACE"):
        return Path(os.environ["STUDIO_WORKSPACE"]).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("studio", appauthor=False)) / "workspace"


# A temp file written to this recently may be a write in progress (its writer's row may not
# be in the index yet): start-up cleaning leaves it. Writes touch their file as they go.
TEMP_FILE_GRACE_S = 600.0


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class Workspace:
    """The index and run folders. Safe for several processes (SQLite WAL, atomic files)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_workspace()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "runs").mkdir(exist_ok=True)
        self.db_path = self.root / "studio.sqlite"
        self._db: sqlite3.Connection | None = None
        self._db_pid = 0
        self._lock = threading.RLock()
        with self._connect() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self):
        """One transaction on this process's connection (kept open: opening costs fsyncs)."""
        db = self._connection()
        with self._lock, db:
            yield db

    def _connection(self) -> sqlite3.Connection:
        if self._db is None or self._db_pid != os.getpid():
            db = sqlite3.connect(self.db_path, timeout=30, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: safe against crashes
            db.execute("PRAGMA foreign_keys=ON")
            db.row_factory = sqlite3.Row
            self._db, self._db_pid = db, os.getpid()
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def cache_root(self) -> Path:
        return self.root / "cache"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    # -- runs --------------------------------------------------------------------------------
    def create_run(self, method: str, params: dict, seed: int, cluster: str = "local",
                   provenance: dict | None = None) -> str:
        run_id = new_run_id()
        folder = self.run_dir(run_id)
        (folder / "artifacts").mkdir(parents=True)
        record = {"run_id": run_id, "method": method, "params": params, "seed": seed,
                  "cluster": cluster, **(provenance or {})}
        write_json_atomic(folder / "params.json", record)
        with self._connect() as db:
            db.execute(
                "INSERT INTO runs (id, method, state, params, seed, cluster, created, owner_pid)"
                " VALUES (?, ?, 'queued', ?, ?, ?, ?, ?)",
                (run_id, method, json.dumps(params), seed, cluster, time.time(), os.getpid()))
        return run_id

    def set_state(self, run_id: str, state: str, reason: str = "") -> None:
        now = time.time()
        with self._connect() as db:
            if state == "running":
                db.execute("UPDATE runs SET state=?, reason=?, started=? WHERE id=?",
                           (state, reason, now, run_id))
            elif state in ("succeeded", "failed", "cancelled"):
                db.execute("UPDATE runs SET state=?, reason=?, ended=? WHERE id=?",
                           (state, reason, now, run_id))
            else:
                db.execute("UPDATE runs SET state=?, reason=? WHERE id=?", (state, reason, run_id))

    def add_artifact(self, run_id: str, name: str, kind: str, path: str, meta: dict) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?, ?)",
                       (run_id, name, kind, path, json.dumps(meta)))

    def set_notes(self, run_id: str, notes: str) -> None:
        with self._connect() as db:
            db.execute("UPDATE runs SET notes=? WHERE id=?", (notes, run_id))

    def write_result(self, run_id: str, result: dict) -> None:
        write_json_atomic(self.run_dir(run_id) / "result.json", result)

    def _outputs(self, run_id: str) -> dict:
        """The outputs a finished run reported ({} before it finished, or if unreadable)."""
        try:
            result = json.loads((self.run_dir(run_id) / "result.json").read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        outputs = result.get("outputs") if isinstance(result, dict) else None
        return outputs if isinstance(outputs, dict) else {}

    def fail_orphans(self, reason: str) -> list[str]:
        """Unfinished runs whose engine process is gone are failed with ``reason``."""
        with self._connect() as db:
            rows = db.execute("SELECT id, owner_pid FROM runs WHERE state IN "
                              "('queued', 'running', 'cancelling')").fetchall()
        ids = [row["id"] for row in rows if not _alive(row["owner_pid"])]
        for run_id in ids:
            self.set_state(run_id, "failed", reason)
        return ids

    def finish_orphans(self, reason: str) -> list[str]:
        """``fail_orphans``, and each such run gets the ``result.json`` its dead engine never
        wrote (a run folder always ends with one)."""
        ids = self.fail_orphans(reason)
        for run_id in ids:
            if not (self.run_dir(run_id) / "result.json").exists():
                record = self.run(run_id)
                self.write_result(run_id, {
                    "run_id": run_id, "method": record["method"], "state": "failed",
                    "reason": reason, "traceback": "", "outputs": {},
                    "elapsed_s": (record["ended"] or 0) - (record["started"] or
                                                           record["created"])})
        return ids

    def remove_dead_temp_files(self) -> list[Path]:
        """Temp files (``.<name>.*.tmp``, engine.atomic) that a killed write left in the
        folders of finished runs, and in the cache when over an hour old. A live run's writes
        are left alone, and so is any temp file written to in the last ``TEMP_FILE_GRACE_S``:
        ``create_run`` of another process writes ``params.json`` before its run has a row,
        so a run folder unknown to the index may be one being made right now."""
        with self._connect() as db:
            live = {row["id"] for row in db.execute(
                "SELECT id FROM runs WHERE state IN ('queued', 'running', 'cancelling')")}
        removed = []
        settled = time.time() - TEMP_FILE_GRACE_S
        for tmp in (self.root / "runs").glob("*/**/.*.tmp"):
            run_id = tmp.relative_to(self.root / "runs").parts[0]
            with contextlib.suppress(OSError):  # gone already: its write finished
                if run_id not in live and tmp.stat().st_mtime < settled:
                    tmp.unlink()
                    removed.append(tmp)
        hour_ago = time.time() - 3600
        for tmp in self.cache_root.glob("**/.*.tmp"):
            with contextlib.suppress(OSError):
                if tmp.stat().st_mtime < hour_ago:
                    tmp.unlink()
                    removed.append(tmp)
        return removed

    def delete_run(self, run_id: str) -> None:
        import shutil

        with self._connect() as db:
            db.execute("DELETE FROM runs WHERE id=?", (run_id,))
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def runs(self, method: str | None = None, state: str | None = None,
             limit: int | None = None) -> list[dict]:
        query, args = "SELECT * FROM runs WHERE 1=1", []
        if method:
            query += " AND (method = ? OR method LIKE ?)"
            args += [method, method + ".%"]
        if state:
            query += " AND state = ?"
            args.append(state)
        query += " ORDER BY created DESC"
        if limit:
            query += " LIMIT ?"
            args.append(int(limit))
        with self._connect() as db:
            rows = db.execute(query, args).fetchall()
        return [self._run_record(db_row) for db_row in rows]

    def run(self, run_id: str) -> dict:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id!r} in workspace {self.root}")
        return self._run_record(row)

    def _run_record(self, row: sqlite3.Row) -> dict:
        record: dict[str, Any] = dict(row)
        record["params"] = json.loads(record["params"])
        record["run_dir"] = str(self.run_dir(record["id"]))
        with self._connect() as db:
            artifacts = db.execute("SELECT name, kind, path, meta FROM artifacts WHERE run_id=?",
                                   (record["id"],)).fetchall()
        record["artifacts"] = [{**dict(a), "meta": json.loads(a["meta"])} for a in artifacts]
        return record

    def metrics(self, run_id: str) -> list[dict]:
        return read_jsonl(self.run_dir(run_id) / "metrics.jsonl")

    def resolve_ref(self, ref: str) -> Path:
        """``run:<id>/<artifact or output name, or relative path>`` or a plain path -> a file
        path. Output names (``checkpoint``) come from the run's result.json."""
        if ref.startswith("run:"):
            run_id, _, rest = ref[4:].partition("/")
            record = self.run(run_id)
            for artifact in record["artifacts"]:
                if artifact["name"] == rest:
                    return self.run_dir(run_id) / artifact["path"]
            output = self._outputs(run_id).get(rest)
            if isinstance(output, str):
                return self.run_dir(run_id) / output
            return self.run_dir(run_id) / rest
        if ref.startswith("dataset:"):
            with self._connect() as db:
                row = db.execute("SELECT path FROM datasets WHERE id=?", (ref[8:],)).fetchone()
            if row is None:
                raise KeyError(f"no dataset {ref[8:]!r} in workspace {self.root}")
            return Path(row["path"])
        return Path(ref).expanduser()

    def integrity_ok(self) -> bool:
        with self._connect() as db:
            return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # -- edits (the GUI's autosave) ------------------------------------------------------------
    def save_edits(self, document: str, commands: list[dict]) -> None:
        """Replace a document's saved edit stack in one transaction."""
        now = time.time()
        with self._connect() as db:
            db.execute("DELETE FROM edits WHERE document=?", (document,))
            db.executemany("INSERT INTO edits VALUES (?, ?, ?, ?)",
                           [(document, i, json.dumps(c), now) for i, c in enumerate(commands)])

    def load_edits(self, document: str) -> list[dict]:
        with self._connect() as db:
            rows = db.execute("SELECT command FROM edits WHERE document=? ORDER BY seq",
                              (document,)).fetchall()
        return [json.loads(row["command"]) for row in rows]

    # -- documents (which file content an identity's edits were made on) ----------------------
    def put_document(self, identity: str, kind: str, path: str, opened_hash: str,
                     last_hash: str) -> None:
        with self._connect() as db:
            db.execute("INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, 0) "
                       "ON CONFLICT(identity) DO UPDATE SET path=excluded.path, "
                       "last_hash=excluded.last_hash, saved=excluded.saved, aside=0",
                       (identity, kind, path, opened_hash, last_hash, time.time()))

    def documents(self, kind: str) -> list[dict]:
        """The kind's document records with saved edits, newest first (``aside`` ones too)."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT d.*, (SELECT COUNT(*) FROM edits e WHERE e.document=d.identity) AS edits "
                "FROM documents d WHERE kind=? ORDER BY saved DESC", (kind,)).fetchall()
        return [dict(row) for row in rows if row["edits"]]

    def set_aside(self, identity: str) -> None:
        with self._connect() as db:
            db.execute("UPDATE documents SET aside=1 WHERE identity=?", (identity,))

    def rename_edits(self, old: str, new: str) -> None:
        """Move saved edits to another key (replayed onto a changed file: they now belong to
        the new content), in one transaction."""
        with self._connect() as db:
            db.execute("DELETE FROM edits WHERE document=?", (new,))
            db.execute("UPDATE edits SET document=? WHERE document=?", (new, old))
            db.execute("DELETE FROM documents WHERE identity=?", (old,))

    def drop_document(self, identity: str) -> None:
        """Discard a document's saved edits and its record."""
        with self._connect() as db:
            db.execute("DELETE FROM edits WHERE document=?", (identity,))
            db.execute("DELETE FROM documents WHERE identity=?", (identity,))

    def cached_hash(self, path: str, size: int, mtime_ns: int) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT hash FROM file_hashes WHERE path=? AND size=? AND "
                             "mtime_ns=?", (path, size, mtime_ns)).fetchone()
        return row[0] if row else None

    def cache_hash(self, path: str, size: int, mtime_ns: int, digest: str) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO file_hashes VALUES (?, ?, ?, ?)",
                       (path, size, mtime_ns, digest))


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
