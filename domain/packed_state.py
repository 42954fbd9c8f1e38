"""How an event's JSON payload is kept in the log: compressed, behind a one-byte marker.

A payload is the JSON object ``serialisation.encoded`` made. The log keeps it as:

- ``0x01`` then one zstd frame, with its content size and checksum, compressed against
  ``state_dictionary.DICTIONARY_V1``;
- anything else is the JSON itself (every event written before packing, and any payload
  packing would not make smaller), which the JSON parser then checks; 0x01 never starts JSON.

A frame that does not decompress, or one that claims more than ``MAX_UNPACKED_BYTES`` or
other than it holds, is refused (``UnpackError``): stored bytes pick nothing but one of these
two forms, and never make the reader allocate what they claim.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

import zstandard

from runledger.domain.state_dictionary import DICTIONARY_V1

ZSTD_V1: Final = 1
LEVEL: Final = 4
"""zstd's level. On the bench history's 50k payloads (480 bytes on average): level 3 keeps
39.5 % of the JSON in 3.7 µs a payload, level 4 37.3 % in 5.2 µs, level 6 37.0 % in 6.9 µs;
a payload is packed once, when its command commits, and read back many times."""

LARGE_FROM: Final = 4096
LARGE_LEVEL: Final = 3
"""zstd's level for JSON of ``LARGE_FROM`` bytes and more (a batch of recorded session events,
say): there level 4 takes twice level 3's time for 4 to 8 % less (14.3 kB of the bench's
session events: 15.0 µs to 384 bytes at level 3, 32.9 µs to 368 at level 4). None of the
bench history's 50k payloads is that large."""

MAX_UNPACKED_BYTES: Final = 256 * 1024 * 1024
"""Far above any payload the domain's input limits admit; a frame claiming more is damage."""


def _dictionary(level: int) -> zstandard.ZstdCompressionDict:
    """The dictionary prepared for compressing at ``level`` (a compressor given a prepared
    dictionary takes its level from it)."""
    dictionary = zstandard.ZstdCompressionDict(
        DICTIONARY_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    dictionary.precompute_compress(level=level)
    return dictionary


_DICTIONARY: Final = _dictionary(LEVEL)
_LARGE_DICTIONARY: Final = _dictionary(LARGE_LEVEL)
_MARKER_V1: Final = bytes((ZSTD_V1,))


class _Codecs(threading.local):
    """A compressor and a decompressor per thread: zstd's contexts are not thread-safe (two
    threads sharing one decompressed each other's frames into garbage), the dictionary is."""

    def __init__(self) -> None:
        self.compressor = _compressor(_DICTIONARY)
        self.large_compressor = _compressor(_LARGE_DICTIONARY)
        self.decompressor = zstandard.ZstdDecompressor(dict_data=_DICTIONARY)


def _compressor(dictionary: zstandard.ZstdCompressionDict) -> zstandard.ZstdCompressor:
    return zstandard.ZstdCompressor(
        dict_data=dictionary, write_content_size=True, write_checksum=True, write_dict_id=False
    )


_CODECS: Final = _Codecs()


class UnpackError(Exception):
    """Why stored payload bytes are not one of the two forms; the caller names the event."""


def packed(payload: bytes) -> bytes:
    """The stored form of a JSON payload: packed when that is smaller, else the JSON."""
    codecs = _CODECS
    compressor = codecs.compressor if len(payload) < LARGE_FROM else codecs.large_compressor
    frame = compressor.compress(payload)
    if len(frame) + 1 < len(payload):
        return _MARKER_V1 + frame
    return payload


def unpacked(stored: bytes) -> bytes:
    """The JSON payload a stored form holds (``UnpackError`` when it holds none)."""
    if not stored or stored[0] != ZSTD_V1:
        return stored
    frame = stored[1:]
    size = _claimed_size(frame)
    try:
        payload = _CODECS.decompressor.decompress(frame, max_output_size=MAX_UNPACKED_BYTES)
    except zstandard.ZstdError as error:
        raise UnpackError(f"its packed payload is damaged ({error})") from None
    if len(payload) != size:
        raise UnpackError(f"its packed payload holds {len(payload)} bytes, not {size}")
    return payload


def _claimed_size(frame: bytes) -> int:
    """The size a frame's header says it holds, if a payload may be that large."""
    try:
        size = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as error:
        raise UnpackError(f"its packed payload is damaged ({error})") from None
    if size < 0 or size > MAX_UNPACKED_BYTES:
        raise UnpackError(f"its packed payload claims an impossible size ({size})")
    return size


def unpacked_all(stored: Sequence[bytes], *, max_bytes: int) -> list[bytes]:
    """``unpacked`` of the stored forms, their frames decompressed by one call that lets go of
    the GIL while it works (a reader on a thread of its own then costs the projecting thread
    nothing), up to ``max_bytes`` of payload: the forms after that are left as stored, so a
    page of large payloads is never held unpacked whole. Any frame ``unpacked`` would refuse
    leaves the whole page as stored, so that each form meets ``unpacked`` again where it is
    decoded, and the damaged one is refused there, naming its event."""
    chosen: list[int] = []
    frames: list[bytes | bytearray | memoryview[int]] = []
    total = 0
    try:
        for index, form in enumerate(stored):
            if form[:1] != _MARKER_V1:
                continue
            frame = form[1:]
            total += _claimed_size(frame)
            if total > max_bytes:
                break
            chosen.append(index)
            frames.append(frame)
        if not frames:
            return list(stored)
        # Each frame declares its size (``write_content_size``); the call refuses a frame
        # that holds other than it declares, or fails its checksum.
        segments = _CODECS.decompressor.multi_decompress_to_buffer(frames)
    except (UnpackError, zstandard.ZstdError, NotImplementedError):
        # NotImplementedError: zstandard's cffi backend (PyPy) has no such call; the forms
        # are then unpacked one by one where they are decoded, as without this.
        return list(stored)
    forms = list(stored)
    for segment, index in enumerate(chosen):
        forms[index] = segments[segment].tobytes()
    return forms
