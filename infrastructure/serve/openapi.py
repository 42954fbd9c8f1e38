"""The OpenAPI 3.1 document of the API, built from the route table and the store signatures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel

from runledger.infrastructure.serve.binding import Endpoint, response_adapter

REF_TEMPLATE: Final = "#/components/schemas/{model}"
ERROR_SCHEMA: Final = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    "required": ["code", "message"],
}


def _hoisted(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    components.update(schema.pop("$defs", {}))
    return schema


def _model_schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    return _hoisted(model.model_json_schema(ref_template=REF_TEMPLATE), components)


def _parameters(endpoint: Endpoint, components: dict[str, Any]) -> list[dict[str, Any]]:
    schema = _model_schema(endpoint.url_model, components)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "in": "path" if name in endpoint.path_names else "query",
            "required": name in required or name in endpoint.path_names,
            "schema": field,
        }
        for name, field in schema.get("properties", {}).items()
    ]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF_TEMPLATE.format(model="Error")}}},
    }


def _operation(endpoint: Endpoint, components: dict[str, Any]) -> dict[str, Any]:
    answer = _hoisted(
        response_adapter(endpoint).json_schema(mode="serialization", ref_template=REF_TEMPLATE),
        components,
    )
    operation: dict[str, Any] = {
        "operationId": endpoint.route.call,
        "summary": endpoint.summary,
        "parameters": _parameters(endpoint, components),
        "security": [{"bearer": []}],
        "responses": {
            str(endpoint.route.status): {
                "description": "Created" if endpoint.route.creates else "OK",
                "content": {"application/json": {"schema": answer}},
            },
            "400": _error("A Host header naming no address of this server"),
            "401": _error("No or a wrong bearer token (also for ?as_of= under public reads)"),
            "404": _error("A missing run, follow-up, message, ... (or route)"),
            "409": _error("Refused by the store's present state"),
            "422": _error("Invalid input"),
            "503": _error("Storage unavailable: retry after Retry-After seconds"),
        },
    }
    if endpoint.body_model is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": _model_schema(endpoint.body_model, components)}
            },
        }
    return operation


EXTRA_PATHS: Final[dict[str, dict[str, Any]]] = {
    "/runs/{run_id}/viewer": {
        "get": {
            "operationId": "follow_viewer",
            "summary": "Server-sent events: each new presentation revision (event id = "
            "revision), or snapshot_required; resumes after after_revision or Last-Event-ID.",
            "parameters": [
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "after_revision", "in": "query", "schema": {"type": "integer"}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"}},
            ],
            "security": [{"bearer": []}],
            "responses": {"200": {"description": "text/event-stream"}},
        }
    },
    "/runs/{run_id}/viewer/snapshot": {
        "get": {
            "operationId": "viewer_snapshot",
            "summary": "The run's viewer documents and the revision they show.",
            "parameters": [
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "security": [{"bearer": []}],
            "responses": {"200": {"description": "OK"}},
        }
    },
}
"""Routes outside the table: the live stream and the snapshot a viewer starts from."""


def openapi_document(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    """The API's OpenAPI document."""
    components: dict[str, Any] = {"Error": ERROR_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        operations = paths.setdefault(endpoint.template, {})
        method = endpoint.route.method.lower()
        if method in operations:
            # A second row on one method and path (the ranged queue): its query joins the first.
            known = {p["name"] for p in operations[method]["parameters"]}
            extra = [
                {**p, "required": False}
                for p in _parameters(endpoint, components)
                if p["name"] not in known
            ]
            operations[method]["parameters"].extend(extra)
            continue
        operations[method] = _operation(endpoint, components)
    paths.update(EXTRA_PATHS)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runledger",
            "version": "1",
            "description": "The WorkflowStore API over HTTP; JSON fields are snake_case.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


__all__: Sequence[str] = ["openapi_document"]
