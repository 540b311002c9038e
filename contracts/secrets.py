"""Checks that a secret never reaches what a user, a log or an error tracker can see.

``raise Error(...) from None`` only hides the chained error from the default traceback
printer: it stays in ``__context__``, where error trackers, debuggers and ``logging`` of
``exc_info`` still find it. These helpers walk the whole chain, suppressed links included::

    from eosink.contracts.secrets import assert_secret_free

    with pytest.raises(ConfigurationError) as err:
        MyConfig(url="https://user:s3cret@host/%zz")
    assert_secret_free(err.value, ["s3cret"])
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator
from urllib.parse import quote

__all__ = ["assert_secret_free", "exception_chain", "visible_text"]


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception reachable from it through ``__cause__`` and ``__context__``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        grouped = getattr(current, "exceptions", None)  # an exception group (Python >= 3.11)
        if isinstance(grouped, tuple):
            todo += [e for e in grouped if isinstance(e, BaseException)]


def visible_text(obj: object) -> str:
    """Everything that could show ``obj``: for an exception, the text, repr and arguments of every
    exception of its chain (suppressed ones too) and the formatted traceback; else its str and repr."""
    if not isinstance(obj, BaseException):
        return f"{obj}\n{obj!r}"
    parts = ["".join(traceback.format_exception(obj))]
    for exc in exception_chain(obj):
        parts += [str(exc), repr(exc), *(repr(a) for a in exc.args), repr(getattr(exc, "__notes__", ""))]
    return "\n".join(parts)


def assert_secret_free(obj: object, secrets: Iterable[str]) -> None:
    """Fail if any of ``secrets`` (plain or URL-encoded) appears in :func:`visible_text` of ``obj``."""
    text = visible_text(obj)
    for secret in secrets:
        assert secret, "an empty secret proves nothing"
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            assert form not in text, f"a secret ({len(secret)} characters) leaked into {type(obj).__name__}"
