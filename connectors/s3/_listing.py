"""Listing eosink's numbered keys (markers, segments) without reading a folder from its start.

S3 lists a folder in ascending key order only, from an optional ``StartAfter`` key, at most 1000
keys a page. eosink's markers and segments are named by zero-padded batch ids, so they sort as
numbers do: the oldest is one one-key listing away, and the newest, when a folder holds more than
one page, is found by :func:`newest_numbered` with one-key listings from a known key (doubling,
then halving the distance), a few dozen requests for any history instead of one page per 1000
keys. That is what keeps finding the last bundle independent of how long the history is, also
in a bucket whose markers are not folded yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PAGE", "first_numbered", "list_all", "list_page", "newest_numbered"]

PAGE = 1000
"""Keys per listing page (S3's most)."""

Number = Callable[[str], "int | None"]
"""The number a key carries (None for a key that is not one of the folder's)."""


def list_page(
    client: Any, bucket: str, prefix: str, start_after: str | None = None, max_keys: int | None = None
) -> tuple[list[str], bool]:
    """One listing page (of at most ``max_keys``, default :data:`PAGE`) under ``prefix`` after ``start_after``:
    its keys, and whether more follow."""
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys or PAGE}
    if start_after is not None:
        args["StartAfter"] = start_after
    reply = client.list_objects_v2(**args)
    return [str(o["Key"]) for o in reply.get("Contents", [])], bool(reply.get("IsTruncated"))


def list_all(client: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix``, page by page (for folders kept small, as the upload intents are)."""
    keys: list[str] = []
    after: str | None = None
    while True:
        page, more = list_page(client, bucket, prefix, after)
        keys += page
        if not more or not page:
            return keys
        after = page[-1]


def first_numbered(client: Any, bucket: str, prefix: str, number: Number, start_after: str | None = None) -> str | None:
    """The first key under ``prefix`` (after ``start_after``) that carries a number; None when there is none.
    One one-key listing (one more per foreign key in the way, which eosink's folders do not hold)."""
    while True:
        keys, more = list_page(client, bucket, prefix, start_after, max_keys=1)
        for key in keys:
            if number(key) is not None:
                return key
        if not more or not keys:
            return None
        start_after = keys[-1]


def newest_numbered(
    client: Any, bucket: str, prefix: str, after: Callable[[int], str], number: Number, known: str
) -> str:
    """The key with the largest number under ``prefix``, given one that exists (``known``).

    ``after(n)`` is a ``StartAfter`` key that every key numbered above ``n`` follows and no key
    numbered ``n`` or below does. Costs about ``2 * log2(newest - known)`` one-key listings.
    """
    low_key = known
    start = number(known)
    if start is None:
        raise ValueError(f"{known!r} carries no number")
    low = start

    def at_least(n: int) -> tuple[int, str] | None:
        key = first_numbered(client, bucket, prefix, number, after(n - 1))
        found = None if key is None else number(key)
        return None if key is None or found is None else (found, key)

    step = 1
    high: int | None = None
    while high is None:  # gallop: the newest is at least `low`, and below `low + step` once nothing is there
        found = at_least(low + step)
        if found is None:
            high = low + step - 1
        else:
            low, low_key = found
            step *= 2
    while low < high:  # halve: the newest is in low..high, and `low` exists
        mid = (low + high + 1) // 2
        found = at_least(mid)
        if found is None:
            high = mid - 1
        else:
            low, low_key = found
    return low_key
