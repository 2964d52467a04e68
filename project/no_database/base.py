"""A database backend that refuses every use with the one thing to do about it.

An export worker runs without ``DATABASE_URL`` on purpose (it never opens Conveyor's
database), and so does ``collectstatic`` while the image is built; both only load the
settings. Django's own placeholder for a missing database (``dummy``) would answer any
other process with "please supply the ENGINE value", which names nothing an operator
sets.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.dummy import base as dummy

MESSAGE = (
    "DATABASE_URL is unset, and this installation has no embedded PostgreSQL to use "
    "instead (a development tool of a checkout, devtools/, which the image leaves out): "
    "set DATABASE_URL to Conveyor's PostgreSQL."
)


def refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise ImproperlyConfigured(MESSAGE)


class DatabaseOperations(dummy.DatabaseOperations):
    quote_name = refuse


class DatabaseClient(dummy.DatabaseClient):
    runshell = refuse


class DatabaseIntrospection(dummy.DatabaseIntrospection):
    get_table_list = refuse
    get_table_description = refuse
    get_relations = refuse
    get_indexes = refuse


class DatabaseWrapper(dummy.DatabaseWrapper):
    _cursor = refuse
    ensure_connection = refuse
    get_connection_params = refuse
    _commit = refuse
    _savepoint_commit = refuse
    _set_autocommit = refuse
    client_class = DatabaseClient
    introspection_class = DatabaseIntrospection
    ops_class = DatabaseOperations
