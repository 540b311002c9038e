"""An independent reader of an S3 target: the judge of fault tests and chaos runs on an object store.

It shares no client with the sink (pyarrow's S3 file system, the AWS C++ SDK, where the sink writes with boto3),
and reads the target two ways, as the two kinds of reader of :doc:`docs/connectors/s3` do:

* through the commit markers (and the segments they are folded into): the objects each committed batch names;
  a named object missing, or of another size than its marker says, is a torn batch;
* by listing: every data object under the prefix (what ``spark.read`` of the prefix sees, committed or not
  yet marked).

Polled while a run goes on and once after, it reports lost and duplicated rows (through the markers) against the
rows a test wrote, rows read during the run and gone after, and torn batches.
"""

from __future__ import annotations

import io
import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eosink._audit import ReadVerdict, keyed, tally
from eosink._polling import BackgroundPoll

__all__ = ["S3Verdict", "StoreReader", "canonical"]

_OWN = "_eosink"


def canonical(row: dict[str, Any]) -> str:
    """A row in one spelling (sorted keys, values as JSON), so the same row compares equal however it was read."""
    return json.dumps(row, sort_keys=True, default=str)


@dataclass
class S3Verdict(ReadVerdict):
    """What the pyarrow reader found (:class:`~eosink._audit.ReadVerdict`), and what a listing reader sees."""

    listed: int = 0
    """Rows a listing reader sees (every data object, marked or not)."""


class StoreReader(BackgroundPoll):
    """Reads ``bucket/prefix`` at ``endpoint_url`` with pyarrow's S3 client; :meth:`start` polls in the background."""

    def __init__(
        self,
        endpoint_url: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        prefix: str,
        *,
        region: str = "us-east-1",
    ) -> None:
        from pyarrow import fs

        scheme, _, host = endpoint_url.partition("://")
        self._fs = fs.S3FileSystem(
            access_key=access_key,
            secret_key=secret_key,
            endpoint_override=host,
            scheme=scheme,
            region=region,
            force_virtual_addressing=False,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=5),
        )
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.root = f"{bucket}/{self.prefix}"
        self.seen: set[str] = set()
        self.torn: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"StoreReader({self.root!r})"

    # -- the store ---------------------------------------------------------------------------------

    def _files(self, below: str) -> list[Any]:
        from pyarrow import fs

        try:
            infos = self._fs.get_file_info(fs.FileSelector(below, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [i for i in infos if i.type == fs.FileType.File]

    def _read(self, path: str) -> bytes:
        with self._fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def _rows(self, path: str, size: int) -> list[dict[str, Any]]:
        data = self._read(path)
        if len(data) != size:
            raise OSError(f"{path}: read {len(data)} bytes of {size}")
        if path.endswith((".jsonl", ".json")):
            return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(data)).to_pylist()
        return rows

    def _marked(self) -> list[dict[str, Any]]:
        """Every committed batch's marker body: the unfolded markers and the entries of the segments."""
        bodies: list[dict[str, Any]] = []
        for info in self._files(f"{self.root}/{_OWN}"):
            parent = info.path.rsplit("/", 2)[-2]
            if parent == "commits":
                bodies.append(json.loads(self._read(info.path)))
            elif parent == "segments":
                bodies += json.loads(self._read(info.path)).get("markers", [])
        return bodies

    # -- reading -----------------------------------------------------------------------------------

    def read(self) -> tuple[Counter[str], Counter[str]]:
        """(rows through the markers, rows a listing reader sees) now; a marker whose objects are not all there,
        at their size, is noted as torn."""
        present = {i.path[len(self.bucket) + 1 :]: i.size for i in self._files(self.root)}  # by key
        committed: Counter[str] = Counter()
        batches: dict[tuple[str, int], int] = {}
        for body in self._marked():
            batch = body["bundle"]["batch"]
            name = (str(batch["app_id"]), int(batch["batch_id"]))
            batches[name] = batches.get(name, 0) + 1
            for obj in body.get("objects", []):
                key, size = str(obj["key"]), int(obj.get("size", -1))
                if present.get(key) != size:
                    self._note(
                        f"batch {name[1]} of {name[0]!r}: {key} is {present.get(key, 'missing')}, not {size} bytes"
                    )
                    continue
                partition = dict(obj.get("partition") or {})
                committed.update(canonical({**row, **partition}) for row in self._rows(f"{self.bucket}/{key}", size))
        for name, n in batches.items():
            if n > 1:
                self._note(f"batch {name[1]} of {name[0]!r} has {n} markers")
        listed: Counter[str] = Counter()
        for key, size in present.items():
            rel = key[len(self.prefix) + 1 :].split("/")
            if not any(part.startswith((".", "_")) for part in rel):
                partition = dict(part.split("=", 1) for part in rel[:-1] if "=" in part)
                listed.update(canonical({**row, **partition}) for row in self._rows(f"{self.bucket}/{key}", size))
        return committed, listed

    def _note(self, found: str) -> None:
        with self._lock:
            if found not in self.torn:
                self.torn.append(found)

    def poll_once(self) -> None:
        """Read what is committed now, and remember it (see :meth:`verdict`)."""
        committed, _ = self.read()
        with self._lock:
            self.seen |= set(committed)

    def verdict(self, expected: Counter[str], *, key: Callable[[dict[str, Any]], Any] | None = None) -> S3Verdict:
        """The final read against the rows ``expected``, canonical (see :func:`canonical`); compared by ``key`` of
        each row when given."""
        self.stop()
        committed, listed = self.read()
        final = keyed(committed, key)
        with self._lock:
            counts = tally(final, keyed(expected, key), keyed(Counter(self.seen), key))
            return S3Verdict(**counts, torn=list(self.torn), listed=sum(listed.values()))
