"""A mapping entity's SQL, read as exactly one query and written back from its parse tree.

An entity's query is tenant text, and the statements Conveyor sends to Trino put it
inside its own (``SELECT … FROM (<query>) AS entity``, and ``system.unload``'s
``input => TABLE(<query>)``). Pasted, a query ending ``) AS entity), location => '…'``
would close those parentheses and name arguments of its own. So the text is parsed
with sqlglot's Trino grammar, the tree is checked, and what Conveyor sends is the tree
written back out: its parentheses and quotes balanced by construction, its comments
dropped, never the tenant's characters.

A query passes when it is one ``SELECT`` (with ``WITH`` or not) or a set operation of
them, and nothing in it is

- a second statement, or a semicolon anywhere outside a literal;
- a statement other than a query (DDL, DML, ``SHOW``, ``SET``, ``CALL`` …);
- a parameter (``?``): an entity's query takes none;
- a table function (``TABLE(system.unload(…))``, a connector's pass-through
  ``query(…)``): those write files or run text on other systems, and an entity only
  reads tables;
- a table named in a catalog the tenant's binding does not list (``catalogs_named``;
  checked by the services, which know the tenant).

The same checks run when an entity is saved, when a snapshot is made and again in the
worker before anything is sent to Trino.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

DIALECT = "trino"
# The longest query an entity holds; the parser's work grows with the text.
MAX_QUERY_CHARS = 100_000

# Statements that are not queries, wherever they appear in the tree.
_NOT_QUERIES: tuple[type[exp.Expression], ...] = (
    exp.Command,
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Into,
    exp.Set,
    exp.Use,
    exp.Describe,
    exp.Transaction,
    exp.Commit,
    exp.Grant,
)


# sqlglot parses and writes recursively: some fifty nested parentheses reach Python's
# recursion limit, which is a refusal of the query, not a server error.
TOO_DEEP = "nested too deeply (keep parentheses under about 50 levels)"


class UnsafeQuery(ValueError):
    """An entity's SQL that is not exactly one query Conveyor may embed; says why."""


def parse_query(sql: str) -> exp.Query:
    """The one query ``sql`` holds, checked; ``UnsafeQuery`` naming the problem otherwise."""
    if not sql.strip():
        raise UnsafeQuery("the query is empty")
    if len(sql) > MAX_QUERY_CHARS:
        raise UnsafeQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
    try:
        if any(token.token_type == TokenType.SEMICOLON for token in sqlglot.tokenize(sql, read=DIALECT)):
            raise UnsafeQuery("a semicolon: an entity is one query, written without ';'")
        statements = [tree for tree in sqlglot.parse(sql, read=DIALECT) if tree is not None]
    except SqlglotError as error:
        raise UnsafeQuery(f"not a query Trino's grammar reads: {_first_line(error)}") from None
    except RecursionError:
        raise UnsafeQuery(TOO_DEEP) from None
    if len(statements) != 1:
        raise UnsafeQuery(f"one query only, found {len(statements)} statements")
    tree = statements[0]
    if not isinstance(tree, exp.Select | exp.SetOperation):
        raise UnsafeQuery(f"a {_kind(tree)} statement: an entity is a SELECT query")
    for node in tree.walk():
        _check_node(node)
    return tree


def _check_node(node: exp.Expression) -> None:
    if isinstance(node, _NOT_QUERIES):
        raise UnsafeQuery(f"a {_kind(node)} inside the query: an entity only reads")
    if isinstance(node, exp.Placeholder | exp.Parameter):
        raise UnsafeQuery("a parameter (?): an entity's query takes none")
    if isinstance(node, exp.Kwarg) or (
        isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier)
    ):
        raise UnsafeQuery("a table function: an entity's query reads tables only")


def _kind(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    return type(node).__name__.upper()


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0][:300] if str(error) else type(error).__name__


def catalogs_named(tree: exp.Expression) -> set[str]:
    """The catalogs the query's table references name explicitly (``catalog.schema.t``);
    the others are read in the session's catalog, the entity's own."""
    return {
        _identifier(table.args["catalog"])
        for table in tree.find_all(exp.Table)
        if table.args.get("catalog") is not None
    }


def _identifier(node: exp.Expression) -> str:
    # Trino's catalog names are lower case and it reads them case-insensitively, quoted
    # or not: "HR" is hr.
    return node.name.lower()


def write(tree: exp.Expression) -> str:
    """The tree as Trino SQL, without comments."""
    try:
        return tree.sql(dialect=DIALECT, comments=False)
    except RecursionError:
        raise UnsafeQuery(TOO_DEEP) from None


def entity_select(sql: str, columns: list[str]) -> str:
    """``SELECT "c1", "c2" … FROM (<the query>) AS entity``, built from the parse tree:
    the mapping's columns in its order, whatever order the query selects them in."""
    inner = parse_query(sql)
    picked = [exp.column(name, quoted=True) for name in columns]
    return write(exp.select(*picked).from_(inner.subquery("entity")))


def checked(sql: str) -> str:
    """``sql`` parsed, checked and written back: what the worker sends, so that a job
    row changed behind the services' back still reaches Trino as one query."""
    return write(parse_query(sql))
