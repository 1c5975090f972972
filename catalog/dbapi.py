"""A PEP 249 (DB-API 2.0) module over a live catalog: `catalog.dbapi.connect(path)`.

It is the driver under the `dumpcat://` SQLAlchemy dialect (catalog/sqlalchemy_dialect.py), and
works on its own for code that speaks DB-API. A connection opens the catalog in this process (no
server); every statement passes the same guard as `Catalog.sql` (catalog/guard.py: one query, no
writes, no file access, no settings) and runs on the catalog as it is at that moment: the views
follow each snapshot an ingest commits, as `Catalog.sql` does. Refused statements raise
`ProgrammingError` with the guard's reason (`.sqlstate` holds the code the server would send);
the connection stays usable.

Parameters are DuckDB's: `?` with a sequence (the declared `paramstyle`, what SQLAlchemy sends),
or `$name` with a mapping.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import duckdb

from catalog.api import Catalog
from catalog.guard import Refused, classify_query
from ingest.storage.store import CatalogError

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections (one DuckDB cursor at a time)
paramstyle = "qmark"


# -- PEP 249 exceptions -----------------------------------------------------------------------------


class Warning(Exception):
    """PEP 249's Warning (never raised: there is nothing to warn about)."""


class Error(Exception):
    """Base of every error this module raises; `sqlstate` is set when the guard refused."""

    sqlstate: str | None = None


class InterfaceError(Error):
    """Misuse of the interface: a closed connection or cursor, a fetch with no query."""


class DatabaseError(Error):
    """An error of the catalog or of the query engine."""


class DataError(DatabaseError):
    """A value the query could not convert or compute (a bad cast, a division by zero)."""


class OperationalError(DatabaseError):
    """The catalog could not be opened or read."""


class IntegrityError(DatabaseError):
    """PEP 249's IntegrityError (a read-only catalog has no constraints to break)."""


class InternalError(DatabaseError):
    """An internal error of the query engine."""


class ProgrammingError(DatabaseError):
    """A statement refused by the guard, or one that does not parse or bind."""


class NotSupportedError(DatabaseError):
    """A statement or method the catalog does not support (transactions that write, ...)."""


def _translate(exc: duckdb.Error) -> DatabaseError:
    """A DuckDB error as this module's class of the same PEP 249 kind, with its first line."""
    message = str(exc).strip() or type(exc).__name__
    for theirs, ours in (
        (duckdb.ProgrammingError, ProgrammingError),
        (duckdb.DataError, DataError),
        (duckdb.IntegrityError, IntegrityError),
        (duckdb.NotSupportedError, NotSupportedError),
        (duckdb.InternalError, InternalError),
        (duckdb.OperationalError, OperationalError),
    ):
        if isinstance(exc, theirs):
            return ours(message)
    return DatabaseError(message)


def _refused(exc: Refused) -> ProgrammingError:
    err = ProgrammingError(f"refused: {exc}")
    err.sqlstate = exc.sqlstate
    return err


# -- PEP 249 types ----------------------------------------------------------------------------------


class _TypeSet(frozenset):
    """A PEP 249 type object: equal to every `type_code` (a DuckDB type name) of its kind."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other.upper() in self or other.upper().split("(")[0] in self
        return frozenset.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = frozenset.__hash__


STRING = _TypeSet({"VARCHAR", "UUID", "ENUM", "JSON"})
BINARY = _TypeSet({"BLOB", "BIT"})
NUMBER = _TypeSet(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
     "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL"}
)  # fmt: skip
DATETIME = _TypeSet(
    {"DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS",
     "TIMESTAMP_NS", "TIME WITH TIME ZONE", "INTERVAL"}
)  # fmt: skip
ROWID = _TypeSet({"BIGINT"})

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    return Timestamp(*time.localtime(ticks)[:6])


# -- connections and cursors ------------------------------------------------------------------------

Params = Sequence[Any] | Mapping[str, Any] | None


def connect(path: str | os.PathLike) -> Connection:
    """Open the catalog at `path` (a dumpcat catalog folder) for guarded, read-only queries."""
    try:
        catalog = Catalog.open(path)
    except (CatalogError, OSError) as exc:
        raise OperationalError(str(exc)) from exc
    return Connection(catalog)


class Connection:
    """A catalog opened for queries. Read-only, so `commit` and `rollback` have nothing to do."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.closed = False

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def commit(self) -> None:
        self._check()

    def rollback(self) -> None:
        self._check()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.catalog.close()

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError("the connection is closed")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # PEP 249's optional extension: the exceptions as attributes of the connection
    Error = Error
    Warning = Warning
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError


class Cursor:
    """Runs one guarded query at a time; its rows are fetched from DuckDB's result as asked."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._cur: duckdb.DuckDBPyConnection | None = None
        self.description: list[tuple] | None = None
        self.rowcount = -1  # PEP 249: not known for a query before its rows are fetched
        self.closed = False

    def execute(self, operation: str, parameters: Params = None) -> Cursor:
        """Run one query (refused with ProgrammingError unless the guard allows it)."""
        self._check()
        self._release()
        if not isinstance(operation, str):
            raise ProgrammingError(f"the statement must be a string, not {type(operation).__name__}")
        try:
            text = classify_query(operation)
        except Refused as exc:
            raise _refused(exc) from None
        params = _params(parameters) if parameters else None  # no parameters: not a prepared statement
        self._cur = self._run(text, params)
        desc = self._cur.description
        self.description = None if desc is None else [(d[0], str(d[1]), *[None] * 5) for d in desc]
        return self

    def _run(self, text: str, params: Params) -> duckdb.DuckDBPyConnection:
        """Catalog.sql's execution, keeping the DuckDB cursor for fetching: on a cursor over the
        catalog's current views; if a parquet file vanished under the query (a live ingest
        compacted and purged it), once more on the new snapshot."""
        catalog = self.connection.catalog
        for attempt in (1, 2):
            try:
                cur = catalog.cursor()
            except (CatalogError, OSError) as exc:  # the catalog's folder or snapshot went away
                raise OperationalError(str(exc)) from exc
            except duckdb.Error as exc:
                raise _translate(exc) from None
            try:
                cur.execute(text, params)
                return cur
            except duckdb.IOException as exc:
                cur.close()
                if attempt == 2 or catalog.store.union_token() == catalog._token:
                    raise _translate(exc) from None
            except duckdb.Error as exc:
                cur.close()
                raise _translate(exc) from None
        raise AssertionError("unreachable")

    def executemany(self, operation: str, seq_of_parameters: Sequence[Params]) -> Cursor:
        """Run the query once per parameter set; the last one's rows can be fetched."""
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
        return self

    def _result(self) -> duckdb.DuckDBPyConnection:
        self._check()
        if self._cur is None:
            raise InterfaceError("no query has been run: call execute() first")
        return self._cur

    def fetchone(self) -> tuple | None:
        try:
            return self._result().fetchone()
        except duckdb.Error as exc:
            raise _translate(exc) from None

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        try:
            return self._result().fetchmany(self.arraysize if size is None else size)
        except duckdb.Error as exc:
            raise _translate(exc) from None

    def fetchall(self) -> list[tuple]:
        try:
            return self._result().fetchall()
        except duckdb.Error as exc:
            raise _translate(exc) from None

    def fetch_arrow_table(self) -> Any:
        """The remaining rows as a pyarrow Table (not PEP 249: what `Catalog.sql` returns)."""
        try:
            return self._result().fetch_arrow_table()
        except duckdb.Error as exc:
            raise _translate(exc) from None

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes: object) -> None:
        pass

    def setoutputsize(self, size: object, column: object = None) -> None:
        pass

    def close(self) -> None:
        self._release()
        self.closed = True

    def _release(self) -> None:
        cur, self._cur = self._cur, None
        self.description = None
        if cur is not None:
            cur.close()

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError("the cursor is closed")
        self.connection._check()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _params(parameters: Sequence[Any] | Mapping[str, Any]) -> list | dict:
    if isinstance(parameters, Mapping):
        return dict(parameters)
    if isinstance(parameters, str | bytes) or not isinstance(parameters, Sequence):
        raise ProgrammingError(
            f"parameters must be a sequence (for ?) or a mapping (for $name), not {type(parameters).__name__}"
        )
    return list(parameters)
