"""JSON string literals exactly as JavaScript's ``JSON.stringify`` writes them.

Its own module because both canonical JSON and the error messages that quote an id need it,
and the errors must not depend on canonical JSON (which raises those errors).
"""

from __future__ import annotations

import re
from json.encoder import encode_basestring

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_string(text: str) -> str:
    """``text`` as a JSON string literal, exactly as JSON.stringify writes it."""
    # What json.dumps(text, ensure_ascii=False) returns, without its per-call overhead:
    # canonical JSON and digests write one literal per string of every row.
    encoded: str = encode_basestring(text)
    if not text.isascii() and _LONE_SURROGATE.search(encoded):
        # JSON.stringify escapes lone surrogates rather than emitting invalid UTF-16.
        encoded = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)
    return encoded
