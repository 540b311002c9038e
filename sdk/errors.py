"""The one error tree of eosink.

Every error says what went wrong and what to do about it. The class tells the
strategies how to react::

    EosinkError
     ├── ConfigurationError            terminal: fix the configuration, then restart
     │    ├── CheckpointMismatchError  a new checkpoint met an app_id with committed batches
     │    ├── AuthenticationError      the sink refused the credentials (user, password, SASL)
     │    ├── TlsError                 no trusted TLS session: untrusted certificate, host name, TLS off
     │    └── PermissionDeniedError    the credentials lack a grant (``.permission`` names it)
     ├── SchemaError                   terminal: the data does not fit the sink; nothing became visible
     ├── BadRecordError                terminal: one record cannot be written (null key, too large, ...)
     ├── TransientError                safe to retry (bounded backoff); the outcome may be either
     ├── AmbiguousCommitError          the outcome of a commit is unknown: resolve with commit_status
     ├── CommitAbortedError            prepared work vanished before it could be committed
     │    └── PreparedWorkLostError    ... of a batch Spark's commit log holds: rewind the checkpoint
     │         └── CommittedWorkLostError  the sink lost batches it had committed (a failover): rewind
     ├── FencedError                   a newer writer owns the app_id: this one must stop
 ├── QueryStoppedError             a batch began after the query was asked to stop: not written
     ├── NonDeterministicReplayError   a replayed batch differs from the one already committed
     ├── InjectedFault                 raised by an enabled fault point (tests only)
     └── ServiceError                  a local test service could not be provisioned, started or checked

Terminal errors stop the query before anything of the batch becomes visible (under
the idempotent strategy, rows already upserted stay, and the replay overwrites them);
after the fix, a restart from the same checkpoint resumes with nothing lost and
nothing duplicated.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AmbiguousCommitError",
    "AuthenticationError",
    "BadRecordError",
    "CheckpointMismatchError",
    "CommitAbortedError",
    "CommittedWorkLostError",
    "ConfigurationError",
    "EosinkError",
    "FencedError",
    "InjectedFault",
    "NonDeterministicReplayError",
    "PermissionDeniedError",
    "PreparedWorkLostError",
    "QueryStoppedError",
    "SchemaError",
    "ServiceError",
    "TlsError",
    "TransientError",
]


class EosinkError(Exception):
    """Base of every eosink error. ``problem`` and ``fix`` are also kept as attributes."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem} Fix: {fix}")

    def __reduce__(self) -> tuple[type[EosinkError], tuple[str, str | None], dict[str, object]]:
        # Errors cross process boundaries (executors -> driver); keep them picklable.
        return (type(self), (self.problem, self.fix), self.__dict__)


class ConfigurationError(EosinkError):
    """The sink, strategy or query is configured in a way that cannot be exactly-once."""


class CheckpointMismatchError(ConfigurationError):
    """The sink holds batches of this app_id that the current Spark checkpoint does not know."""


class AuthenticationError(ConfigurationError):
    """The sink refused who we are: a wrong user or password, an unknown SASL user, a bad key pair.

    The message names the account and the server, never the secret.
    """


class TlsError(ConfigurationError):
    """No trusted TLS session: the server's certificate is not signed by a trusted CA, names another
    host, or one side requires TLS the other does not speak."""


class PermissionDeniedError(ConfigurationError):
    """The credentials were accepted but lack a permission the sink needs.

    ``permission`` names it (a privilege on an object, a Kafka ACL, an S3 policy action, an HDFS
    permission); the fix is the statement or command that grants it. Raised before anything of the
    batch becomes visible (under the idempotent strategy, rows upserted before a refusal stay, and
    the replay overwrites them).
    """

    def __init__(self, problem: str, fix: str | None = None, *, permission: str | None = None) -> None:
        super().__init__(problem, fix)
        self.permission = permission


class SchemaError(EosinkError):
    """The batch's schema does not fit the sink (missing column, incompatible type, ...)."""


class BadRecordError(EosinkError):
    """A record cannot be written: null key, oversized value, constraint violation."""


class TransientError(EosinkError):
    """A temporary failure (sink down, timeout, a dropped connection): safe to retry, the outcome may be either.

    The operation may have taken effect before the failure (a reply lost on the wire), so a
    retry must be harmless either way: ``commit`` and ``abort`` are idempotent, ``pre_commit``
    leaves at worst an orphan that recovery aborts. Only a commit whose own atomic step may
    have happened raises :class:`AmbiguousCommitError` instead, to be resolved by status.
    """


class AmbiguousCommitError(EosinkError):
    """A commit request may or may not have taken effect (its reply was lost)."""


class CommitAbortedError(EosinkError):
    """Prepared work of a batch was aborted or lost before it could be committed."""


class PreparedWorkLostError(CommitAbortedError):
    """Spark's commit log holds a batch whose work the sink no longer has: Spark will never replay it.

    A 2PC batch's prepared work vanished before eosink committed it (a transaction timeout, a
    lifecycle rule, ``ROLLBACK PREPARED`` by hand, a deleted temporary directory), or the sink
    lost a batch it had committed (its bundle is gone). Continuing would lose the batch's rows
    silently, so the query stops before it writes anything of a later batch. The fix is to rewind
    the checkpoint to the lost batch (``eosink recover --rewind``), so that Spark runs it again.
    """

    def __init__(
        self,
        problem: str,
        fix: str | None = None,
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
        committables: tuple[str, ...] = (),
        sink: str | None = None,
    ) -> None:
        super().__init__(problem, fix)
        self.app_id = app_id
        self.batch_id = batch_id
        self.committables = committables
        self.sink = sink
        """The fan-out member whose work is lost (:mod:`eosink.fanout`); None for a query with one sink."""


class CommittedWorkLostError(PreparedWorkLostError):
    """The sink no longer holds batches it committed: ``batches`` (oldest first), which Spark will never replay.

    A server that acknowledges a commit and then loses it: a failover to an asynchronous standby
    that had not received the commit, a restore from a backup, an old primary that accepted writes
    after a standby was promoted (split brain). The sink finds out at its next commit (the batch
    it follows is gone) or at the query's start; ``server`` says what changed (e.g. PostgreSQL's
    timeline switch). The way back is the same as for lost prepared work: ``eosink recover
    --rewind`` to the first lost batch, so that Spark runs the lost batches again from its source.
    """

    def __init__(
        self,
        problem: str,
        fix: str | None = None,
        *,
        batches: tuple[int, ...] = (),
        server: str | None = None,
        **where: Any,
    ) -> None:
        super().__init__(problem, fix, **where)  # app_id, batch_id, committables, sink
        self.batches = batches
        self.server = server
        """What the sink knows of the change of its server (None: nothing)."""


class FencedError(EosinkError):
    """A newer writer (higher epoch) has taken over this app_id; this writer is a zombie."""


class QueryStoppedError(EosinkError):
    """A batch began after :meth:`eosink.spark.Query.stop` asked the query to stop: nothing of it was written,
    and the next start runs it. :meth:`~eosink.spark.Query.awaitTermination` does not raise it."""


class NonDeterministicReplayError(EosinkError):
    """A replay of an already committed batch produced different data."""

    def __init__(self, problem: str, fix: str | None = None, *, batch_id: int | None = None) -> None:
        super().__init__(problem, fix)
        self.batch_id = batch_id


class InjectedFault(EosinkError):
    """Raised by a fault point configured with the ``raise`` action."""


class ServiceError(EosinkError):
    """A service of the test harness (:mod:`eosink.services`) could not be provisioned, started or checked."""
