"""The log's packed payloads: what is written, what reads back, and what is refused.

A payload is packed with zstd against a frozen dictionary behind the marker byte 0x01, or
kept as its JSON when packing would not make it smaller. Stores written before packing hold
plain JSON, which must read back for ever, and so must every packed payload written since:
the dictionary's digest and one packed sample are pinned here. Damaged or hostile stored
bytes are a ``CorruptEventError`` on both decode paths, never an allocation they ask for.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

import orjson
import pytest
import zstandard
from eventsourcing.persistence import Notification
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.errors import CorruptEventError
from runledger.domain.packed_state import (
    LARGE_FROM,
    LARGE_LEVEL,
    LEVEL,
    MAX_UNPACKED_BYTES,
    ZSTD_V1,
    UnpackError,
    packed,
    unpacked,
    unpacked_all,
)
from runledger.domain.serialisation import encoded, stored_payload
from runledger.domain.state_dictionary import DICTIONARY_V1
from runledger.infrastructure.commits.mapper import LedgerMapper
from runledger.projections.events import projected
from tests.unit.test_event_catalogue import EXPECTED

DICTIONARY_V1_SHA256 = "310145d10d82103a1397ea182cb1513e1b124db358ac248a561b12b9be6ad704"

# `follow-up.queued`'s pinned payload as the first packing wrote it (zstd 1.5.7, level 4, with the
# frame's checksum).
PACKED_SAMPLE = bytes.fromhex(
    "0128b52ffd64ab00dd0400820716169027799752f98ca208715f6768bbb759c658436726688780f1945ea6"
    "f6091b82c5f59675bfee62db5276a4750842c284bc78364f81b7dae12582010fc0a0601807ddb74eef438b"
    "b3837fb1de4f26ea755e215e522c24a01500cc6b063880abb87702a616e009494b74050c6cde065481ea64"
    "cc8c0f2d143803680aa07abfcdd0cb0e316ac0fac70260c4419959d0106802c04f14520401727f9455"
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=30,
)


def test_the_dictionary_never_changes() -> None:
    assert hashlib.sha256(DICTIONARY_V1).hexdigest() == DICTIONARY_V1_SHA256


def test_a_payload_packed_by_the_first_release_still_reads_back() -> None:
    assert unpacked(PACKED_SAMPLE) == EXPECTED["follow-up.queued"][4]


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(), JSON_VALUES, max_size=8))
def test_any_json_object_packs_to_a_form_that_reads_back_byte_exact(value: object) -> None:
    payload = orjson.dumps(value)
    stored = packed(payload)
    assert unpacked(stored) == payload
    if stored == payload:
        assert stored[:1] == b"{"
    else:
        assert stored[0] == ZSTD_V1
        assert len(stored) < len(payload)


def test_a_payload_packing_would_not_shrink_stays_plain_json() -> None:
    assert packed(b"{}") == b"{}"
    assert packed(b'{"a":1}') == b'{"a":1}'


def _compressed_at(level: int, payload: bytes) -> bytes:
    dictionary = zstandard.ZstdCompressionDict(
        DICTIONARY_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    dictionary.precompute_compress(level=level)
    compressor = zstandard.ZstdCompressor(
        dict_data=dictionary, write_content_size=True, write_checksum=True, write_dict_id=False
    )
    return compressor.compress(payload)


@pytest.mark.parametrize("size", [LARGE_FROM - 1, LARGE_FROM, 4 * LARGE_FROM])
def test_a_large_payload_packs_at_the_faster_level_and_reads_back(size: int) -> None:
    text = b" ".join(b"tool call %d finished: ok" % n for n in range(size))
    payload = b'{"t":"' + text[: size - 8] + b'"}'
    # The two levels make other frames of it, so the frame shows which level packed it.
    assert _compressed_at(LEVEL, payload) != _compressed_at(LARGE_LEVEL, payload)

    stored = packed(payload)

    level = LARGE_LEVEL if size >= LARGE_FROM else LEVEL
    assert len(payload) == size
    assert stored == bytes((ZSTD_V1,)) + _compressed_at(level, payload)
    assert unpacked(stored) == payload
    assert len(stored) < size / 4


def test_the_catalogue_samples_pack_to_under_half_their_size() -> None:
    # The dictionary holds the catalogue's field names and the domain's fixed strings, not
    # any store's data: the catalogue's own samples are what it must shrink.
    payloads = [sample[4] for sample in EXPECTED.values()]
    stored = [packed(payload) for payload in payloads]
    assert [unpacked(form) for form in stored] == payloads
    assert sum(map(len, stored)) < 0.5 * sum(map(len, payloads))


@pytest.mark.parametrize("wire_name", sorted(EXPECTED))
def test_every_catalogue_event_is_stored_packed(wire_name: str) -> None:
    originator_id, version, _, _, state = EXPECTED[wire_name]
    event = LedgerMapper().to_domain_event(
        Notification(
            id=1,
            originator_id=UUID(originator_id),
            originator_version=version,
            topic=wire_name,
            state=state,
        )
    )
    stored = encoded(event).state
    assert stored == packed(state)
    assert stored[0] == ZSTD_V1 or stored == state


def _stored(state: bytes) -> Notification:
    originator_id, version, _, _, _ = EXPECTED["follow-up.queued"]
    return Notification(
        id=7,
        originator_id=UUID(originator_id),
        originator_version=version,
        topic="follow-up.queued",
        state=state,
    )


def _frame_claiming(size: int) -> bytes:
    """A zstd frame whose header claims ``size`` bytes of content and holds a few."""
    writer = zstandard.ZstdCompressor(write_content_size=True).compressobj(size=size)
    return writer.compress(b'{"a":1}') + writer.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)


HOSTILE = {
    "another marker": (b"\x02" + PACKED_SAMPLE[1:], "not valid JSON"),
    "truncated frame": (PACKED_SAMPLE[:40], "damaged"),
    "not a frame": (b"\x01garbage that is no zstd frame", "damaged"),
    "flipped content byte": (
        PACKED_SAMPLE[:60] + bytes([PACKED_SAMPLE[60] ^ 0xFF]) + PACKED_SAMPLE[61:],
        "packed payload",
    ),
    "a huge claimed size": (b"\x01" + _frame_claiming(MAX_UNPACKED_BYTES + 1), "impossible size"),
    "a lying claimed size": (b"\x01" + _frame_claiming(4096), "packed payload"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_damaged_or_hostile_packed_bytes_are_corrupt_on_every_read_path(case: str) -> None:
    state, reason = HOSTILE[case]
    if state[0] == ZSTD_V1:
        with pytest.raises(UnpackError):
            unpacked(state)

    def raw(stored: Notification) -> object:
        return stored_payload(stored, stored.id)

    for decode in (LedgerMapper().to_domain_event, projected, raw):
        with pytest.raises(CorruptEventError) as raised:
            decode(_stored(state))
        assert reason in raised.value.reason
        assert (raised.value.position, raised.value.wire_name) == (7, "follow-up.queued")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.dictionaries(st.text(), JSON_VALUES, max_size=8), max_size=12))
def test_a_page_unpacks_to_what_each_of_its_forms_unpacks_to(values: list[object]) -> None:
    # A read-ahead unpacks a build's page at once: packed and plain forms side by side.
    page = [packed(orjson.dumps(value)) for value in values]
    page.insert(len(page) // 2, orjson.dumps({"written": "before packing"}))

    assert unpacked_all(page, max_bytes=MAX_UNPACKED_BYTES) == [unpacked(form) for form in page]


PAGE_HOSTILE = {
    **{case: state for case, (state, _) in HOSTILE.items()},
    # More than this machine could allocate: claimed, it must be refused unread.
    "an enormous claimed size": b"\x01" + _frame_claiming(2**40),
}


@pytest.mark.parametrize("case", sorted(PAGE_HOSTILE))
def test_a_page_holding_a_hostile_form_leaves_it_for_its_decoder_to_refuse(case: str) -> None:
    state = PAGE_HOSTILE[case]
    page = [PACKED_SAMPLE, state, orjson.dumps({"plain": True}), PACKED_SAMPLE]

    result = unpacked_all(page, max_bytes=MAX_UNPACKED_BYTES)

    # Never read as something else: the hostile form is left as stored, where the decode
    # of its event refuses it (above) and names the event.
    assert result[1] == state
    if state[0] == ZSTD_V1:
        assert result == page
    else:
        assert result == [unpacked(PACKED_SAMPLE), state, page[2], unpacked(PACKED_SAMPLE)]


def test_a_page_unpacks_only_as_many_bytes_as_it_may_hold_the_rest_stays_packed() -> None:
    payloads = [orjson.dumps({"n": n, "text": "check the edge cases " * 20}) for n in range(6)]
    page = [packed(payload) for payload in payloads]
    size = len(payloads[0])
    assert {len(payload) for payload in payloads} == {size}

    result = unpacked_all(page, max_bytes=3 * size + size // 2)

    assert result == [*payloads[:3], *page[3:]]
    assert unpacked_all(page, max_bytes=size - 1) == page


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"null", b""])
def test_a_payload_that_is_no_json_object_is_corrupt_for_the_raw_readers(payload: bytes) -> None:
    with pytest.raises(CorruptEventError) as raised:
        stored_payload(_stored(packed(payload)), 7)
    assert raised.value.position == 7


def test_the_raw_readers_get_the_payload_as_stored() -> None:
    payload = {"class_version": 1, "run_id": "run-1", "timestamp": "2026-01-01T00:00:00+00:00"}
    for state in (orjson.dumps(payload), packed(orjson.dumps(payload))):
        assert stored_payload(_stored(state)) == payload


def test_threads_packing_and_unpacking_at_once_each_get_their_own_payloads_back() -> None:
    # zstd's contexts are not thread-safe: shared ones garbled concurrent commands' payloads.
    payloads = [
        orjson.dumps({"thread": thread, "n": n, "text": f"follow-up {n} of run {thread}" * 8})
        for thread in range(8)
        for n in range(300)
    ]

    def round_trips(chunk: list[bytes]) -> bool:
        return all(unpacked(packed(payload)) == payload for payload in chunk)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(round_trips, [payloads[i::8] for i in range(8)]))
    assert results == [True] * 8
