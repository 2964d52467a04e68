"""The query engines an export runs on, built from settings: PostgreSQL (Conveyor's own
datasets) and Trino/Starburst (mapping entities that are queries)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exports import conf

if TYPE_CHECKING:
    from exports.engines.postgres import PostgresEngine
    from exports.engines.trino import TrinoEngine


class NotConfigured(Exception):
    """A job for an engine this process has no settings for."""


def trino_engine() -> TrinoEngine:
    from exports.engines.trino import TrinoEngine, TrinoSettings

    url = conf.get("TRINO_URL")
    if not url:
        raise NotConfigured("no Trino is configured (EXPORTS_TRINO_URL)")
    return TrinoEngine(
        TrinoSettings(
            url=url,
            user=conf.get("TRINO_USER"),
            password=conf.get("TRINO_PASSWORD"),
            client_tags=tuple(conf.get("CLIENT_TAGS")),
            source=conf.get("SOURCE"),
            request_timeout=float(conf.get("TRINO_REQUEST_TIMEOUT_SECONDS")),
            verify=bool(conf.get("TRINO_VERIFY")),
            storage_options=dict(conf.get("STORAGE_OPTIONS")),
            export_root=conf.storage_url(),
        )
    )


def postgres_dsn() -> str:
    """The read-only connection for datasets; the app's own database unless set apart."""
    dsn = conf.get("POSTGRES_URL")
    if dsn:
        return dsn
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    params = connection.get_connection_params()
    keys = ("host", "port", "dbname", "user", "password")
    return make_conninfo(**{key: str(params[key]) for key in keys if params.get(key)})


def postgres_engine() -> PostgresEngine:
    from exports.engines.postgres import PostgresEngine

    return PostgresEngine(postgres_dsn(), storage_options=dict(conf.get("STORAGE_OPTIONS")))
