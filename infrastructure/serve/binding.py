"""A route's arguments, checked against the store method's own signature with pydantic.

Each ``Endpoint`` holds two models built from the signature: one for the path's values and
the query string (text from a URL, converted: ``"5"`` is 5), one for a POST's JSON body
(strict JSON types: ``5`` is not a string). Unknown fields are refused, so a typo is a 422
rather than an argument silently left at its default. The domain still checks every value
with its own rules and messages; these models only turn JSON into the argument types
(an ``Actor`` from ``{"type", "id"}``, a ``RunClaim`` from its record).
"""

from __future__ import annotations

import collections.abc
import inspect
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Union, get_args, get_origin

import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter

from runledger.domain.errors import RunNotFoundError
from runledger.infrastructure.serve.routes import Route
from runledger.infrastructure.store import WorkflowStore

_PATH_NAMES: Final = re.compile(r"{([a-z_]+)(?::path)?}")
_FORBID: Final = ConfigDict(extra="forbid")
RUN_ARGUMENT: Final = "run_id"


class InvalidRequestError(Exception):
    """The request's path, query or body does not fit the store method's arguments."""

    code: Final = "request.invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _wire_type(annotation: Any) -> Any:
    """``annotation`` as JSON can carry it: an iterable argument arrives as a list."""
    origin = get_origin(annotation)
    if origin in (collections.abc.Iterable, collections.abc.Sequence):
        return list[tuple(_wire_type(arg) for arg in get_args(annotation))]  # type: ignore[misc]
    if origin is Union or origin is types.UnionType:
        members = tuple(_wire_type(arg) for arg in get_args(annotation))
        return Union[members]  # noqa: UP007 - built from a runtime tuple
    return annotation


def _model(name: str, parameters: Sequence[inspect.Parameter]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        parameter.name: (
            _wire_type(parameter.annotation),
            ... if parameter.default is inspect.Parameter.empty else parameter.default,
        )
        for parameter in parameters
    }
    model: type[BaseModel] = pydantic.create_model(name, __config__=_FORBID, **fields)
    return model


def _described(error: pydantic.ValidationError, where: str) -> str:
    # The offending value is left out: it may be large, or a secret (a claim's token).
    problems = "; ".join(
        f"{'.'.join(str(part) for part in (where, *problem['loc']))}: {problem['msg']}"
        for problem in error.errors(include_input=False, include_url=False)
    )
    return f"Invalid request: {problems}"


@dataclass(frozen=True)
class Endpoint:
    """A route bound to its store method: it turns a request into the call's arguments."""

    route: Route
    store_method: Callable[..., Any]
    path_names: tuple[str, ...]
    url_model: type[BaseModel]
    body_model: type[BaseModel] | None
    returns: Any

    @property
    def template(self) -> str:
        """The path as OpenAPI spells it: ``{name}`` without Starlette's convertor."""
        return self.route.path.replace(":path}", "}")

    @property
    def writes(self) -> bool:
        """Whether this route changes the store (it then always needs the token)."""
        return self.route.method == "POST"

    @property
    def summary(self) -> str:
        """The store method's one-line docstring."""
        return (self.store_method.__doc__ or self.route.call).strip()

    def arguments(
        self, path: Mapping[str, str], query: Mapping[str, str], body: bytes | None
    ) -> dict[str, Any]:
        """The store call's keyword arguments, or ``InvalidRequestError``."""
        try:
            from_url = self.url_model.model_validate({**query, **path})
        except pydantic.ValidationError as error:
            raise InvalidRequestError(_described(error, "query")) from None
        arguments = {name: getattr(from_url, name) for name in type(from_url).model_fields}
        if self.body_model is not None:
            try:
                from_body = self.body_model.model_validate_json(body or b"{}", strict=True)
            except pydantic.ValidationError as error:
                raise InvalidRequestError(_described(error, "body")) from None
            arguments.update(
                (name, getattr(from_body, name)) for name in type(from_body).model_fields
            )
        return arguments

    def call(self, store: WorkflowStore, arguments: Mapping[str, Any]) -> Any:
        """Run the store method; its answer as it returns it, or the 404 of an unknown id.

        A lookup answering None raises the row's ``missing`` error. A read of a run answering
        nothing (None, or an empty list) raises ``RunNotFoundError`` if the run does not exist:
        over HTTP a query of a run that does not exist is a 404 (DESIGN decision 29), while the
        Python API keeps answering None or [] (decision 25). Existence is read only then, so a
        read that found something costs nothing more.
        """
        answer = getattr(store, self.route.call)(**arguments)
        if self.route.method != "GET" or not (answer is None or answer == []):
            return answer
        missing = self.route.missing
        if answer is None and missing is not None:
            raise missing(*(arguments[name] for name in self.path_names))
        run_id = arguments.get(RUN_ARGUMENT)
        if isinstance(run_id, str) and store.get_run(run_id) is None:
            raise RunNotFoundError(run_id)
        return answer


def bind(route: Route) -> Endpoint:
    """The endpoint of one table row (``TypeError`` for a row that cannot fit its method)."""
    method = getattr(WorkflowStore, route.call)
    signature = inspect.signature(method, eval_str=True)
    parameters = list(signature.parameters.values())[1:]  # the store, or the view reader
    names = {parameter.name for parameter in parameters}
    path_names = tuple(_PATH_NAMES.findall(route.path))
    if not set(path_names) <= names or not route.requires <= names:
        raise TypeError(f"route {route.method} {route.path} names no argument of {route.call}")
    in_path = [parameter for parameter in parameters if parameter.name in path_names]
    rest = [parameter for parameter in parameters if parameter.name not in path_names]
    title = "".join(part.title() for part in route.call.split("_"))
    if route.method == "GET":
        url_model = _model(f"{title}Query", in_path + rest)
        body_model = None
    else:
        url_model = _model(f"{title}Path", in_path)
        body_model = _model(f"{title}Request", rest)
    return Endpoint(
        route=route,
        store_method=method,
        path_names=path_names,
        url_model=url_model,
        body_model=body_model,
        returns=signature.return_annotation,
    )


def response_adapter(endpoint: Endpoint) -> TypeAdapter[Any]:
    """A type adapter of what the endpoint answers (for the OpenAPI document)."""
    return TypeAdapter(_wire_type(endpoint.returns))


__all__: Sequence[str] = ["Endpoint", "InvalidRequestError", "bind", "response_adapter"]
