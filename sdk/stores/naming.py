"""How file sinks name what they write: names unique to an app_id and to a task attempt, safe in any path.

Each sink keeps its own name layout (readers and recovery parse it, so it never changes), built
from these two pieces: :func:`digest`, a short, fixed-width stand-in for any string (an app_id),
and :func:`token`, an id kept as it is when it is already safe in a name (eosink's attempt ids,
UUIDv7s in hex) and replaced by its digest otherwise.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["digest", "token"]


def digest(text: str, hex_chars: int = 16) -> str:
    """The first ``hex_chars`` hex digits of SHA-256 of ``text`` (16: 64 bits, the app_id's stand-in)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:hex_chars]


def token(text: str, safe: str = r"[0-9A-Za-z]{1,64}") -> str:
    """``text`` itself when it matches ``safe`` in full, else 32 hex digits of its digest."""
    return text if re.fullmatch(safe, text) else digest(text, 32)
