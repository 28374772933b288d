"""Bearer tokens: minted for one agent of one workspace, stored only as a hash, expiring."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._errors import Forbidden, NotFound, Unauthorized
from ._rows import Member, Token, columns, one

if TYPE_CHECKING:
    from ._store import Store


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: the agent a valid token was minted for, in its workspace."""

    workspace_id: str
    agent_id: str


def mint_token(
    store: Store, workspace_id: str, agent_id: str, ttl_seconds: float
) -> tuple[str, float]:
    """A fresh token for an agent of the workspace, and the instant (epoch seconds) it expires."""
    with store.transaction() as c:
        member = one(
            c,
            Member,
            f"SELECT {columns(Member, 'm')} FROM members m WHERE m.id = ? AND m.workspace_id = ?",
            (agent_id, workspace_id),
        )
        if member is None or member.kind != "agent":
            raise NotFound("agent_not_found", "No such agent in this workspace.")
        token = "atk_" + secrets.token_urlsafe(32)
        expires_at = time.time() + ttl_seconds
        c.execute(
            "INSERT INTO tokens (token_hash, workspace_id, agent_id, expires_at)"
            " VALUES (?, ?, ?, ?)",
            (token_hash(token), workspace_id, agent_id, expires_at),
        )
    return token, expires_at


def authenticate(
    store: Store, authorization: str | None, workspace_id: str, agent_id: str
) -> Principal:
    """The principal of a request's `Authorization` header, for the route's workspace and agent."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthorized("unauthorized", "A bearer token is required.")
    token = authorization[len("Bearer ") :].strip()
    found = one(
        store.connection,
        Token,
        f"SELECT {columns(Token, 'k')} FROM tokens k WHERE k.token_hash = ?",
        (token_hash(token),),
    )
    if found is None:
        raise Unauthorized("unauthorized", "The bearer token is not recognised.")
    if found.expires_at <= time.time():
        raise Unauthorized("token_expired", "The bearer token has expired; mint a fresh one.")
    if (found.workspace_id, found.agent_id) != (workspace_id, agent_id):
        raise Forbidden(
            "token_scope_mismatch", "The bearer token belongs to another workspace or agent."
        )
    return Principal(workspace_id, agent_id)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
