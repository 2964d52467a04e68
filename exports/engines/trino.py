"""Exports on Trino/Starburst through the official ``trino`` client.

Every call carries the job's role (Trino's ``X-Trino-Role: system=ROLE{…}`` and the
``X-Use-Case-Id`` header the audit reads), the client tags the resource groups route
on, and the source name. Nothing here sleeps or retries on its own except
``retry_cold_start``, the one retry the direct export makes.

- ``export_direct``: the query run through the DB-API, its rows fetched in batches and
  written to Parquet as they come (flat memory), in the job's column order.
- ``submit_unload``: Starburst's ``system.unload`` posted, answered with the query id
  and next URI at once; ``poll`` follows the next URI one step; ``status`` asks by query
  id (a lost or expired next URI); ``cancel`` deletes the query.

The query of a job is never sent as its row holds it: ``exports.entity_sql`` parses it
as one query and writes it back from the tree (``InvalidQuery`` otherwise, before any
request). The UNLOAD's location and format are bound parameters of the statement, not
text of it (``unload_request``), and the location must lie in the job's snapshot folder
under the tenant's export root.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import trino.auth
import trino.dbapi
from trino.client import ClientSession, TrinoRequest
from trino.exceptions import TrinoQueryError

from exports import entity_sql, parquet
from exports.engines import Cancellation, Cancelled
from exports.spec import Column, JobSpec, relative_inside, snapshot_folder

T = TypeVar("T")
FETCH_ROWS = 10_000
USE_CASE_HEADER = "X-Use-Case-Id"


@dataclass(frozen=True)
class TrinoSettings:
    url: str
    user: str = "conveyor"
    password: str = ""
    client_tags: tuple[str, ...] = ("conveyor-export",)
    source: str = "conveyor-export-worker"
    request_timeout: float = 30.0
    verify: bool = True
    storage_options: dict[str, Any] = field(default_factory=dict)
    # The export root (EXPORTS_STORAGE_URL): an UNLOAD writes only into the job's
    # snapshot folder under it. Empty: the location is not checked (engine tests).
    export_root: str = ""


class EngineError(Exception):
    """A query the engine failed, with its error's name (``FUNCTION_NOT_FOUND`` …)."""

    def __init__(self, message: str, error_name: str = "", error_type: str = "") -> None:
        super().__init__(message)
        self.error_name, self.error_type = error_name, error_type


class UnloadUnavailable(EngineError):
    """The engine has no ``system.unload``: export the job directly instead."""


class ColdStartExhausted(Exception):
    """A direct export that kept timing out on a cold cluster."""


@dataclass(frozen=True)
class Submitted:
    query_id: str
    next_uri: str


@dataclass(frozen=True)
class QueryState:
    state: str  # QUEUED, RUNNING, FINISHED or FAILED
    next_uri: str = ""
    error: str = ""
    error_name: str = ""


def is_unload_missing(error_name: str, message: str) -> bool:
    """The engine's way of saying ``system.unload`` does not exist there."""
    text = message.lower()
    return error_name == "FUNCTION_NOT_FOUND" or (
        "unload" in text and ("not registered" in text or "not found" in text)
    )


class InvalidQuery(EngineError):
    """A job whose query is not one query Conveyor may send, or whose UNLOAD location
    lies outside its snapshot's folder: nothing was sent, and trying again cannot help."""


# Starburst's server-side unload. Its arguments are parameters (``?``), bound by
# EXECUTE IMMEDIATE … USING: Trino binds a parameter as a value of the argument, so no
# location's text can become part of the statement. The input is the job's query as
# written back from its parse tree, whose parentheses are balanced by construction.
UNLOAD_STATEMENT = "SELECT * FROM TABLE(system.unload(input => TABLE({query}), location => ?, format => ?))"
UNLOAD_FORMAT = "PARQUET"


def sql_string(value: str) -> str:
    """``value`` as a Trino string literal: the one place Conveyor quotes text into SQL.
    Trino's literals have no backslash escapes; a quote is written twice."""
    if "\x00" in value:
        raise InvalidQuery("a NUL character cannot be written in a SQL string")
    return "'" + value.replace("'", "''") + "'"


def execute_immediate(statement: str, parameters: list[str]) -> str:
    """One request that prepares ``statement`` and runs it with ``parameters`` bound to
    its ``?`` in order (Trino 418+): as the ``trino`` client's DB-API sends a query with
    parameters, for a submission that must not wait for the query's first rows."""
    bound = ", ".join(sql_string(value) for value in parameters)
    return f"EXECUTE IMMEDIATE {sql_string(statement)} USING {bound}"


def unload_location(job: JobSpec, export_root: str) -> str:
    """The folder the UNLOAD writes into: the job's own, refused unless it lies inside
    the job's snapshot folder under the export root (a job row is no authority on where
    a tenant's files go)."""
    if export_root:
        home = snapshot_folder(export_root, job.tenant_id, job.snapshot_id)
        if relative_inside(job.destination, home) is None:
            raise InvalidQuery(
                f"the job's folder {job.destination!r} is not in its snapshot's folder {home!r}"
            )
    return job.destination


def unload_request(job: JobSpec, export_root: str = "") -> str:
    """The text posted to submit the job's UNLOAD."""
    query = checked_query(job)
    statement = UNLOAD_STATEMENT.format(query=query)
    return execute_immediate(statement, [unload_location(job, export_root), UNLOAD_FORMAT])


def checked_query(job: JobSpec) -> str:
    try:
        return entity_sql.checked(job.sql)
    except entity_sql.UnsafeQuery as error:
        raise InvalidQuery(f"the job's query is refused: {error}") from None


def retry_cold_start(
    call: Callable[[], T],
    *,
    retries: int = 2,
    pause_seconds: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, tried again up to ``retries`` times, ``pause_seconds`` apart, while it
    fails with an error whose type or message says timeout (a resource group waking up);
    any other error is raised at once."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as error:
            if isinstance(error, InvalidQuery) or (
                "timeout" not in f"{type(error).__name__} {error}".lower()
            ):
                raise
            if attempt == retries:
                raise ColdStartExhausted(
                    f"Direct export failed after {retries} retries: {type(error).__name__}"
                ) from error
            sleep(pause_seconds)
    raise AssertionError("unreachable")


class TrinoEngine:
    def __init__(self, settings: TrinoSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        self._scheme = parts.scheme or "http"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._scheme == "https" else 8080)

    # -- connections --------------------------------------------------------------------

    def _auth(self) -> Any:
        if not self.settings.password:
            return None
        return trino.auth.BasicAuthentication(self.settings.user, self.settings.password)

    def _session(self, role: str, catalog: str = "") -> ClientSession:
        return ClientSession(
            user=self.settings.user,
            catalog=catalog or None,
            source=self.settings.source,
            client_tags=list(self.settings.client_tags),
            roles={"system": role},
            headers={USE_CASE_HEADER: role},
        )

    def _request(self, role: str, catalog: str = "") -> TrinoRequest:
        return TrinoRequest(
            self._host,
            self._port,
            self._session(role, catalog),
            http_scheme=self._scheme,
            auth=self._auth(),
            max_attempts=1,
            request_timeout=self.settings.request_timeout,
            verify=self.settings.verify,
        )

    # -- direct export ------------------------------------------------------------------

    def export_direct(
        self, job: JobSpec, file_name: str, cancellation: Cancellation | None = None
    ) -> parquet.Written:
        """Run the job's query and write its rows into ``job.destination/file_name``; a
        ``cancellation`` cancels the query on Trino and the export raises ``Cancelled``,
        its partial file removed."""
        cancellation = cancellation or Cancellation()
        query = checked_query(job)
        connection = trino.dbapi.connect(
            host=self._host,
            port=self._port,
            http_scheme=self._scheme,
            user=self.settings.user,
            auth=self._auth(),
            catalog=job.catalog or None,
            source=self.settings.source,
            client_tags=list(self.settings.client_tags),
            roles={"system": job.starburst_role},
            http_headers={USE_CASE_HEADER: job.starburst_role},
            max_attempts=1,
            request_timeout=self.settings.request_timeout,
            verify=self.settings.verify,
        )
        try:
            cursor = connection.cursor()
            cancellation.on_cancel(cursor.cancel)
            cancellation.check()
            cursor.execute(query)
            found = [(column[0], column[1]) for column in cursor.description or []]
            names = [name for name, _ in found]
            if names != list(job.column_names):
                raise EngineError(f"the query's columns are {names}, the job's {list(job.column_names)}")
            schema = parquet.arrow_schema([Column(name, type_) for name, type_ in found])
            try:
                return parquet.write_batches(
                    cancellation.between(_batches(cursor, schema)),
                    schema,
                    job.destination,
                    file_name,
                    self.settings.storage_options,
                )
            except BaseException:
                # The engine need not finish a query nobody will read.
                with contextlib.suppress(Exception):
                    cursor.cancel()
                raise
        except Exception as error:
            if cancellation.cancelled:
                raise Cancelled(cancellation.reason) from error
            if isinstance(error, TrinoQueryError):
                raise _engine_error(error) from error
            raise
        finally:
            connection.close()

    # -- UNLOAD -------------------------------------------------------------------------

    def submit_unload(self, job: JobSpec) -> Submitted:
        text = unload_request(job, self.settings.export_root)
        request = self._request(job.starburst_role, job.catalog)
        try:
            status = request.process(request.post(text))
        except TrinoQueryError as error:
            raise _engine_error(error) from error
        return Submitted(status.id, status.next_uri or "")

    def poll(self, next_uri: str, role: str) -> QueryState:
        request = self._request(role)
        try:
            status = request.process(request.get(next_uri))
        except TrinoQueryError as error:
            failed = _engine_error(error)
            return QueryState("FAILED", error=str(failed), error_name=failed.error_name)
        state = str(status.stats.get("state", "RUNNING"))
        if not status.next_uri:
            return QueryState("FINISHED" if state != "FAILED" else "FAILED")
        return QueryState(state if state in ("QUEUED", "RUNNING") else "RUNNING", status.next_uri)

    def status(self, query_id: str, role: str) -> QueryState:
        request = self._request(role)
        response = request.get(request.get_url(f"/v1/query/{query_id}"))
        if not response.ok:
            request.raise_response_error(response)
        info = response.json()
        state = str(info.get("state", ""))
        if state == "FAILED":
            code = info.get("errorCode") or {}
            message = (info.get("failureInfo") or {}).get("message") or code.get("name") or "failed"
            return QueryState(
                "FAILED",
                error=f"{code.get('name', 'FAILED')}: {message}",
                error_name=str(code.get("name", "")),
            )
        if state == "FINISHED":
            return QueryState("FINISHED")
        return QueryState("RUNNING" if state not in ("QUEUED",) else "QUEUED")

    def cancel(self, query: str, role: str) -> None:
        """Cancel a query by its next URI or its id; one already ended is left as it is."""
        request = self._request(role)
        url = query if "://" in query else request.get_url(f"/v1/query/{query}")
        response = request.delete(url)
        if not response.ok and response.status_code not in (404, 410):
            request.raise_response_error(response)


def _engine_error(error: TrinoQueryError) -> EngineError:
    """Trino's own words: its error's name and message, and the query's id (which the
    cluster's operators look it up by), not the client library's repr."""
    name, kind = error.error_name or "", error.error_type or ""
    message = f"{name}: {error.message}" if name else error.message
    if error.query_id:
        message += f" (query {error.query_id})"
    if is_unload_missing(name, error.message or ""):
        return UnloadUnavailable(message, name, kind)
    return EngineError(message, name, kind)


def _batches(cursor: Any, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    while rows := cursor.fetchmany(FETCH_ROWS):
        columns = list(zip(*rows, strict=True))
        yield pa.record_batch(
            [_array(values, field.type) for values, field in zip(columns, schema, strict=True)], schema=schema
        )


def _array(values: tuple[Any, ...], type_: pa.DataType) -> pa.Array:
    if pa.types.is_string(type_):
        # The client gives uuid columns as uuid.UUID: their text is what the file holds.
        values = tuple(v if v is None or isinstance(v, str) else str(v) for v in values)
    return pa.array(values, type=type_)
