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


@dataclass(frozen=True)
class Access:
    """The server's token, and whether reads may go without it."""

    token: str
    public_reads: bool = False

    def allows(self, request: Request, *, writes: bool) -> bool:
        """Whether ``request`` may call a route that writes (or only reads)."""
        if not writes and self.public_reads:
            return True
        header = request.headers.get("authorization", "")
        if not header.lower().startswith(_SCHEME):
            return False
        given = header[len(_SCHEME) :].strip().encode("utf-8", "surrogateescape")
        # Constant time: how much of a guess matched must not show in how long it took.
        return hmac.compare_digest(given, self.token.encode("utf-8"))


def server_token(env: Mapping[str, str]) -> tuple[str, bool]:
    """The token from ``RUNLEDGER_SERVE_TOKEN``, else a new random one; and whether it is new."""
    given = env.get(TOKEN_VARIABLE, "").strip()
    if given:
        return given, False
    return secrets.token_urlsafe(32), True


__all__: Sequence[str] = ["TOKEN_VARIABLE", "Access", "server_token"]
