"""shoal: an embedded vector-search engine whose concurrent callers share scans.

    import numpy as np, shoal
    db = shoal.connect("data")
    ds = db.create_dataset("docs", {"vector": np.random.rand(1000, 64).astype("float32")})
    ds.create_index("ivf_flat", partitions=16)
    table = ds.search(np.random.rand(64).astype("float32"), k=5)

Searches from many asyncio tasks (``await ds.search_async(...)``) or threads
(``ds.search(...)``) are gathered by the engine into shared scans; each
caller gets exactly the rows it would have got alone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from . import _shoal
from ._shoal import (
    Cancelled,
    Conflict,
    DeadlineExceeded,
    InternalError,
    InvalidInput,
    NotFound,
    Overloaded,
    ShoalError,
    StorageUnavailable,
)

__all__ = [
    "connect",
    "Engine",
    "Dataset",
    "ShoalError",
    "InvalidInput",
    "NotFound",
    "Conflict",
    "Overloaded",
    "Cancelled",
    "DeadlineExceeded",
    "InternalError",
    "StorageUnavailable",
]

Data = Union[pa.Table, pa.RecordBatch, Mapping[str, Any]]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise InvalidInput(f"config value {value!r} is not a bool, number or string")


def _config_toml(config: Union[None, str, os.PathLike, Mapping[str, Any]]) -> str:
    """The config as TOML text: a path to a TOML file, or a dict of
    sections (``{"coalescer": {"window_us": 500}}``)."""
    if config is None:
        return ""
    if isinstance(config, (str, os.PathLike)):
        with open(config, encoding="utf-8") as f:
            return f.read()
    if isinstance(config, Mapping):
        lines = []
        for section, keys in config.items():
            if not isinstance(keys, Mapping):
                raise InvalidInput(f"config section {section!r} must be a dict of keys")
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in keys.items())
        return "\n".join(lines) + "\n"
    raise InvalidInput("config must be None, a path to a TOML file or a dict")


def _float32_vector(vector: Any) -> np.ndarray:
    array = np.asarray(vector)
    if array.dtype.kind != "f":
        raise InvalidInput(
            f"a query vector must hold floats, not {array.dtype} (convert it to float32)"
        )
    if array.ndim != 1:
        raise InvalidInput(
            f"a query vector must be 1-D, got shape {array.shape} "
            "(use search_batch for a matrix of queries)"
        )
    return np.ascontiguousarray(array, dtype=np.float32)


def _float32_matrix(matrix: Any) -> np.ndarray:
    array = np.asarray(matrix)
    if array.dtype.kind != "f":
        raise InvalidInput(f"query vectors must hold floats, not {array.dtype}")
    if array.ndim != 2:
        raise InvalidInput(
            f"query vectors must be a 2-D matrix (one row per query), got shape {array.shape} "
            "(use search for one vector)"
        )
    return np.ascontiguousarray(array, dtype=np.float32)


def _vector_column(array: np.ndarray) -> pa.Array:
    """A 2-D float array as a fixed-size-list column of float32."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    rows, dim = array.shape
    return pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1)), dim)


def _table(data: Data) -> Union[pa.Table, pa.RecordBatch]:
    """`data` as Arrow: tables and record batches pass through; in a dict,
    a 2-D float array becomes a vector column and the rest pyarrow arrays."""
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return data
    if isinstance(data, Mapping):
        columns = {}
        for name, values in data.items():
            array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else np.asarray(values)
            if isinstance(array, np.ndarray) and array.ndim == 2:
                if array.dtype.kind != "f":
                    raise InvalidInput(f"vector column {name!r} must hold floats, not {array.dtype}")
                columns[name] = _vector_column(array)
            elif isinstance(array, np.ndarray) and array.ndim != 1:
                raise InvalidInput(f"column {name!r} has {array.ndim} dimensions (1 or 2)")
            else:
                columns[name] = array
        return pa.table(columns)
    raise InvalidInput("data must be a pyarrow.Table, a pyarrow.RecordBatch or a dict of arrays")


def _as_table(batch: pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([batch])


class Dataset:
    """One dataset served by an engine: add rows, delete, index, search."""

    def __init__(self, native: "_shoal.Dataset"):
        self._native = native
        # Searches made in this turn of each event loop, submitted together
        # at its end (see `_submit_turn`); keyed by the loop itself, so a
        # closed loop's leftovers never reach another.
        self._turns: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, List[Any]]" = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"shoal.Dataset({self.name!r}, version={self.version}, rows={self.count_rows()})"

    @property
    def name(self) -> str:
        """The dataset's name in its engine."""
        return self._native.name

    @property
    def version(self) -> int:
        """The latest version (every write makes a new one)."""
        return self._native.version

    @property
    def schema(self) -> pa.Schema:
        """The stored schema (an int64 ``id`` first; vectors as fixed-size lists)."""
        return self._native.schema

    def count_rows(self) -> int:
        """Rows visible in the latest version."""
        return self._native.count_rows()

    def add(self, data: Data) -> int:
        """Appends rows (a table, a record batch or a dict of arrays) as a new
        version; rows without an ``id`` get the running row count. Returns the
        new version."""
        return self._native.add(_table(data))

    def delete(self, filter: str) -> int:
        """Deletes the rows matching the SQL ``filter``; returns the version after."""
        return self._native.delete(filter)

    def compact(self) -> int:
        """Merges the small fragments many small appends leave (those no index
        covers yet, at the end of the dataset) into few, as a new version with
        the same answers; returns the rows rewritten (0: nothing to do). The
        engine also does this by itself past ``ingest.compact_after_fragments``."""
        return self._native.compact()[1]

    def prewarm(
        self, column: Optional[str] = None, partitions: Optional[Sequence[int]] = None
    ) -> Dict[str, int]:
        """Fills the local disk cache of a dataset on object storage with what
        searches read: the index partitions of ``column`` (every indexed column
        when None; only ``partitions`` of each IVF segment when given), every
        fragment's ids and the vectors of unindexed fragments. Run it before
        traffic arrives; a local dataset has nothing to fetch. Returns what
        was fetched: ``partitions``, ``fragments``, ``gets``, ``bytes``."""
        parts = None if partitions is None else [int(p) for p in partitions]
        p, f, g, b = self._native.prewarm(column, parts)
        return {"partitions": p, "fragments": f, "gets": g, "bytes": b}

    def fragment_count(self) -> int:
        """Fragment files in the latest version."""
        return self._native.fragment_count()

    def create_index(
        self,
        index_type: str = "ivf_flat",
        partitions: Optional[int] = None,
        sub_vectors: Optional[int] = None,
        column: Optional[str] = None,
        seed: Optional[int] = None,
        bits: Optional[int] = None,
        m: Optional[int] = None,
        ef_construction: Optional[int] = None,
    ) -> int:
        """Builds an index over ``column`` (the only vector column by
        default); returns the version it committed. IVF indexes (``partitions``,
        default 256): ``ivf_flat``, ``ivf_pq`` with ``sub_vectors``,
        ``ivf_sq``, or ``ivf_rq`` with ``bits`` per dimension, 1 to 8, default
        4. A graph: ``hnsw`` with ``m`` (default 16) and ``ef_construction``
        (default 200), searched with ``ef``."""
        if index_type != "hnsw" and partitions is None:
            partitions = 256
        return self._native.create_index(
            index_type, partitions, sub_vectors, column, seed, bits, m, ef_construction,
        )

    def search(
        self,
        vector: Any,
        k: int = 10,
        filter: Optional[str] = None,
        select: Optional[Sequence[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        postfilter: bool = False,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        timeout_ms: Optional[int] = None,
        ef: Optional[int] = None,
    ) -> pa.Table:
        """The ``k`` nearest rows to ``vector`` (1-D float array) as a table of
        ``id``, ``_distance`` and the ``select``-ed columns, nearest first.
        Calls from many threads are coalesced into shared scans (the GIL is
        released while waiting)."""
        batch = self._native.search(*_request(
            vector, k, filter, select, nprobes, refine_factor, postfilter, column, version, exact,
            timeout_ms, ef,
        ))
        return _as_table(batch)

    async def search_async(
        self,
        vector: Any,
        k: int = 10,
        filter: Optional[str] = None,
        select: Optional[Sequence[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        postfilter: bool = False,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        timeout_ms: Optional[int] = None,
        ef: Optional[int] = None,
    ) -> pa.Table:
        """:meth:`search` as a coroutine: concurrent tasks share batches, and
        cancelling the task cancels its search."""
        request = _request(
            vector, k, filter, select, nprobes, refine_factor, postfilter, column, version, exact,
            timeout_ms, ef,
        )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = []
            loop.call_soon(self._submit_turn, loop)
        turn.append((request, future))
        return _as_table(await future)

    def _submit_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hands the searches of one loop turn to the engine at once, so that
        they arrive together; their answers come back through the loop's
        mailbox (`_Mailbox`)."""
        turn = self._turns.pop(loop, [])
        live = [(r, f) for r, f in turn if not f.done()]
        if not live:
            return
        mailbox = _Mailbox.of(loop)
        first = mailbox.reserve(f for _, f in live)
        try:
            cancels = self._native.submit([r for r, _ in live], mailbox.native, first)
        except BaseException as e:  # a bad request fails the searches it came with
            mailbox.forget(first, len(live))
            for _, f in live:
                if not f.done():
                    f.set_exception(e)
            return
        for ticket, ((_, f), cancel) in enumerate(zip(live, cancels), start=first):
            f.add_done_callback(functools.partial(_on_done, mailbox, ticket, cancel))

    def search_batch(
        self,
        matrix: Any,
        k: int = 10,
        filter: Optional[str] = None,
        select: Optional[Sequence[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        postfilter: bool = False,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        ef: Optional[int] = None,
    ) -> pa.Table:
        """Every row of ``matrix`` (2-D float array) searched in one shared
        scan: one table with a ``query_index`` column, then ``id``,
        ``_distance`` and the selected columns, nearest first per query."""
        batch, _ = self._native.search_batch(
            _float32_matrix(matrix), k, filter, postfilter, _names(select), nprobes,
            refine_factor, column, version, exact, False, ef,
        )
        return _as_table(batch)

    def explain(
        self,
        matrix: Any,
        k: int = 10,
        filter: Optional[str] = None,
        select: Optional[Sequence[str]] = None,
        nprobes: Optional[int] = None,
        refine_factor: Optional[int] = None,
        postfilter: bool = False,
        column: Optional[str] = None,
        version: Optional[int] = None,
        exact: bool = False,
        ef: Optional[int] = None,
    ) -> Dict[str, Any]:
        """:meth:`search_batch`, with what the execution did: ``{"results":
        table, "profile": dict}`` (mode, partitions probed and loaded, rows
        scored, times)."""
        batch, profile = self._native.search_batch(
            _float32_matrix(matrix), k, filter, postfilter, _names(select), nprobes,
            refine_factor, column, version, exact, True, ef,
        )
        return {"results": _as_table(batch), "profile": json.loads(profile)}


def _on_done(mailbox: "_Mailbox", ticket: int, cancel: Any, future: "asyncio.Future[Any]") -> None:
    """A cancelled search is withdrawn from the engine and forgotten here
    (its late answer is dropped), so nothing keeps its loop alive."""
    if future.cancelled():
        cancel.cancel()
        mailbox.futures.pop(ticket, None)


class _Mailbox:
    """Where one event loop's asynchronous answers arrive: the native side
    posts them without the GIL and pokes a socket the loop watches; the
    loop then takes every ready answer in one call and resolves the
    futures by ticket."""

    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox]"

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.native = _shoal.Mailbox()
        self.futures: Dict[int, "asyncio.Future[Any]"] = {}
        self.next_ticket = 0
        loop.add_reader(self.native.fileno(), self._drain)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "_Mailbox":
        mailbox = cls._by_loop.get(loop)
        if mailbox is None:
            mailbox = cls._by_loop[loop] = cls(loop)
        return mailbox

    def reserve(self, futures: Any) -> int:
        first = self.next_ticket
        for future in futures:
            self.futures[self.next_ticket] = future
            self.next_ticket += 1
        return first

    def forget(self, first: int, count: int) -> None:
        for ticket in range(first, first + count):
            self.futures.pop(ticket, None)

    def _drain(self) -> None:
        groups, errors = self.native.take()
        for batch, tickets in groups:
            for ticket, offset, length in tickets:
                future = self.futures.pop(ticket, None)
                if future is not None and not future.done():  # else cancelled meanwhile
                    future.set_result(batch.slice(offset, length))
        for ticket, error in errors:
            future = self.futures.pop(ticket, None)
            if future is not None and not future.done():
                future.set_exception(error)


_Mailbox._by_loop = weakref.WeakKeyDictionary()


def _request(vector: Any, k: int, filter: Optional[str], select: Optional[Sequence[str]],
             nprobes: Optional[int], refine_factor: Optional[int], postfilter: bool,
             column: Optional[str], version: Optional[int], exact: bool,
             timeout_ms: Optional[int], ef: Optional[int]) -> tuple:
    """One search as the native side takes it (`Dataset.search`'s arguments
    and `Dataset.submit`'s request tuples share this order)."""
    return (
        _float32_vector(vector), k, filter, postfilter, _names(select), nprobes,
        refine_factor, column, version, exact, timeout_ms, ef,
    )


def _names(select: Optional[Sequence[str]]) -> Optional[List[str]]:
    if select is None:
        return None
    if isinstance(select, str):
        return [select]
    return list(select)


class Engine:
    """A directory of datasets served by one coalescing engine."""

    def __init__(self, path: Union[str, os.PathLike], config: Any = None):
        self._native = _shoal.Engine(os.fspath(path), _config_toml(config))

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create_dataset(self, name: str, data: Data, metric: str = "l2") -> Dataset:
        """Creates dataset ``name`` from ``data`` (its schema from the data's:
        2-D float arrays / fixed-size lists of float32 are vector columns with
        ``metric``: ``l2``, ``cosine`` or ``dot``) and adds the rows."""
        return Dataset(self._native.create_dataset(name, _table(data), metric))

    def open(self, name: str) -> Dataset:
        """Dataset ``name`` (``NotFound`` when there is none)."""
        return Dataset(self._native.open(name))

    def dataset_names(self) -> List[str]:
        """The datasets under the engine's directory."""
        return self._native.dataset_names()

    def stats(self) -> Dict[str, Any]:
        """The engine's counters: ``requests``, ``batches``,
        ``mean_batch_size``, ``cancelled``, ``pending``, histograms, cache and
        memory-budget figures."""
        return json.loads(self._native.stats_json())

    def close(self) -> None:
        """Stops the engine (queued searches are answered first)."""
        self._native.shutdown()


def connect(path: Union[str, os.PathLike], config: Any = None) -> Engine:
    """An engine over the datasets under ``path`` (created if missing), a
    directory or an object-storage URL such as ``s3://bucket/prefix``
    (credentials from the AWS_* environment variables or the config's
    ``storage`` section). ``config`` is a path to a TOML file or a dict of sections, e.g.
    ``{"coalescer": {"window_us": 500}}`` (see shoal's config/default.toml)."""
    return Engine(path, config)
