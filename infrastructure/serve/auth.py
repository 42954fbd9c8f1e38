"""Bearer-token access: every write needs the token, reads too unless they are public."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

TOKEN_VARIABLE: Final = "RUNLEDGER_SERVE_TOKEN"  # noqa: S105 - a variable name
_SCHEME: Final = "bearer "
_TOKEN_CHARACTERS: Final = frozenset(chr(code) for code in range(0x21, 0x7F))
"""What a token may hold: visible ASCII. A client's header reaches the server as bytes that
Starlette decodes as Latin-1, and clients encode non-ASCII text in different ways (or refuse
it), so a token outside ASCII could never be sent reliably."""
INVALID_TOKEN_MESSAGE: Final = f"{TOKEN_VARIABLE} must be visible ASCII, without spaces or accents"


class InvalidTokenError(Exception):
    """The operator's token could never be sent in an ``Authorization`` header."""


@dataclass(frozen=True)
class Access:
    """The server's token, and whether reads may go without it."""

    token: str
    public_reads: bool = False

    def allows(self, request: Request, *, writes: bool) -> bool:
        """Whether ``request`` may call a route that writes (or only reads)."""
        if not writes and self.public_reads:
            return True
        return self.authenticated(request)

    def authenticated(self, request: Request) -> bool:
        """Whether ``request`` carries the server's token."""
        header = request.headers.get("authorization", "")
        if not header.lower().startswith(_SCHEME):
            return False
        # The header's own bytes (Starlette decoded them as Latin-1), against the token's: the
        # token is ASCII, so a client's non-ASCII guess never matches by a decoding accident.
        given = header[len(_SCHEME) :].strip().encode("latin-1")
        # Constant time: how much of a guess matched must not show in how long it took.
        return hmac.compare_digest(given, self.token.encode("ascii"))


def server_token(env: Mapping[str, str]) -> tuple[str, bool]:
    """The token from ``RUNLEDGER_SERVE_TOKEN``, else a new random one; and whether it is new.

    ``InvalidTokenError`` for a token outside visible ASCII: no client could send it.
    """
    given = env.get(TOKEN_VARIABLE, "").strip()
    if given:
        if not set(given) <= _TOKEN_CHARACTERS:
            raise InvalidTokenError(INVALID_TOKEN_MESSAGE)
        return given, False
    return secrets.token_urlsafe(32), True


__all__: Sequence[str] = ["TOKEN_VARIABLE", "Access", "InvalidTokenError", "server_token"]
