"""The route table covers the whole public store API, the OpenAPI document lists every route,
and every route is called by an API test."""

from __future__ import annotations

import re
from pathlib import Path

from runledger.infrastructure.serve.routes import ROUTES, UNROUTED
from runledger.infrastructure.store import WorkflowStore
from tests.serve.conftest import Served
from tests.unit.test_store_surface import DESIGNED_API

VIEWER_ROUTES = {("GET", "/runs/{run_id}/viewer"), ("GET", "/runs/{run_id}/viewer/snapshot")}


def test_every_public_store_method_has_a_route_or_a_reason_for_none() -> None:
    routed = {route.call for route in ROUTES}

    assert routed | set(UNROUTED) == DESIGNED_API, (
        "a new store method needs a row in serve/routes.py ROUTES, or an UNROUTED reason"
    )
    assert routed.isdisjoint(UNROUTED)
    assert all(reason.strip() for reason in UNROUTED.values())


def test_every_route_calls_a_public_store_method() -> None:
    public = {name for name in dir(WorkflowStore) if not name.startswith("_")}

    assert {route.call for route in ROUTES} <= public


def test_no_two_routes_answer_the_same_request() -> None:
    keys = [(route.method, route.path, route.requires) for route in ROUTES]

    assert len(keys) == len(set(keys))


def test_the_openapi_document_lists_every_route(served_memory: Served) -> None:
    document = served_memory.anonymous.get("/openapi.json").json()

    listed = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    table = {(route.method, route.path.replace(":path}", "}")) for route in ROUTES}
    assert listed == table | VIEWER_ROUTES
    operation_ids = [
        operation["operationId"]
        for operations in document["paths"].values()
        for operation in operations.values()
    ]
    assert len(operation_ids) == len(set(operation_ids))


def test_the_openapi_document_describes_bodies_from_the_signatures(
    served_memory: Served,
) -> None:
    document = served_memory.anonymous.get("/openapi.json").json()

    body = document["paths"]["/runs/{run_id}/follow-ups"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert set(schema["required"]) == {
        "request_id",
        "target_session_id",
        "actor",
        "source",
        "prompt",
    }
    ranged = document["paths"]["/runs/{run_id}/follow-up-queue"]["get"]["parameters"]
    assert {parameter["name"] for parameter in ranged} == {"run_id", "start", "limit", "as_of"}


def test_every_route_is_called_by_an_api_test() -> None:
    here = Path(__file__).parent
    called = {
        name
        for path in here.glob("test_*.py")
        for name in re.findall(r'api\.(?:ok|call)\(\s*"([a-z_]+)"', path.read_text("utf-8"))
    }

    assert {route.call for route in ROUTES} - called == set()
