"""An independent reader of an HDFS target, over WebHDFS: the judge of fault tests and chaos runs.

It shares no client with the sink (plain HTTP to the NameNodes' WebHDFS, no hdfs-native), and reads as a
listing reader does (``spark.read.parquet`` of the target): every file outside hidden names. Polled while
a run goes on and once after, it reports what a reader would have seen go wrong:

* lost and duplicated rows, against the rows the test wrote;
* rows read during the run that are gone after (a batch made visible, then taken back);
* torn batches: a batch directory whose files are not exactly the ones its record names (part of a batch,
  or an earlier attempt's files beside it).

With several WebHDFS addresses (the NameNodes of an HA name service) each call goes to the first that
answers as active: a standby refuses reads with ``StandbyException``.
"""

from __future__ import annotations

import getpass
import io
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eosink._audit import ReadVerdict, keyed, tally
from eosink._polling import BackgroundPoll

__all__ = ["HdfsVerdict", "WebHdfsReader", "canonical", "webhdfs_get"]

_BUNDLE_FILE = "_eosink_bundle.json"
_BATCH_PREFIX = "eosink_batch="


def canonical(row: Mapping[str, Any]) -> str:
    """A row in one spelling (sorted keys, values as JSON), so the same row compares equal however it was read."""
    return json.dumps(dict(row), sort_keys=True, default=str)


@dataclass
class HdfsVerdict(ReadVerdict):
    """What the WebHDFS reader found (:class:`~eosink._audit.ReadVerdict`)."""


def _partition_values(rel: str) -> dict[str, str]:
    """Hive-style ``col=value`` directories of a file's path relative to its batch, as strings."""
    pairs = (part.partition("=") for part in rel.split("/")[:-1])
    return {column: value for column, eq, value in pairs if eq}


class WebHdfsReader(BackgroundPoll):
    """Reads the visible rows below ``path`` through WebHDFS at ``webhdfs`` (``http://host:port/webhdfs/v1``, one
    per NameNode); ``fmt`` is ``"parquet"`` or ``"jsonl"``. :meth:`start` polls in the background."""

    def __init__(self, webhdfs: str | Sequence[str], path: str, fmt: str = "parquet", *, user: str | None = None):
        self._bases = [webhdfs] if isinstance(webhdfs, str) else list(webhdfs)
        self.path, self.fmt = path.rstrip("/"), fmt
        self._user = user or getpass.getuser()
        self.seen: set[str] = set()
        self.torn: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    # -- WebHDFS ----------------------------------------------------------------------------------

    def _call(self, path: str, op: str, **params: str) -> bytes:
        return webhdfs_get(self._bases, path, op, user=self._user, **params)

    def _list(self, path: str) -> list[dict[str, Any]]:
        try:
            body = json.loads(self._call(path, "LISTSTATUS"))
        except FileNotFoundError:
            return []
        return list(body["FileStatuses"]["FileStatus"])

    def _files(self, path: str) -> dict[str, list[str]]:
        """Visible files below ``path`` by batch directory (relative paths), and each batch's record file."""
        out: dict[str, list[str]] = {}
        todo = [(path, "")]
        while todo:
            directory, batch = todo.pop()
            for status in self._list(directory):
                name = str(status["pathSuffix"])
                child = f"{directory}/{name}"
                if name.startswith(_BATCH_PREFIX) and not batch:
                    out.setdefault(child, [])
                if status["type"] == "DIRECTORY":
                    if not name.startswith(("_", ".")):
                        todo.append((child, batch or (child if name.startswith(_BATCH_PREFIX) else "")))
                elif name == _BUNDLE_FILE or not name.startswith(("_", ".")):
                    out.setdefault(batch or path, []).append(child)
        return out

    def _rows(self, file: str) -> list[dict[str, Any]]:
        data = self._call(file, "OPEN")
        if self.fmt == "jsonl":
            return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(data)).to_pylist()
        return rows

    # -- reading ----------------------------------------------------------------------------------

    def read(self) -> Counter[str]:
        """Every visible row now; a batch directory whose files differ from its record's list is noted as torn."""
        rows: Counter[str] = Counter()
        for batch_rows, _ in self.batches().values():
            rows.update(canonical(row) for row in batch_rows)
        return rows

    def batches(self) -> dict[str, tuple[list[dict[str, Any]], bool]]:
        """Every visible batch directory now (files outside one under the target's path itself): its rows, with
        their partition values, and whether its record is there; a torn one is noted (:attr:`torn`)."""
        out: dict[str, tuple[list[dict[str, Any]], bool]] = {}
        for batch, files in sorted(self._files(self.path).items()):
            record = next((f for f in files if f.endswith(f"/{_BUNDLE_FILE}")), None)
            data = [f for f in files if f != record]
            if batch != self.path:
                self._check_whole(batch, record, data)
            rows: list[dict[str, Any]] = []
            for file in data:
                partitions = _partition_values(file[len(batch) + 1 :])
                rows += [{**row, **partitions} for row in self._rows(file)]
            out[batch] = (rows, record is not None)
        return out

    def _check_whole(self, batch: str, record: str | None, data: list[str]) -> None:
        named = set() if record is None else {f"{batch}/{f}" for f in json.loads(self._call(record, "OPEN"))["files"]}
        if record is None or named != set(data):
            found = f"{batch}: {len(data)} files visible, its record names {len(named) if record else 'none'}"
            with self._lock:
                if found not in self.torn:
                    self.torn.append(found)

    def poll_once(self) -> None:
        """Read what is visible now, and remember it (see :meth:`verdict`)."""
        rows = self.read()
        with self._lock:
            self.seen |= set(rows)

    def verdict(self, expected: Counter[str], *, key: Callable[[dict[str, Any]], Any] | None = None) -> HdfsVerdict:
        """The final read against the rows ``expected``, canonical (see :func:`canonical`); compared by ``key`` of
        each row when given (the columns a test's input names a row by)."""
        self.stop()
        final = keyed(self.read(), key)
        with self._lock:
            return HdfsVerdict(
                **tally(final, keyed(expected, key), keyed(Counter(self.seen), key)), torn=list(self.torn)
            )


def webhdfs_get(bases: Sequence[str], path: str, op: str, *, user: str, **params: str) -> bytes:
    """One WebHDFS GET of ``path`` (``op``: LISTSTATUS, OPEN, ...), at the first NameNode of ``bases``
    (``http://host:port/webhdfs/v1``) that answers it: a standby refuses with 403 StandbyException, a NameNode down
    or failing over refuses the connection. FileNotFoundError when the path is not there."""
    query = urllib.parse.urlencode({"op": op, "user.name": user, **params})
    failures: list[str] = []
    for base in bases:
        url = f"{base}{urllib.parse.quote(path)}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return bytes(reply.read())
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            if exc.code == 404 and "FileNotFoundException" in body:
                raise FileNotFoundError(path) from None
            failures.append(f"{base}: {exc.code} {body[:200]}")
        except OSError as exc:  # a NameNode down or failing over: the next one
            failures.append(f"{base}: {exc}")
    raise OSError(f"WebHDFS {op} {path}: no NameNode answered ({'; '.join(failures)})")
