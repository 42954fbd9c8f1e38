"""How events and snapshots become stored bytes, and back.

The wire format is plain JSON (no type tags), which the log keeps packed (``packed_state``):
``timestamp`` and the aggregate's declared datetime fields are ISO-8601 strings, ids are
strings. Decoding trusts nothing stored: the class comes from the wire name through the event
catalogue and nothing else, and every payload is checked against that class before anything
is built from it (``decoded_state``). A stored event that does not decode is a
``CorruptEventError``, never skipped and never an import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import UnionType
from typing import (
    Any,
    Final,
    Literal,
    NamedTuple,
    Protocol,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)
from uuid import UUID

import orjson
from eventsourcing.domain import DomainEventProtocol

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.errors import CorruptEventError, UnknownStoredEventError, clipped_repr
from runledger.domain.events import (
    EVENT_OWNERS,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    upcast,
)
from runledger.domain.packed_state import UnpackError, packed, unpacked
from runledger.domain.values import ACTOR_TYPES


class StoredForm(Protocol):
    """A stored event as any layer holds it: the library's record, or a follower's entry."""

    @property
    def topic(self) -> str: ...

    @property
    def originator_id(self) -> UUID | str: ...

    @property
    def originator_version(self) -> int: ...

    @property
    def state(self) -> bytes: ...


class EncodedEvent(NamedTuple):
    """A domain event as stored bytes, with the columns the store indexes it by."""

    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes
    run_id: str | None
    lookup_key: str | None


def encoded(domain_event: DomainEventProtocol[UUID]) -> EncodedEvent:
    """The stored form of a catalogue event (``UnknownStoredEventError`` for any other)."""
    event_class = type(domain_event)
    topic = getattr(event_class, "TOPIC", None)
    if topic is None or EVENT_CLASSES.get(topic) is not event_class:
        raise UnknownStoredEventError(topic or event_class.__qualname__)
    state = dict(vars(domain_event))
    originator_id = state.pop("originator_id")
    originator_version = state.pop("originator_version")
    class_version = getattr(event_class, "class_version", 1)
    if class_version > 1:
        state["class_version"] = class_version
    if not isinstance(domain_event, LedgerEvent):
        state["state"] = _without_pending(state["state"])
    run_id, lookup_key = event_index(domain_event)
    return EncodedEvent(
        originator_id, originator_version, topic, packed(orjson.dumps(state)), run_id, lookup_key
    )


def event_index(domain_event: DomainEventProtocol[UUID]) -> tuple[str | None, str | None]:
    """The ``(run_id, lookup_key)`` the log indexes an event by (None for a snapshot)."""
    if isinstance(domain_event, LedgerEvent):
        return domain_event.run_id, domain_event.lookup_key()
    return None, None


def decoded(stored: StoredForm, position: int | None = None) -> DomainEventProtocol[UUID]:
    """The domain event a stored one holds, checked (``decoded_state``) before it is built."""
    event_class, state = decoded_state(stored, position)
    # decoded_state has checked both: the conversions below cannot fail.
    state["timestamp"] = datetime.fromisoformat(state["timestamp"])
    if issubclass(event_class, LedgerSnapshot):
        state["state"] = _restore_aggregate_state(event_class, state["state"])
    originator_id = stored.originator_id
    state["originator_id"] = (
        originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
    )
    state["originator_version"] = stored.originator_version
    domain_event = object.__new__(event_class)
    object.__setattr__(domain_event, "__dict__", state)
    return domain_event


EventClass = type[LedgerEvent] | type[LedgerSnapshot]


class _MalformedError(Exception):
    """Why a stored event does not decode; ``decoded_state`` names the event around it."""


def decoded_state(
    stored: StoredForm, position: int | None = None
) -> tuple[EventClass, dict[str, Any]]:
    """The catalogue class and the checked payload (upcast, times still ISO text) of a stored
    event, or ``CorruptEventError`` naming it (with its position when read from the log) and
    what is wrong; ``position`` is where the log holds it, when read from the log.

    The class comes from the wire name alone; every field, its type, the actor's shape, the
    time and the versions are checked here, so no later step meets a surprise (a missing
    attribute, a wrong type in a record) and nothing in the payload picks code.
    """
    topic, originator_id, version = stored.topic, stored.originator_id, stored.originator_version
    try:
        event_class = EVENT_CLASSES.get(topic)
        if event_class is None:
            raise _MalformedError(
                f"wire name {clipped_repr(topic)} is not in the runledger event catalogue"
            )
        _check_versions(event_class, originator_id, version)
        data = _payload(stored.state)
        _upcast_checked(event_class, data)
        _shape(event_class).check(data)
    except _MalformedError as fault:
        raise _corrupt(stored, position, fault) from None
    return event_class, data


def stored_payload(stored: StoredForm, position: int | None = None) -> dict[str, Any]:
    """The JSON object a stored event's payload holds, unpacked and parsed as stored (no
    upcast, no catalogue checks: ``decoded_state`` makes those), or ``CorruptEventError``
    naming the event when the bytes hold no JSON object."""
    try:
        return _payload(stored.state)
    except _MalformedError as fault:
        raise _corrupt(stored, position, fault) from None


def _payload(state: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(unpacked(state))
    except UnpackError as fault:
        raise _MalformedError(str(fault)) from None
    except orjson.JSONDecodeError as error:
        raise _MalformedError(f"its payload is not valid JSON ({error})") from None
    if type(data) is not dict:
        raise _MalformedError(f"its payload is {_json_kind(data)}, not a JSON object")
    return data


def _corrupt(stored: StoredForm, position: int | None, fault: _MalformedError) -> CorruptEventError:
    return CorruptEventError(
        str(fault),
        wire_name=stored.topic,
        aggregate_id=stored.originator_id,
        version=stored.originator_version,
        position=position,
    )


def _check_versions(event_class: EventClass, originator_id: UUID | str, version: int) -> None:
    if not isinstance(originator_id, UUID) and not _is_uuid_hex(originator_id):
        try:
            UUID(originator_id)
        except (TypeError, ValueError, AttributeError):
            raise _MalformedError("its aggregate id is not a UUID") from None
    if type(version) is not int or version < 1:
        raise _MalformedError("its version is not a positive integer")
    # The first event of an aggregate, and only it, is at version 1 (snapshots at any).
    if issubclass(event_class, LedgerCreated) != (version == 1) and issubclass(
        event_class, LedgerEvent
    ):
        kind = "a first event" if version != 1 else "a later event"
        raise _MalformedError(f"version {version} is impossible for {kind}")


def _is_uuid_hex(text: object) -> bool:
    """Whether ``text`` is a UUID as the SQLite log stores it, 32 hex digits: ``UUID`` takes
    these exactly (for 32 letters and digits it checks ``int(text, 16)`` alone), at a fifth
    of its cost; any other text is left to ``UUID`` itself."""
    if type(text) is not str or len(text) != 32 or not text.isalnum():
        return False
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _upcast_checked(event_class: EventClass, data: dict[str, Any]) -> None:
    stored = data.get("class_version", 1)
    current = getattr(event_class, "class_version", 1)
    if stored == current and type(stored) is int:
        # Stored at the current version: nothing to bring up (``upcast`` would only drop
        # the version key).
        data.pop("class_version", None)
        return
    if type(stored) is not int or not 1 <= stored <= current:
        raise _MalformedError(f"class_version {stored!r} is not between 1 and {current}")
    try:
        upcast(event_class, data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        # An upcaster expects the old shape; a payload without it cannot be brought up.
        raise _MalformedError(
            f"its class_version {stored} payload does not upcast ({type(error).__name__})"
        ) from None


FieldCheck = Callable[[EventClass, Any], str | None]
"""A field's check: None when the value is fine, else what it should be."""


@dataclass(frozen=True)
class _Shape:
    """The payload fields of one event class and each one's check."""

    fields: frozenset[str]
    checks: tuple[tuple[str, FieldCheck], ...]
    event_class: EventClass
    typed: tuple[tuple[str, frozenset[type[Any]]], ...] = ()
    """The fields checked by their value's type alone, with the types they allow: the
    quick pass of ``check``, which every stored event goes through on every replay."""
    others: tuple[tuple[str, FieldCheck], ...] = ()
    """The rest of ``checks``."""

    def check(self, data: dict[str, Any]) -> None:
        if data.keys() != self.fields:
            missing = sorted(self.fields - data.keys())
            if missing:
                raise _MalformedError(f"field {missing[0]!r} is missing")
            unexpected = sorted(data.keys() - self.fields)
            raise _MalformedError(f"field {clipped_repr(unexpected[0])} is not one of its fields")
        for name, allowed in self.typed:
            if type(data[name]) not in allowed:
                break
        else:
            event_class = self.event_class
            for name, check in self.others:
                if check(event_class, data[name]) is not None:
                    break
            else:
                return
        # Something is wrong: the checks in their order name the first field at fault.
        for name, check in self.checks:
            wanted = check(self.event_class, data[name])
            if wanted is not None:
                raise _MalformedError(
                    f"field {name!r} must be {wanted}, not {_json_kind(data[name])}"
                )


_SHAPES: dict[EventClass, _Shape] = {}


def payload_fields(event_class: EventClass) -> frozenset[str]:
    """The fields a stored payload of ``event_class`` holds, at its current class version."""
    return _shape(event_class).fields


def _shape(event_class: EventClass) -> _Shape:
    shape = _SHAPES.get(event_class)
    if shape is None:
        hints = get_type_hints(event_class)
        names = [
            field.name
            for field in dataclasses.fields(event_class)
            if field.name not in ("originator_id", "originator_version")
        ]
        checks = tuple(
            (name, check)
            for name in names
            if (check := _field_check(name, hints[name])) is not None
        )
        typed = {
            name: allowed
            for name in names
            if (allowed := _types_alone(name, hints[name])) is not None
        }
        shape = _SHAPES[event_class] = _Shape(
            frozenset(names),
            checks,
            event_class,
            tuple(typed.items()),
            tuple((name, check) for name, check in checks if name not in typed),
        )
    return shape


def _members(hint: Any) -> tuple[Any, ...]:
    """The types a field's hint names: a union's members, or the hint itself."""
    return get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)


def _types_alone(name: str, hint: Any) -> frozenset[type[Any]] | None:
    """The types a field allows, where its check (``_field_check``) is by type alone."""
    if name in _SPECIAL_FIELDS or hint is Any:
        return None
    members = _members(hint)
    if any(get_origin(member) is Literal for member in members):
        return None
    return frozenset(
        type(None) if member is None else get_origin(member) or member for member in members
    )


def _field_check(name: str, hint: Any) -> FieldCheck | None:
    special = _SPECIAL_FIELDS.get(name)
    if special is not None:
        return special
    if hint is Any:
        return None  # any JSON value: orjson produced one
    members = _members(hint)
    # A vocabulary (``Literal``) is checked by value: a stored status outside it is corrupt.
    constants = frozenset(
        constant
        for member in members
        if get_origin(member) is Literal
        for constant in get_args(member)
    )
    allowed = frozenset(
        type(None) if member is None else get_origin(member) or member
        for member in members
        if get_origin(member) is not Literal
    )
    if not allowed <= frozenset(_KIND_NAMES):
        msg = f"no stored-event check for field {name!r} of type {hint!r}"
        raise TypeError(msg)
    kinds = [_KIND_NAMES[kind] for kind in sorted(allowed, key=_KIND_ORDER.index)]
    if constants:
        kinds.insert(0, "one of " + ", ".join(sorted(map(repr, constants))))
    wanted = " or ".join(kinds)
    constant_types = frozenset(type(constant) for constant in constants)

    def check(_: EventClass, value: Any) -> str | None:
        if type(value) in allowed:
            return None
        if type(value) in constant_types and value in constants:
            return None
        return wanted

    return check


# orjson gives exactly these types, so ``type(value) in allowed`` is exact (a bool is no int).
_KIND_NAMES: Final[dict[type[Any], str]] = {
    str: "text",
    int: "an integer",
    bool: "true or false",
    float: "a number",
    dict: "an object",
    list: "an array",
    type(None): "null",
}
_KIND_ORDER: Final[list[type[Any]]] = list(_KIND_NAMES)


def _json_kind(value: object) -> str:
    if type(value) is int:
        return "a number"
    return _KIND_NAMES.get(type(value), type(value).__name__)


def _check_time(_: EventClass, value: Any) -> str | None:
    wanted = "an ISO-8601 time with a time zone"
    if type(value) is not str:
        return wanted
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return wanted
    return None if moment.tzinfo is not None else wanted


_ACTOR_FIELDS: Final = frozenset({"type", "id"})


def _check_actor(_: EventClass, value: Any) -> str | None:
    fine = (
        type(value) is dict
        and value.keys() == _ACTOR_FIELDS
        and value["type"] in ACTOR_TYPES
        and (value["id"] is None or type(value["id"]) is str)
    )
    return None if fine else "an object with a known actor type and a text or null id"


def _check_own_aggregate(event_class: EventClass, value: Any) -> str | None:
    # The library would resolve this field to a class (importing any module it names); here
    # it is only compared with the catalogue's answer.
    owner = EVENT_OWNERS.get(event_class)
    expected = getattr(owner, "TOPIC", None)
    return None if value == expected else f"{expected!r}, the aggregate of this event"


def _check_aggregate_state(event_class: EventClass, value: Any) -> str | None:
    wanted = "an object of aggregate state with ISO-8601 times"
    if type(value) is not dict:
        return wanted
    owner = EVENT_OWNERS.get(event_class)
    for name in _datetime_fields(owner):
        moment = value.get(name)
        if moment is None and name not in ("_created_on", "_modified_on"):
            continue
        if _check_time(event_class, moment) is not None:
            return wanted
    return None


_SPECIAL_FIELDS: Final[dict[str, FieldCheck]] = {
    "timestamp": _check_time,
    "actor": _check_actor,
    "originator_topic": _check_own_aggregate,
    "topic": _check_own_aggregate,
    "state": _check_aggregate_state,
}


def _without_pending(aggregate_state: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in aggregate_state.items()
        if key not in ("_id", "_version", "_pending_events")
    }


def _datetime_fields(aggregate_class: object) -> tuple[str, ...]:
    return ("_created_on", "_modified_on", *getattr(aggregate_class, "DATETIME_FIELDS", ()))


def _restore_aggregate_state(
    snapshot_class: type[LedgerSnapshot], aggregate_state: dict[str, Any]
) -> dict[str, Any]:
    restored = dict(aggregate_state)
    for name in _datetime_fields(EVENT_OWNERS.get(snapshot_class)):
        value = restored.get(name)
        if isinstance(value, str):
            restored[name] = datetime.fromisoformat(value)
    return restored
