"""The OpenAPI 3.1 document served at ``/openapi.json``, generated from the route table
(``_table``) and the pydantic models its operations name (``model_json_schema``).

Nothing here names a path: a route in the table is documented, and only a route in the
table is served. An operation that needs the token documents its 401 by that rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from .._version import __version__
from ._routes import Answer, Operation
from ._schemas import Error, Extension

__all__ = ["UNAUTHORIZED", "openapi_document"]

UNAUTHORIZED = Answer(
    "No valid bearer token (only when the server has one); code `unauthorized`", Error
)
_TEMPLATE = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _TEMPLATE.format(model=name)}


class _Components:
    """The schemas the document's operations refer to, by name."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def ref(self, model: type[BaseModel]) -> dict[str, Any]:
        name = str(model.model_config.get("title") or model.__name__)
        if name not in self.schemas:
            self.schemas[name] = self._schema(model)
        return _ref(name)

    def _schema(self, model: type[BaseModel]) -> dict[str, Any]:
        schema = model.model_json_schema(by_alias=True, ref_template=_TEMPLATE)
        for field in schema.get("properties", {}).values():
            _absent_not_null(field)
        for name, definition in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, definition)
        if not issubclass(model, Extension):
            return schema
        # An extension is its base, then the fields it adds (allOf).
        base = next(b for b in model.__bases__ if issubclass(b, BaseModel))
        inherited = set(base.model_json_schema(by_alias=True)["properties"])
        own = {k: v for k, v in schema["properties"].items() if k not in inherited}
        added: dict[str, Any] = {"type": "object"}
        required = [name for name in schema.get("required", ()) if name in own]
        if required:
            added["required"] = required
        added["properties"] = own
        return {"description": schema.get("description"), "allOf": [self.ref(base), added]}

    def answer(self, answer: Answer) -> dict[str, Any]:
        body: dict[str, Any] = {"description": answer.description}
        if answer.media is not None:
            media: dict[str, Any] = {}
            if answer.model is not None:
                media["schema"] = self.ref(answer.model)
            body["content"] = {answer.media: media}
        if answer.headers:
            body["headers"] = dict(answer.headers)
        return body


def _absent_not_null(field: dict[str, Any]) -> None:
    """Drop ``default: null`` from a field that is never null (it is left out instead)."""
    nullable = "anyOf" in field or "null" in str(field.get("type"))
    if field.get("default", 0) is None and not nullable:
        del field["default"]


def _parameters(model: type[BaseModel] | None, place: str) -> list[dict[str, Any]]:
    """One parameter per field of ``model``, in order, ``in`` ``place``."""
    if model is None:
        return []
    schema = model.model_json_schema(by_alias=True, ref_template=_TEMPLATE)
    required = set(schema.get("required", ()))
    parameters = []
    for name, field in schema["properties"].items():
        field = dict(field)
        field.pop("title", None)
        _absent_not_null(field)
        parameter: dict[str, Any] = {"name": name, "in": place}
        if place == "path" or name in required:
            parameter["required"] = True
        if "description" in field:
            parameter["description"] = field.pop("description")
        if "examples" in field:
            parameter["example"] = field.pop("examples")[0]
        parameter["schema"] = field
        parameters.append(parameter)
    return parameters


def _operation(operation: Operation, components: _Components) -> dict[str, Any]:
    described: dict[str, Any] = {"summary": operation.summary}
    if operation.description is not None:
        described["description"] = operation.description
    if operation.deprecated:
        described["deprecated"] = True
    if operation.open:
        described["security"] = []
    parameters = (
        _parameters(operation.path_params, "path")
        + _parameters(operation.headers, "header")
        + _parameters(operation.query, "query")
    )
    if parameters:
        described["parameters"] = parameters
    if operation.body is not None:
        content = {operation.body_media: {"schema": components.ref(operation.body)}}
        described["requestBody"] = {"required": operation.body_required, "content": content}
    answers = dict(operation.answers)
    if not operation.open:
        answers.setdefault(401, UNAUTHORIZED)
    described["responses"] = {
        str(status): components.answer(answers[status]) for status in sorted(answers)
    }
    return described


def openapi_document(operations: Iterable[Operation]) -> dict[str, Any]:
    """The API's description: every operation's path, parameters, body and answers, and
    the schemas of the models they name."""
    components = _Components()
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        described = _operation(operation, components)
        paths.setdefault(operation.path, {})[operation.method.lower()] = described
    return {
        "openapi": "3.1.0",
        "info": {"title": "asyncbook status server", "version": __version__},
        "components": {
            "schemas": components.schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
