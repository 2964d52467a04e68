"""The OpenAPI schema documents the error answers every endpoint really gives.

drf-spectacular documents what a view declares; the 400, 401, 403 and 404 answers that
come from DRF itself (a bad query parameter or body, missing credentials, a write by a
member, an id nobody may see) are declared nowhere, so a client reading the schema
would not know them. This hook adds them from facts the schema already holds:

- 401 to every operation that requires credentials (``security`` without ``{}``);
- 403 to every write: members read, staff write, and a session write needs its CSRF token;
- 404 to every operation with a path parameter (absent, or another tenant's);
- 400 to every operation with query parameters or a request body;
- 415 to every operation with a request body (a Content-Type it does not read).

An answer a view documents itself is left as it is.
"""

from __future__ import annotations

from typing import Any

DETAIL = "Detail"
PROBLEMS = "Problems"
SAFE_METHODS = {"get", "head", "options"}

_COMPONENTS: dict[str, dict[str, Any]] = {
    DETAIL: {
        "type": "object",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
        "description": "Why the request was refused.",
    },
    PROBLEMS: {
        "type": "object",
        "additionalProperties": {},
        "description": "What is wrong with the request: each offending parameter or field "
        "with its problems, or a ``detail``.",
    },
}


def _answer(component: str, description: str) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{component}"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def document_error_answers(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, component in _COMPONENTS.items():
        schemas.setdefault(name, component)
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            _add_error_answers(method, operation)
    return result


def _add_error_answers(method: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    parameters = operation.get("parameters", [])
    security = operation.get("security", [])
    if security and {} not in security:
        responses.setdefault("401", _answer(DETAIL, "No or invalid credentials."))
    if method not in SAFE_METHODS:
        responses.setdefault(
            "403", _answer(DETAIL, "Not allowed: writes need staff (and a session's CSRF token).")
        )
    if any(parameter["in"] == "path" for parameter in parameters):
        responses.setdefault("404", _answer(DETAIL, "No such object visible to you."))
    if operation.get("requestBody") or any(p["in"] == "query" for p in parameters):
        responses.setdefault(
            "400", _answer(PROBLEMS, "A parameter or the body is invalid; the answer names it.")
        )
    if operation.get("requestBody"):
        responses.setdefault(
            "415", _answer(DETAIL, "The body's Content-Type is not one this operation reads.")
        )
