"""The writer cuts each event's Merkle leaf from the chain's encoding of the row (one encoding per
event, see ``journal._tlog.leaf_extras``): the leaf it hashes must be the documented one
(``journal.leaf_bytes``) and the digest the salted payload's, whatever the columns and the payload
hold, keys that look like the cut's markers included."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import _tlog

# Texts made to look like the markers the cut looks for, in columns and inside payloads.
TRICKY = st.sampled_from(
    [',"payload":', ',"prev_hash":"', '"', "\\", '\\"', ',"seq":1}', "\u2028", "é", ""]
)
TEXT = st.one_of(TRICKY, st.text(max_size=12), st.builds("".join, st.lists(TRICKY, max_size=4)))
KEYS = st.one_of(st.sampled_from(["payload", "prev_hash", "payload_sha256", "seq"]), TEXT)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
OPTIONAL = st.none() | TEXT


def canonical_text(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


ROWS = st.builds(
    lambda *columns: journal.Row(*columns),
    st.integers(1, 2**40),  # seq
    TEXT,  # journal_id
    TEXT,  # session_id
    OPTIONAL,  # call_id
    st.integers(0, 2**62),  # ts_mono_ns
    TEXT,  # ts_wall
    TEXT,  # kind
    st.integers(1, 9),  # kind_version
    OPTIONAL,  # mcp_method_name
    OPTIONAL,  # gen_ai_tool_name
    OPTIONAL,  # jsonrpc_request_id
    st.none() | st.integers(100, 599),  # http_response_status_code
    OPTIONAL,  # error_type
    st.none() | st.floats(0, 1e9, allow_nan=False).map(lambda f: round(f, 3)),  # duration_ms
    st.dictionaries(KEYS, JSON, max_size=4).map(canonical_text),  # payload
    st.one_of(st.sampled_from([journal.GENESIS_HASH, "ab" * 32]), TEXT),  # prev_hash
    st.just(""),  # hash (not part of either encoding)
)


@settings(max_examples=300, deadline=None)
@given(row=ROWS, size=st.integers(0, 70))
def test_the_leaf_cut_from_the_chain_encoding_is_the_documented_leaf(
    row: journal.Row, size: int
) -> None:
    border = journal.Frontier()
    for i in range(size):
        border.append(journal.leaf_hash(i.to_bytes(2, "big")))
    for image in (journal.canonical_bytes(row), None):  # given by the writer, or made here
        tree = border.copy()
        leaf = _tlog.leaf_extras(row, tree, image)
        assert len(leaf.salt) == 2 * _tlog.LEAF_SALT_BYTES
        assert leaf.payload_sha256 == journal.payload_digest(bytes.fromhex(leaf.salt), row.payload)
        expected = border.copy()
        stored = expected.append(journal.leaf_hash(journal.leaf_bytes(row, leaf.payload_sha256)))
        assert leaf.tree_hashes == b"".join(stored)
        assert tree.hashes == expected.hashes and tree.size == size + 1
    assert border.size == size  # each append went to a copy
