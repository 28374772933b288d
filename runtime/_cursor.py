"""Paging cursors: the sort keys of a page's last row, bound to one query and signed.

A cursor is ``base64url(JSON {"d": filter digest, "k": sort keys}) + "." + 16 hex of
HMAC-SHA256`` under the store's secret. Only this server can issue one; a cursor carried to
another query, status, sort or filter set is refused as `cursor_mismatch`, anything else that
does not verify (a forged or edited cursor, non-ASCII text) as `cursor_invalid`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import msgspec

from ._errors import BadRequest, ValidationFailed

_json_encode = msgspec.json.Encoder(order="sorted").encode
_json_decode = msgspec.json.decode


class Cursors:
    """Issues and verifies the cursors of one store (one secret)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def encode(self, digest: str, key: list[Any]) -> str:
        body = base64.urlsafe_b64encode(_json_encode({"d": digest, "k": key})).rstrip(b"=")
        return body.decode() + "." + self._mac(body)

    def decode(self, cursor: str, digest: str) -> list[Any]:
        """The sort keys of a cursor this store issued for the query of `digest`."""
        invalid = BadRequest(
            "cursor_invalid",
            "The cursor is not one this server issued.",
            field_errors={"$.cursor": "not a cursor issued by this server"},
        )
        body, _, mac = cursor.partition(".")
        good = self._mac(body.encode())
        if not hmac.compare_digest(mac.encode(), good.encode()):  # str: ASCII only
            raise invalid
        try:
            decoded = _json_decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, msgspec.DecodeError):
            raise invalid from None
        if decoded.get("d") != digest:
            raise ValidationFailed(
                {"$.cursor": "the cursor belongs to another query or filter set"},
                "The cursor was issued for a different query, status, sort or filter; "
                "start again without a cursor.",
                code="cursor_mismatch",
            )
        key: list[Any] = decoded["k"]
        return key

    def _mac(self, body: bytes) -> str:
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest()[:16]
