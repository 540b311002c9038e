"""Where a target's committed batches are: its layout, and an app's newest batches without listing its history.

A target's layout is read once per sink (:func:`detect_layout`): ``_eosink/layout.json`` names a
grouped target; a target without one that holds batch directories right under it was written by
eosink before ranges and stays flat until it is migrated; a target with neither is new, and its
first writer makes it grouped (:func:`store_layout`). An app's newest batches are found by listing
the target (a few range directories per app) and then its ranges from the newest back, one at a
time (:func:`newest_batches`): finding the last bundle costs the same after 10 batches and after
100,000. A flat target lists every batch instead, which is why the sink warns once per process.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator

from eosink.connectors.hdfs import _layout as L
from eosink.errors import ConfigurationError
from eosink.stores.hdfs import Fs

__all__ = ["all_batches", "detect_layout", "layout_file", "newest_batches", "newest_of_each_app", "store_layout"]

log = logging.getLogger("eosink.hdfs")

MIGRATION_HINT = (
    "Stop the query and the target's readers, run eosink.connectors.hdfs.admin.migrate_layout(config) once, then "
    "restart them (docs/connectors/hdfs.md, Flat targets of earlier versions)."
)
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def layout_file(root: str) -> str:
    return f"{root}/{L.OWN_DIR}/{L.LAYOUT_FILE}"


def detect_layout(fs: Fs, root: str, target_url: str) -> tuple[L.Layout, bool]:
    """The target's layout, and whether the target has one yet (False: a new target, grouped once written).

    ``layout.json`` decides; without it the target is listed once: batch directories right under it
    make it flat (a warning, once per process, names the migration); range directories without the
    file mean a migration that did not finish (ConfigurationError). A writer stores ``layout.json``
    before its first range directory, so ranges found after the file was missing send us back to read
    it once more: another writer may have started the target between our read and our listing."""
    known = _stored_layout(fs, root, target_url)
    if known is not None:
        return known, True
    flat = ranges = False
    for name in fs.names(root):
        flat = flat or L.flat_batch_of(name) is not None
        ranges = ranges or L.range_of(name) is not None
    if ranges:
        known = _stored_layout(fs, root, target_url)
        if known is not None:
            return known, True
    if ranges:
        raise ConfigurationError(
            f"The target {target_url} holds batch ranges (eosink_range=...) but no {L.OWN_DIR}/{L.LAYOUT_FILE}"
            f"{' and flat batch directories too' if flat else ''}: a migration of its layout did not finish.",
            "Run eosink.connectors.hdfs.admin.migrate_layout(config) again (it finishes the job), then restart.",
        )
    if flat:
        _warn_flat(target_url)
        return L.FLAT, True
    return L.GROUPED, False


def _stored_layout(fs: Fs, root: str, target_url: str) -> L.Layout | None:
    """The layout ``layout.json`` names; None when the target has no such file."""
    text = fs.read_text(layout_file(root))
    if text is None:
        return None
    layout = L.Layout.decode(text)
    if layout is None:
        raise ConfigurationError(
            f"{target_url}/{L.OWN_DIR}/{L.LAYOUT_FILE} is damaged or names a layout this eosink does not "
            f"know: {text[:200]!r}.",
            'Upgrade eosink if a newer one wrote it; else restore it: {"layout": "grouped", "range": 1000}.',
        )
    return layout


def _warn_flat(target_url: str) -> None:
    with _WARNED_LOCK:
        if target_url in _WARNED:
            return
        _WARNED.add(target_url)
    log.warning(
        "eosink: %s has the flat layout of eosink before batch ranges: every committed batch is a directory right "
        "under it, finding the last batch lists them all, and HDFS refuses a directory's 1,048,577th entry (by "
        "default). It is written flat until migrated. %s",
        target_url,
        MIGRATION_HINT,
    )


def store_layout(fs: Fs, root: str, layout: L.Layout) -> L.Layout:
    """Write ``layout.json`` unless it exists (create-only: of two first writers, one wins); the layout it names."""
    fs.create_only(layout_file(root), layout.encode())
    found = L.Layout.decode(fs.read_text(layout_file(root)) or "")
    return found if found is not None else layout


def newest_batches(fs: Fs, root: str, layout: L.Layout, app_id: str) -> Iterator[tuple[int, str]]:
    """(batch id, directory) of ``app_id``'s committed batch directories, newest first.

    Lists the target once, then one range at a time, newest first, only as far as the caller reads:
    the newest batch costs a listing of the target and of one range (a flat target: of every batch)."""
    names = fs.names(root)
    if not layout.grouped:
        flat = sorted((b for b in (L.parse_flat_batch_dir(n, app_id) for n in names) if b is not None), reverse=True)
        yield from ((b, f"{root}/{L.flat_batch_dir_name(app_id, b)}") for b in flat)
        return
    firsts = sorted((f for f in (L.parse_range_dir(n, app_id) for n in names) if f is not None), reverse=True)
    for first in firsts:
        yield from _range_batches(fs, f"{root}/{L.range_dir_name(app_id, first)}")


def _range_batches(fs: Fs, directory: str) -> Iterator[tuple[int, str]]:
    """(batch id, directory) of the batch directories in one range directory, newest first."""
    found = (L.parse_grouped_batch_dir(name) for name in fs.names(directory))
    ids = sorted((b for b in found if b is not None), reverse=True)
    for batch_id in ids:
        yield batch_id, f"{directory}/{L.grouped_batch_dir_name(batch_id)}"


def newest_of_each_app(fs: Fs, root: str, layout: L.Layout, per_app: int) -> Iterator[str]:
    """The directories of the newest ``per_app`` batches of every app in the target, from its newest range."""
    names = fs.names(root)
    if not layout.grouped:
        by_app: dict[str, list[int]] = {}
        for key, batch_id in (f for f in map(L.flat_batch_of, names) if f is not None):
            by_app.setdefault(key, []).append(batch_id)
        for key, ids in sorted(by_app.items()):
            for batch_id in sorted(ids, reverse=True)[:per_app]:
                yield f"{root}/{L.BATCH_PREFIX}{key}-{L.batch_name(batch_id)}"
        return
    newest: dict[str, int] = {}
    for key, first in (r for r in map(L.range_of, names) if r is not None):
        newest[key] = max(first, newest.get(key, first))
    for key, first in sorted(newest.items()):
        batches = _range_batches(fs, f"{root}/{L.RANGE_PREFIX}{key}-{L.batch_name(first)}")
        yield from (directory for _, directory in itertools.islice(batches, per_app))


def all_batches(fs: Fs, root: str, app_id: str | None = None) -> list[tuple[str, int, str]]:
    """(app key, batch id, directory) of every committed batch directory of ``app_id`` (None: of every app), in
    either layout, by app key and batch id; for readers of the whole target, who read every batch anyway."""
    key = None if app_id is None else L.app_key(app_id)
    found: list[tuple[str, int, str]] = []
    for name in fs.names(root):
        flat = L.flat_batch_of(name)
        if flat is not None and key in (None, flat[0]):
            found.append((flat[0], flat[1], f"{root}/{name}"))
        grouped = L.range_of(name)
        if grouped is not None and key in (None, grouped[0]):
            found += [(grouped[0], b, d) for b, d in _range_batches(fs, f"{root}/{name}")]
    return sorted(found)
