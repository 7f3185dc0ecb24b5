"""NIfTI-1/2 volumes (.nii, .nii.gz) and BIDS folders, read a frame at a time.

A 1-2 GB fMRI run must open at once and scrub smoothly, so nothing here loads a whole file:
``.nii`` is memory-mapped, and ``.nii.gz`` is read through ``indexed_gzip`` whose full seek
index is built in a background thread (frames near the start are served at once). Once the
index is ready, a frame is inflated by ``PARALLEL_READERS`` handles at once, each from the
seek point nearest its share (inflating 3.6 MB costs ~27 ms of one core here, so two halves
take ~15 ms); with a cache folder the index is saved there and reused by the next opening.
Large files are instead decompressed once into that folder and memory-mapped. Every check
that can be made from the header and the file's size is made on opening, so a damaged file
fails with a ``FormatError`` naming it before anything is shown. Torch-free: the GUI reads
the same volumes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.io import Format, FormatError, extension_of
from engine.io.limits import FRAME_BYTES, check_allocation, read_json

NIFTI_EXTENSIONS = (".nii", ".nii.gz")
HEADER_BYTES = {348: 1, 540: 2}       # sizeof_hdr -> NIfTI version
DEFLATE_MAX_RATIO = 1032              # deflate cannot expand data more than this
INDEX_SPACING_BYTES = 1024 * 1024  # indexed_gzip seek points: ~32 KiB of memory each
PARALLEL_READERS = max(1, min(2, os.cpu_count() or 1))  # handles a large read is split over
PARALLEL_MIN_BYTES = 1 << 20          # smaller reads stay on one handle
FRAME_CACHE = 4                       # decoded frames kept (three views share one frame)
FRAME_CACHE_BYTES = 256 * 1024 * 1024  # ...unless they are large: then only the newest
CHECK_CHUNK_BYTES = 16 * 1024 * 1024   # inspect checks a large frame this much at a time
SUPPORTED_KINDS = "iuf"               # integers and floats; complex and RGB are refused
GZ_TRAILING_SLACK_BYTES = 1 << 20  # bytes a gzip stream may hold past the image (rare)
CONVERT_MIN_BYTES = 256 * 1024 * 1024  # smaller .nii.gz files are indexed, not converted
TIME_UNIT_S = {"sec": 1.0, "msec": 1e-3, "usec": 1e-6, "unknown": 1.0}
IMPLAUSIBLE_TR_S = 100.0               # no fMRI run repeats this slowly: such a TR is in ms


def _is_gz(path: Path) -> bool:
    return extension_of(path) == ".nii.gz"


def _read_header_block(path: Path) -> bytes:
    """The first 540 bytes, decompressed when the file is gzipped."""
    try:
        if _is_gz(path):
            with gzip.open(path, "rb") as handle:
                return handle.read(540)
        with open(path, "rb") as handle:
            return handle.read(540)
    except (OSError, EOFError, zlib.error) as exc:
        raise FormatError(path, f"not a readable gzip file ({exc})") from None


def _parse_header(path: Path, block: bytes):
    """A nibabel header from raw bytes, after the checks nibabel leaves to the caller."""
    import nibabel as nib

    if len(block) < 348:
        raise FormatError(path, f"truncated: {len(block)} bytes, a NIfTI header needs 348")
    sizes = {struct.unpack("<i", block[:4])[0], struct.unpack(">i", block[:4])[0]}
    version = next((HEADER_BYTES[s] for s in sizes if s in HEADER_BYTES), None)
    if version is None:
        looks = "text" if all(32 <= b < 127 or b in (9, 10, 13) for b in block[:64]) else "data"
        raise FormatError(path, f"not a NIfTI file: it starts with {looks}, not a NIfTI "
                                "header (sizeof_hdr must be 348 or 540)")
    if version == 2 and len(block) < 540:
        raise FormatError(path, "truncated: a NIfTI-2 header needs 540 bytes")
    magic_at = 344 if version == 1 else 4
    magic = block[magic_at:magic_at + 4].rstrip(b"\x00")
    if magic in (b"ni1", b"ni2"):
        raise FormatError(path, "a header/image pair (.hdr/.img); Studio opens single-file "
                                ".nii or .nii.gz")
    if magic not in (b"n+1", b"n+2"):
        raise FormatError(path, f"not a NIfTI file (magic {magic!r}, expected n+{version})")
    header_class = nib.Nifti1Header if version == 1 else nib.Nifti2Header
    try:
        return header_class.from_fileobj(io.BytesIO(block), check=False), version
    except Exception as exc:
        raise FormatError(path, f"damaged NIfTI header ({exc})") from None


def _sidecar_tr(path: Path) -> float | None:
    """BIDS: the ``RepetitionTime`` of the JSON sidecar next to a bold file, if there is one."""
    name = path.name[:-len(extension_of(path))]
    sidecar = path.with_name(name + ".json")
    if not sidecar.is_file():
        return None
    document = read_json(sidecar)
    value = document.get("RepetitionTime") if isinstance(document, dict) else None
    if value is None:
        return None
    if not isinstance(value, (int, float)) or not 0 < value < 1000:
        raise FormatError(sidecar, f"RepetitionTime {value!r} is not a time in seconds")
    return float(value)


@dataclass
class Volume:
    """One NIfTI image, 3D or 4D, read lazily. Voxel values come back as float32 with the
    header's scaling (scl_slope/scl_inter) applied; indices are the file's (i, j, k[, t])."""

    path: Path
    version: int
    shape: tuple[int, ...]           # (i, j, k) or (i, j, k, t)
    affine: np.ndarray               # voxel (i, j, k, 1) -> world mm (x, y, z, 1)
    voxel_mm: tuple[float, float, float]
    tr_s: float | None
    dtype: np.dtype                  # on disk, endianness included
    slope: float
    inter: float
    vox_offset: int
    nan: str = "error"               # "error": NaNs are a FormatError; "zero": shown as 0
    header: object = None
    _data: np.memmap | None = field(default=None, repr=False)
    _gz: object = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _frames: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _index_thread: threading.Thread | None = field(default=None, repr=False)
    _index_ready: threading.Event = field(default_factory=threading.Event, repr=False)
    _indexer: subprocess.Popen | None = field(default=None, repr=False)
    _readers: list = field(default_factory=list, repr=False)  # (handle, its lock) once indexed
    _points: np.ndarray | None = field(default=None, repr=False)  # seek points (uncompressed)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)
    index_error: str | None = None
    converted_path: Path | None = None  # the decompressed copy frames come from, if any
    converting_to: Path | None = None   # the copy being decompressed in the background
    index_path: Path | None = None      # where the seek index is kept between openings

    @property
    def n_frames(self) -> int:
        return self.shape[3] if len(self.shape) == 4 else 1

    @property
    def spatial_shape(self) -> tuple[int, int, int]:
        return self.shape[:3]  # type: ignore[return-value]

    @property
    def frame_voxels(self) -> int:
        return int(np.prod(self.spatial_shape))

    @property
    def compressed(self) -> bool:
        return self._gz is not None

    @property
    def index_ready(self) -> bool:
        """True for ``.nii`` and once a ``.nii.gz``'s seek index covers the whole file."""
        return self._index_ready.is_set()

    def wait_for_index(self, timeout_s: float | None = None) -> bool:
        return self._index_ready.wait(timeout_s)

    def preparation_progress(self) -> float | None:
        """How far the background pass is, 0-1, for a progress bar: 1.0 once done (or
        failed: see ``index_error``); a conversion's share is the size of its partial copy;
        None while a seek index is built (indexed_gzip reports no progress)."""
        if self.index_ready or self.index_error is not None:
            return 1.0
        if self.converting_to is None:
            return None
        partial = Path(f"{self.converting_to}.part")
        try:
            done = partial.stat().st_size if partial.exists() else 0
        except OSError:
            done = 0
        total = self.vox_offset + self.frame_voxels * self.n_frames * self.dtype.itemsize
        return min(done / total, 1.0)

    def orientation(self) -> tuple[str, str, str]:
        """The world direction each voxel axis points to, e.g. ``("L", "A", "S")``."""
        import nibabel as nib

        return tuple(nib.aff2axcodes(self.affine))  # type: ignore[return-value]

    def voxel_to_world(self, ijk) -> np.ndarray:
        ijk = np.asarray(ijk, dtype=float)
        return ijk @ self.affine[:3, :3].T + self.affine[:3, 3]

    def world_to_voxel(self, xyz) -> np.ndarray:
        inverse = np.linalg.inv(self.affine)
        xyz = np.asarray(xyz, dtype=float)
        return xyz @ inverse[:3, :3].T + inverse[:3, 3]

    # -- reading ---------------------------------------------------------------------------

    def _check_t(self, t: int) -> int:
        t = int(t)
        if not 0 <= t < self.n_frames:
            raise IndexError(f"{self.path}: frame {t} outside 0..{self.n_frames - 1}")
        return t

    def _scaled(self, raw: np.ndarray, t: int | None = None, own: bool = False
                ) -> np.ndarray:
        """float32 values with the header's scaling; ``own``: ``raw`` is a fresh buffer that
        may become the result (a float32 frame is then not copied)."""
        if self.slope != 1.0 or self.inter != 0.0:  # in float64, as nibabel does
            values = (np.asarray(raw, dtype=np.float64) * self.slope + self.inter
                      ).astype(np.float32)
        elif own and raw.dtype == np.float32 and raw.flags.writeable:
            values = raw
        else:
            values = np.array(raw, dtype=np.float32)
        if self.dtype.kind == "f" and not np.isfinite(values).all():
            if self.nan == "error":
                raise self._nan_error(int((~np.isfinite(values)).sum()), t)
            np.nan_to_num(values, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        return values

    def _nan_error(self, bad: int, t: int | None) -> FormatError:
        where = "the time course" if t is None else f"frame {t}"
        return FormatError(self.path, f"{bad} voxel{'s' * (bad != 1)} of {where} "
                                      f"{'are' if bad != 1 else 'is'} NaN or infinite; open "
                                      "it with NaNs shown as 0 (the viewer's 'NaN as 0' box, "
                                      "nan='zero' in Python)")

    def _check_frame_budget(self) -> None:
        """Refuse, naming the budget, a frame too large to hold: its float32 values (and,
        for a .nii.gz, the raw bytes they are decoded from)."""
        values = self.frame_voxels * 4
        FRAME_BYTES.check(self.path, values, "one frame as float32 needs")
        raw = self.frame_voxels * self.dtype.itemsize if self._data is None else 0
        check_allocation(self.path, values + raw, "one frame")

    def check_frame(self, t: int = 0) -> None:
        """Read frame ``t`` to find damage and NaNs without holding it: it is read in chunks
        of ``CHECK_CHUNK_BYTES``, so inspecting a file whose header claims huge frames (a gzip
        bomb) takes little memory and no frame budget."""
        t = self._check_t(t)
        bad = 0
        for raw in self._frame_chunks(t, max(1, CHECK_CHUNK_BYTES // self.dtype.itemsize)):
            if self.dtype.kind == "f":
                values = (np.asarray(raw, dtype=np.float64) * self.slope + self.inter
                          if self.slope != 1.0 or self.inter != 0.0 else raw)
                bad += int(raw.size - np.isfinite(values).sum())
        if bad and self.nan == "error":
            raise self._nan_error(bad, t)

    def _frame_chunks(self, t: int, step: int):
        """Frame ``t``'s raw voxels, ``step`` at a time in file order; a .nii.gz through a
        plain sequential gzip reader (twice as fast as an unindexed seekable one)."""
        if self._data is not None:
            data = self._data[..., t] if len(self.shape) == 4 else self._data
            flat = data.reshape(-1, order="F")  # a view: the frame is contiguous on disk
            for start in range(0, self.frame_voxels, step):
                yield flat[start:start + step]
            return
        size = self.frame_voxels * self.dtype.itemsize
        try:
            with gzip.open(self.path, "rb") as stream:
                stream.seek(self.vox_offset + t * size)
                for start in range(0, self.frame_voxels, step):
                    want = min(step, self.frame_voxels - start) * self.dtype.itemsize
                    chunk = stream.read(want)
                    if len(chunk) < want:
                        raise FormatError(self.path, "truncated: the data ends before the "
                                                     "header's dimensions say it should")
                    yield np.frombuffer(chunk, dtype=self.dtype)
        except (OSError, EOFError, zlib.error) as exc:
            raise FormatError(self.path, f"damaged gzip data ({exc})") from None

    def _read_gz(self, offset: int, count: int) -> bytearray:
        """``count`` uncompressed bytes from ``offset``. Large reads, once indexed, are split
        over the handles (indexed_gzip inflates without the GIL), each share starting at a seek
        point so no handle inflates bytes it drops. Reads go to the unbuffered handle: the
        buffered one's copies double the cost of a frame."""
        buffer = bytearray(count)
        view = memoryview(buffer)
        try:
            if len(self._readers) > 1 and count >= PARALLEL_MIN_BYTES:
                cuts = self._cuts(offset, count, len(self._readers))

                def piece(n: int) -> bool:
                    handle, lock = self._readers[n]
                    with lock:
                        return _fill(handle, cuts[n], view[cuts[n] - offset:
                                                           cuts[n + 1] - offset])

                others = [self._pool.submit(piece, n) for n in range(1, len(cuts) - 1)]
                complete = piece(0)
                complete = all([other.result() for other in others]) and complete
            else:
                with self._lock:
                    complete = _fill(self._gz, offset, view)
        except Exception as exc:  # zran / zlib errors on a damaged stream
            raise FormatError(self.path, f"damaged gzip data ({exc})") from None
        if not complete:
            raise FormatError(self.path, "truncated: the data ends before the header's "
                                         "dimensions say it should")
        return buffer

    def _cuts(self, offset: int, count: int, parts: int) -> list[int]:
        """``parts + 1`` offsets from ``offset`` to ``offset + count``: even shares, each inner
        cut moved to the nearest seek point inside the range."""
        cuts = [offset + count * n // parts for n in range(parts + 1)]
        inside = self._points[(self._points > offset) & (self._points < offset + count)]
        if len(inside):
            for n in range(1, parts):
                cuts[n] = int(inside[np.abs(inside - cuts[n]).argmin()])
        return sorted(set(cuts))

    def frame(self, t: int = 0) -> np.ndarray:
        """The volume at time ``t`` as float32 ``(i, j, k)``; never reads other frames."""
        t = self._check_t(t)
        cached = self._frames.get(t)
        if cached is not None:
            self._frames.move_to_end(t)
            return cached
        self._check_frame_budget()
        if self._data is not None:
            raw = self._data[..., t] if len(self.shape) == 4 else self._data
        else:
            size = self.frame_voxels * self.dtype.itemsize
            raw = np.frombuffer(self._read_gz(self.vox_offset + t * size, size),
                                dtype=self.dtype).reshape(self.spatial_shape, order="F")
        values = self._scaled(raw, t, own=self._data is None)
        values.setflags(write=False)
        self._frames[t] = values
        while len(self._frames) > FRAME_CACHE or (
                len(self._frames) > 1 and len(self._frames) * values.nbytes > FRAME_CACHE_BYTES):
            self._frames.popitem(last=False)
        return values

    def slice(self, axis: int, index: int, t: int = 0) -> np.ndarray:
        """A 2-D float32 slice through voxel axis ``axis`` (0, 1, 2) at ``index``, time ``t``;
        the two remaining axes keep their file order. Memory-mapped files read only the
        slice; compressed ones decode (and cache) the frame."""
        if axis not in (0, 1, 2) or not 0 <= index < self.shape[axis]:
            raise IndexError(f"{self.path}: slice {index} of axis {axis} outside the volume")
        t = self._check_t(t)
        where = tuple(index if a == axis else slice(None) for a in range(3))
        if self._data is None or t in self._frames:
            return np.array(self.frame(t)[where])
        data = self._data[..., t] if len(self.shape) == 4 else self._data
        return self._scaled(data[where], t)  # a view: only the slice's pages are read

    def value(self, ijk, t: int = 0) -> float:
        """One voxel's value (the cursor's) without decoding a frame that is not cached."""
        i, j, k = (int(v) for v in ijk)
        t = self._check_t(t)
        if t in self._frames:
            return float(self._frames[t][i, j, k])
        if self._data is not None:
            raw = self._data[i, j, k, t] if len(self.shape) == 4 else self._data[i, j, k]
            return float(self._scaled(np.asarray(raw), t))
        return float(self.values_at(t, [(i, j, k)])[0])

    def values_at(self, t: int, voxels) -> np.ndarray:
        """Values of a few voxels at one time point, read one by one from the gzip stream."""
        flat = np.ravel_multi_index(np.asarray(voxels).reshape(-1, 3).T, self.spatial_shape,
                                    order="F")
        base = self.vox_offset + t * self.frame_voxels * self.dtype.itemsize
        size = self.dtype.itemsize
        raw = b"".join(self._read_gz(base + int(v) * size, size) for v in flat)
        return self._scaled(np.frombuffer(raw, dtype=self.dtype), t)

    def values_over_time(self, voxels: np.ndarray) -> np.ndarray:
        """``(n_frames, n_voxels)`` float32 values at integer voxel indices ``(n, 3)``: the
        time courses of a cursor or an ROI, read frame by frame."""
        voxels = np.asarray(voxels, dtype=np.int64).reshape(-1, 3)
        if ((voxels < 0) | (voxels >= np.asarray(self.spatial_shape))).any():
            raise IndexError(f"{self.path}: voxel outside the volume")
        flat = np.ravel_multi_index(voxels.T, self.spatial_shape, order="F")
        out = np.empty((self.n_frames, flat.size), dtype=np.float32)
        if self._data is not None:
            frames = self._data.reshape(self.frame_voxels, self.n_frames, order="F")
            out[:] = self._scaled(frames[flat, :]).T
            return out
        for t in range(self.n_frames):
            if t in self._frames or flat.size > 64:
                out[t] = self.frame(t).reshape(-1, order="F")[flat]
            else:
                out[t] = self.values_at(t, voxels)
        return out

    def time_course(self, ijk) -> np.ndarray:
        return self.values_over_time(np.asarray(ijk).reshape(1, 3))[:, 0]

    # -- random access into a compressed file ------------------------------------------------

    def start_indexing(self, converted: Path | None = None,
                       index_path: Path | None = None) -> None:
        """Make every frame of a .nii.gz quick to reach, in a background thread: build the full
        seek index (kept at ``index_path`` when given, and read from there if an earlier
        opening saved it), or with ``converted`` decompress the stream once into that .nii
        (reused on the next opening) and memory-map it: ~1 ms a frame instead of inflating
        3.6 MB. Frame reads keep working (near the start, fast) meanwhile."""
        if self._gz is None or self._index_thread is not None:
            return
        self.index_path, self.converting_to = index_path, converted
        self._index_thread = threading.Thread(target=self._prepare, args=(converted,),
                                              daemon=True, name=f"index {self.path.name}")
        self._index_thread.start()

    def _prepare(self, converted: Path | None) -> None:
        try:
            if converted is not None:
                self._run_child("_decompress", str(self.path), str(converted))
                self._map(converted)
                self.converted_path = converted
            elif self.index_path is not None and _writable_folder(self.index_path.parent):
                self._use_index(self.index_path)
            else:
                with tempfile.TemporaryDirectory(prefix="studio-gzindex-") as folder:
                    self._use_index(Path(folder) / "index.gzidx")
        except Exception as exc:  # the foreground reads report the damage with the file name
            self.index_error = f"{type(exc).__name__}: {exc}"
            return
        self._index_ready.set()

    def _use_index(self, index_file: Path) -> None:
        """Read the seek index from ``index_file`` (built there by a child process first when
        it is missing or unreadable) into ``PARALLEL_READERS`` handles."""
        import indexed_gzip

        def handles() -> list:
            opened = []
            try:
                for _ in range(PARALLEL_READERS):
                    opened.append(indexed_gzip.IndexedGzipFile(filename=str(self.path),
                                                               spacing=INDEX_SPACING_BYTES))
                    opened[-1].import_index(str(index_file))
            except BaseException:
                for handle in opened:
                    handle.close()
                raise
            return opened

        try:
            readers = handles()
        except Exception:  # none saved yet, or a damaged one: build it
            partial = index_file.with_name(index_file.name + ".part")
            self._run_child("_export_index", str(self.path), str(partial),
                            str(INDEX_SPACING_BYTES))
            os.replace(partial, index_file)
            readers = handles()
        self._points = np.array(sorted(u for u, _ in readers[0].seek_points()), dtype=np.int64)
        self._pool = ThreadPoolExecutor(max(1, len(readers) - 1),
                                        thread_name_prefix=f"gz {self.path.name}")
        with self._lock:
            old, self._gz = self._gz, readers[0]
            self._readers = [(readers[0], self._lock)] + [(h, threading.Lock())
                                                          for h in readers[1:]]
        old.close()

    def _run_child(self, function: str, *args: str) -> None:
        """indexed_gzip holds the GIL while it builds an index (the window would freeze for
        seconds), so the whole-file pass runs in a child process."""
        if getattr(sys, "frozen", False):  # a bundled app has no `python -c`
            globals()[function](*args)
            return
        self._indexer = subprocess.Popen([sys.executable, "-c", CHILD, function, *args],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True)
        _, errors = self._indexer.communicate()
        if self._indexer.returncode != 0:
            raise RuntimeError(((errors or "").strip().splitlines() or ["stopped"])[-1])

    def _map(self, raw_nii: Path) -> None:
        """Serve frames from a memory map of ``raw_nii`` (same bytes, uncompressed)."""
        self._data = np.memmap(raw_nii, dtype=self.dtype, mode="r", offset=self.vox_offset,
                               shape=self.shape, order="F")

    def close(self) -> None:
        if self._indexer is not None and self._indexer.poll() is None:
            self._indexer.kill()
        if self._index_thread is not None:
            self._index_thread.join()
        if self._pool is not None:
            self._pool.shutdown()
        with self._lock:
            for handle in {id(h): h for h in [self._gz, *(h for h, _ in self._readers)]
                           if h is not None}.values():
                handle.close()
            self._readers = []
        self._data = None
        self._frames.clear()


CHILD = "import sys, engine.io.nifti as nifti; getattr(nifti, sys.argv[1])(*sys.argv[2:])"


def _writable_folder(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _fill(handle, start: int, view: memoryview) -> bool:
    """Read from ``start`` of an ``IndexedGzipFile`` until ``view`` is full (False: the
    stream ended first)."""
    raw = handle.raw
    raw.seek(start)
    done = 0
    while done < len(view):
        got = raw.readinto(view[done:])
        if not got:
            return False
        done += got
    return True


def _export_index(source: str, target: str, spacing: str) -> None:
    import indexed_gzip

    with indexed_gzip.IndexedGzipFile(filename=source, spacing=int(spacing)) as handle:
        handle.build_full_index()
        handle.export_index(target)


def _decompress(source: str, target: str) -> None:
    """The gzip stream into ``target`` (checked against its CRC), renamed into place whole."""
    partial = f"{target}.part"
    with gzip.open(source, "rb") as packed, open(partial, "wb") as raw:
        shutil.copyfileobj(packed, raw, 1 << 22)
    os.replace(partial, target)


def converted_path(path: Path, folder: Path) -> Path:
    """Where a .nii.gz is decompressed in ``folder``: named by the file's path, size and time,
    so an edited file is converted again."""
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return folder / f"{path.name[:-len('.nii.gz')]}-{key.hexdigest()[:12]}.nii"


def open_volume(path: str | os.PathLike, nan: str = "error", index: bool = True,
                convert_dir: Path | None = None,
                convert_min_bytes: int = CONVERT_MIN_BYTES) -> Volume:
    """Open a .nii or .nii.gz after checking it whole (header, sizes, frame 0).

    ``index``: make a ``.nii.gz``'s frames quick to reach in the background (the viewer wants
    it; ``inspect`` does not): by decompressing it into ``convert_dir`` when it holds at least
    ``convert_min_bytes`` and the disk has room, else by building a seek index. Raises
    ``FormatError`` naming the file on any problem.
    """
    path = Path(path)
    if nan not in ("error", "zero"):
        raise ValueError(f"nan must be 'error' or 'zero', not {nan!r}")
    if path.is_dir():
        raise FormatError(path, "a folder; open a .nii/.nii.gz file or a BIDS folder")
    if not path.is_file():
        raise FormatError(path, "no such file")
    header, version = _parse_header(path, _read_header_block(path))
    shape, dtype = _checked_shape_and_dtype(path, header)
    vox_offset = int(header.get_data_offset())
    data_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    _check_size(path, vox_offset, data_bytes)
    affine = np.asarray(header.get_best_affine(), dtype=float)
    if not np.isfinite(affine).all() or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise FormatError(path, "the header's affine is not an invertible finite matrix")
    slope, inter = header.get_slope_inter()
    slope = 1.0 if slope is None else float(slope)
    inter = 0.0 if inter is None else float(inter)
    if not (np.isfinite(slope) and np.isfinite(inter)):
        raise FormatError(path, "scl_slope/scl_inter are not finite numbers")
    pixdim = [float(z) for z in header.get_zooms()]
    voxel_mm = tuple(pixdim[a] if a < len(pixdim) and pixdim[a] > 0 else
                     float(np.linalg.norm(affine[:3, a])) for a in range(3))
    tr_s = _sidecar_tr(path)
    if tr_s is None and len(shape) == 4 and len(pixdim) > 3 and pixdim[3] > 0:
        tr_s = pixdim[3] * TIME_UNIT_S.get(header.get_xyzt_units()[1], 1.0)
        if tr_s >= IMPLAUSIBLE_TR_S:  # milliseconds labelled as seconds (FSL 3.3 did this)
            tr_s /= 1000.0
    volume = Volume(path=path, version=version, shape=shape, affine=affine,
                    voxel_mm=voxel_mm, tr_s=tr_s, dtype=dtype, slope=slope, inter=inter,
                    vox_offset=vox_offset, nan=nan, header=header)
    try:
        _attach_data(volume, data_bytes)
        # a damaged start or NaNs fail here, before anything is shown; the viewer (index)
        # holds frame 0 at once, inspect only reads it through
        if index:
            volume.frame(0)
        else:
            volume.check_frame(0)
    except BaseException:
        volume.close()
        raise
    if index and volume.compressed:
        converted = _conversion_target(volume, data_bytes, convert_dir, convert_min_bytes)
        if not volume.index_ready:  # an earlier conversion is memory-mapped already
            kept = (None if convert_dir is None or converted is not None else
                    converted_path(path, Path(convert_dir)).with_suffix(".gzidx"))
            volume.start_indexing(converted, kept)
    return volume


def _conversion_target(volume: Volume, data_bytes: int, folder: Path | None,
                       min_bytes: int) -> Path | None:
    """The .nii to decompress into, or None to index instead. An earlier conversion of the
    same file is memory-mapped at once."""
    if folder is None or data_bytes < min_bytes:
        return None
    target = converted_path(volume.path, Path(folder))
    if target.is_file() and target.stat().st_size >= volume.vox_offset + data_bytes:
        volume._map(target)
        volume.converted_path = target
        volume._index_ready.set()
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        room = shutil.disk_usage(target.parent).free
    except OSError:
        return None
    return target if room > 1.2 * (volume.vox_offset + data_bytes) else None


def _checked_shape_and_dtype(path: Path, header) -> tuple[tuple[int, ...], np.dtype]:
    dims = [int(d) for d in header["dim"]]
    if not 1 <= dims[0] <= 7:
        raise FormatError(path, f"header dim[0] = {dims[0]}: not 1..7 (damaged header)")
    shape = dims[1:1 + dims[0]]
    if any(d <= 0 for d in shape):
        raise FormatError(path, f"header dimensions {shape} include a size <= 0")
    while len(shape) > 3 and shape[-1] == 1:
        shape.pop()
    if len(shape) > 4:
        raise FormatError(path, f"a {len(shape)}-D image {shape}; Studio shows 3-D and 4-D")
    shape += [1] * (3 - len(shape))
    try:
        dtype = np.dtype(header.get_data_dtype())
    except Exception as exc:
        raise FormatError(path, f"unknown data type in the header ({exc})") from None
    if dtype.kind not in SUPPORTED_KINDS or dtype.fields is not None:
        raise FormatError(path, f"data type {dtype} (complex or RGB) is not supported")
    return tuple(shape), dtype


def _check_size(path: Path, vox_offset: int, data_bytes: int) -> None:
    """The header's dimensions against the bytes the file can hold: truncation, mismatched
    dimensions and absurd sizes are caught here, before any data is read."""
    file_bytes = path.stat().st_size
    needed = vox_offset + data_bytes
    if not _is_gz(path):
        if file_bytes < needed:
            raise FormatError(path, f"the header's dimensions need {needed:,} bytes but the "
                                    f"file has {file_bytes:,} (truncated, or dimensions that "
                                    "do not match the data)")
        return
    if needed > file_bytes * DEFLATE_MAX_RATIO:
        raise FormatError(path, f"the header claims {needed:,} bytes of data, more than a "
                                f"{file_bytes:,}-byte gzip file can hold (absurd dimensions)")
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        (stored,) = struct.unpack("<I", handle.read(4))
    if (stored - needed) % 2**32 > GZ_TRAILING_SLACK_BYTES:  # ISIZE is the size mod 4 GiB
        raise FormatError(path, f"the gzip trailer does not record the {needed:,} bytes the "
                                f"header's dimensions need (it says {stored:,}): the file is "
                                "truncated, or its dimensions do not match the data")


def _attach_data(volume: Volume, data_bytes: int) -> None:
    path = volume.path
    if _is_gz(path):
        import indexed_gzip

        try:
            volume._gz = indexed_gzip.IndexedGzipFile(filename=str(path),
                                                      spacing=INDEX_SPACING_BYTES)
        except Exception as exc:
            raise FormatError(path, f"not a readable gzip file ({exc})") from None
        return
    volume._data = np.memmap(path, dtype=volume.dtype, mode="r", offset=volume.vox_offset,
                             shape=volume.shape, order="F")
    volume._index_ready.set()


# -- BIDS ------------------------------------------------------------------------------------

BIDS_NIFTI = re.compile(r".*_(T1w|bold)\.nii(\.gz)?$")


@dataclass(frozen=True)
class BidsRun:
    """One subject (and session)'s T1w images and bold runs, with each run's TR."""

    subject: str
    anat: tuple[Path, ...]
    bold: tuple[Path, ...]
    tr_s: tuple[float | None, ...]


def is_bids_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_description.json").is_file()
                              or any(path.glob("sub-*/anat")) or any(path.glob("sub-*/func"))
                              or any(path.glob("sub-*/ses-*/func")))


def bids_runs(root: str | os.PathLike) -> list[BidsRun]:
    """The T1w and bold NIfTIs of a BIDS folder (``sub-*/[ses-*/]{anat,func}``), sorted; the
    TR of a run comes from its sidecar, else from a top-level ``task-*_bold.json``."""
    root = Path(root)
    if not is_bids_folder(root):
        raise FormatError(root, "not a BIDS folder (no dataset_description.json or sub-*/ "
                                "anat|func folders)")
    runs = []
    for folder in sorted({p.parent.parent for p in root.glob("sub-*/**/*.nii*")
                          if p.parent.name in ("anat", "func")}):
        anat = tuple(sorted((folder / "anat").glob("*_T1w.nii*")))
        bold = tuple(sorted((folder / "func").glob("*_bold.nii*")))
        if anat or bold:
            subject = folder.relative_to(root).as_posix()
            runs.append(BidsRun(subject, anat, bold, tuple(_run_tr(root, b) for b in bold)))
    if not runs:
        raise FormatError(root, "a BIDS folder without any *_T1w or *_bold NIfTI files")
    return runs


def _run_tr(root: Path, bold: Path) -> float | None:
    own = _sidecar_tr(bold)
    if own is not None:
        return own
    task = re.search(r"(task-[^_]+)", bold.name)
    if task is None:
        return None
    inherited = root / f"{task.group(1)}_bold.json"
    try:
        document = read_json(inherited)
    except FormatError:
        return None
    value = document.get("RepetitionTime") if isinstance(document, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


# -- registry ---------------------------------------------------------------------------------

def describe(volume: Volume) -> dict:
    """What ``studio-engine inspect`` and the viewer's info line show."""
    units = volume.header.get_xyzt_units()
    return {"summary": {"shape": list(volume.shape),
                        "voxel_mm": [round(v, 4) for v in volume.voxel_mm],
                        "tr_s": None if volume.tr_s is None else round(volume.tr_s, 6),
                        "dtype": str(volume.dtype.newbyteorder("=")),
                        "frames": volume.n_frames,
                        "orientation": "".join(volume.orientation()),
                        "affine": np.round(volume.affine, 4).tolist()},
            "metadata": {"nifti_version": volume.version, "scl_slope": volume.slope,
                         "scl_inter": volume.inter, "byte_order": volume.dtype.byteorder,
                         "units": {"space": units[0], "time": units[1]},
                         "compressed": volume.compressed,
                         "description": " ".join(volume.header["descrip"].item().decode(
                             "latin-1").replace("\x00", " ").split())}}  # FSL writes NULs


def _sniff_nifti(path: Path, head: bytes) -> int:
    if extension_of(path) not in NIFTI_EXTENSIONS:
        return 0
    if extension_of(path) == ".nii" and (head[344:347] == b"n+1" or head[4:7] == b"n+2"):
        return 2
    return 1


def _inspect_nifti(path: Path) -> dict:
    volume = open_volume(path, index=False)
    try:
        return describe(volume)
    finally:
        volume.close()


def _sniff_bids(path: Path, head: bytes) -> int:
    return 2 if is_bids_folder(path) else 0


def _inspect_bids(path: Path) -> dict:
    runs = bids_runs(path)
    return {"summary": {"subjects": len(runs), "t1w": sum(len(r.anat) for r in runs),
                        "bold_runs": sum(len(r.bold) for r in runs),
                        "tr_s": sorted({tr for r in runs for tr in r.tr_s if tr is not None})},
            "metadata": {r.subject: {"anat": [str(p.relative_to(path)) for p in r.anat],
                                     "bold": [str(p.relative_to(path)) for p in r.bold],
                                     "tr_s": list(r.tr_s)} for r in runs}}


FORMATS = [
    Format("nifti", "NIfTI image", NIFTI_EXTENSIONS, _sniff_nifti, _inspect_nifti,
           panel="fmri", kinds=("volume",)),
    Format("bids", "BIDS folder", (), _sniff_bids, _inspect_bids, panel="fmri",
           kinds=("volume",)),
]
