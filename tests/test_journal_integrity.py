"""``journal.IntegrityPass`` (verify's fused chain, checkpoint and tree pass) leaves exactly what
``ChainVerifier.feed``, ``CheckpointCheck.see`` and ``TreeCheck.feed`` leave, row by row: the
same findings in the same order, counts, head, erased seqs, tree border and broken flag, on a
real journal's rows edited the ways a file's author can edit them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import COLUMNS, ERASED_PAYLOAD
from agentteam_task_bridge.journal._tlog import Leaf

from .journal_helpers import KEY, SESSION

N = 40
_WIDTH = len(COLUMNS)
_SALT, _DIGEST, _STORED = _WIDTH, _WIDTH + 1, _WIDTH + 2


def _events() -> list[journal.Event]:
    events: list[journal.Event] = []
    for i in range(N // 2):
        events.append(
            journal.Event(
                session_id=SESSION,
                call_id=f"c{i}",
                gen_ai_tool_name="task_list",
                jsonrpc_request_id=str(i) if i % 3 else None,
                payload=journal.CallReceived(arguments={"i": i, "t": "é" * (i % 4)}),
            )
        )
        events.append(
            journal.Event(
                session_id=SESSION,
                call_id=f"c{i}",
                gen_ai_tool_name="task_list",
                payload=journal.UpstreamResponse(status=200, duration_ms=1.5 * i)
                if i % 2
                else journal.CallRejected(error_code="invalid_arguments", message="no"),
            )
        )
    return events


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[journal.Reader]:
    path = tmp_path_factory.mktemp("integrity") / "j.db"
    with journal.open_sync_writer(path, key=KEY, checkpoint_every=7) as writer:
        for event in _events():  # one commit each: a checkpoint every 7 events
            writer.append(event)
    with journal.open_reader(path) as reader:
        assert reader.merkle
        yield reader


def _checks(reader: journal.Reader) -> tuple[Any, Any, Any]:
    chain = journal.ChainVerifier(reader.journal_id, check_payloads=False, max_findings=50)
    stored = [(f"stored #{i}", cp) for i, cp in enumerate(reader.checkpoints())]
    assert len(stored) >= 3
    trust = journal.trust_of(KEY, ())
    checkpoints = journal.CheckpointCheck(chain, stored, trust, roots_checked=True)
    tree = journal.start_tree(chain.report, 1, 0, reader.stored_hash, stored, reader.journal_id)
    return chain, checkpoints, tree


def _state(chain: Any, checkpoints: Any, tree: Any) -> tuple[Any, ...]:
    checkpoints.finish()
    return (
        [(f.seq, f.rule, f.detail) for f in chain.findings],
        chain.findings_omitted,
        chain.count,
        chain.seq,
        chain.hash,
        chain.erased,
        sorted(checkpoints._matched),
        sorted(checkpoints._seen),
        checkpoints.signed_through,
        tree.broken,
        tree.frontier.size,
        list(tree.frontier.hashes),
    )


def _by_each_feed(reader: journal.Reader, values: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    chain, checkpoints, tree = _checks(reader)
    rows = []
    for value in values:
        row = journal.Row._make(value[:_WIDTH])
        leaf = None if value[_SALT] is None else Leaf._make(value[_WIDTH:])
        chain.feed(row, leaf)
        checkpoints.see(row)
        tree.feed(row, leaf)
        rows.append(row)
    return rows, _state(chain, checkpoints, tree)


def _by_the_pass(reader: journal.Reader, values: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    chain, checkpoints, tree = _checks(reader)
    given = list(journal.IntegrityPass(chain, checkpoints, tree).rows(values))
    assert given == values  # every row given back as it came, in order
    return [journal.Row._make(v[:_WIDTH]) for v in given], _state(chain, checkpoints, tree)


_ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=40),
    st.sampled_from(
        [
            "",
            "0" * 64,
            "2026-12-04T21:30:49.123456Z",
            "2026-12-04T21:30:49.123456+00:00",
            "2026-12-04T21:30:49.12345٣Z",
            "zz",
            ERASED_PAYLOAD,
        ]
    ),
)


def _reseal(values: list[tuple[Any, ...]], mode: str) -> list[tuple[Any, ...]]:
    """The rows with their hashes recomputed after an edit, as an author who rewrites the file
    would: each row's hash, the payload digests (not with ``keep-digests``), the links to the
    previous row (not with ``keep-links``), the stored tree hashes; rows that cannot be
    encoded keep theirs. Then only the rules about what was not recomputed see the edit."""
    out, previous, frontier = [], journal.GENESIS_HASH, journal.Frontier()
    for value in values:
        row = list(value)
        if mode != "keep-links":
            row[15] = previous
        try:
            row[16] = hashlib.sha256(journal.canonical_bytes(row[:_WIDTH])).hexdigest()
            if isinstance(row[_SALT], str):
                if mode != "keep-digests":
                    row[_DIGEST] = journal.payload_digest(bytes.fromhex(row[_SALT]), row[14])
                leaf = journal.leaf_bytes(row[:_WIDTH], row[_DIGEST])
                row[_STORED] = b"".join(frontier.append(journal.leaf_hash(leaf)))
        except (TypeError, ValueError, AttributeError, msgspec.EncodeError):
            pass
        previous = row[16]
        out.append(tuple(row))
    return out


@st.composite
def _edits(draw: st.DrawFn) -> list[tuple[str, int, Any]]:
    kinds = st.sampled_from(
        "set delete swap copy erase shorten same-second rename relink repayload".split()
    )
    return draw(
        st.lists(
            st.tuples(kinds, st.integers(0, N - 1), st.tuples(st.integers(0, 19), _ODD_VALUES)),
            max_size=4,
        )
    )


def _apply(values: list[tuple[Any, ...]], edits: list[tuple[str, int, Any]]) -> list[Any]:
    out = [list(v) for v in values]
    for kind, at, (column, value) in edits:
        at %= len(out) if out else 1
        if not out:
            break
        if kind == "set":
            out[at][column] = value
        elif kind == "delete":
            del out[at]
        elif kind == "swap":
            other = (at + 1 + column) % len(out)
            out[at], out[other] = out[other], out[at]
        elif kind == "copy":
            out.insert(at, list(out[(at + column) % len(out)]))
        elif kind == "erase":  # as journal._erase leaves a row: salt "", the erased text
            out[at][14], out[at][_SALT] = ERASED_PAYLOAD, ""
        elif kind == "shorten" and isinstance(out[at][_STORED], bytes):
            out[at][_STORED] = out[at][_STORED][: 32 * (column % 3)]
        elif kind == "rename":  # another journal's id
            out[at][1] = f"{out[at][1]}{column}"
        elif kind == "relink":
            out[at][15] = f"{column:064x}"
        elif kind == "repayload":
            out[at][14] = f'{{"arguments":{{"i":{column}}}}}'
        elif kind == "same-second" and isinstance(out[at][5], str):
            # Another time in the second the rows before hold: the pass's quick shape test.
            out[at][5] = out[at][5][:19] + [".9Z", ".999999z", ".999999Z ", "+00:00"][column % 4]
    return [tuple(v) for v in out]


def test_an_untouched_journal_takes_the_pass_alone(written: journal.Reader) -> None:
    values = list(written.stored_values())
    rows, state = _by_the_pass(written, values)
    assert state == _by_each_feed(written, values)[1]
    assert state[0] == [] and state[2] == N and not state[9]
    assert rows == list(written.rows())


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edits=_edits(), reseal=st.sampled_from(["no", "all", "keep-digests", "keep-links"]))
def test_the_pass_says_what_each_feed_says(
    written: journal.Reader, edits: list[tuple[str, int, Any]], reseal: str
) -> None:
    values = _apply(list(written.stored_values()), edits)
    if reseal != "no":
        values = _reseal(values, reseal)
    assert _by_the_pass(written, values) == _by_each_feed(written, values)


def test_without_a_tree_each_row_goes_through_the_chain(written: journal.Reader) -> None:
    # A v1 journal's rows (no leaf columns: NULL) and no tree: ChainVerifier.feed's alone.
    values = list(written.stored_values(leaves=False))
    assert {v[_WIDTH:] for v in values} == {(None, None, None)}
    chains = []
    for fused in (False, True):
        chain = journal.ChainVerifier(written.journal_id, check_payloads=False)
        trust = journal.trust_of(KEY, ())
        checkpoints = journal.CheckpointCheck(chain, [], trust, roots_checked=False)
        if fused:
            rows = list(journal.IntegrityPass(chain, checkpoints, None).rows(values))
            assert [row[:_WIDTH] for row in rows] == list(written.rows())
        else:
            for value in values:
                chain.feed(journal.Row._make(value[:_WIDTH]), None)
        chains.append((chain.count, chain.seq, chain.hash, chain.findings))
    assert chains[0] == chains[1] and chains[1][0] == N and chains[1][3] == []


def test_a_chain_checking_payloads_is_refused(written: journal.Reader) -> None:
    chain = journal.ChainVerifier(written.journal_id)
    checkpoints = journal.CheckpointCheck(chain, [], journal.trust_of(KEY, ()), roots_checked=True)
    with pytest.raises(ValueError, match="checks no payloads"):
        journal.IntegrityPass(chain, checkpoints, None)


# A value of every type sqlite3 reads (and a bool, a 2**70) in each column, the row resealed:
# the pass checks the types of the values up to the payload and relies on its use of the rest.
_EVERY_TYPE = (7, 2**70, 1.0, 2.5, "x", "", b"\x00", b"", None, True)


@pytest.mark.parametrize("column", range(_WIDTH + 3))
def test_a_value_of_another_type_in_any_column_is_what_each_feed_says(
    written: journal.Reader, column: int
) -> None:
    untouched = list(written.stored_values())
    for value in _EVERY_TYPE:
        for at in (0, 9, N - 1):
            edited = [list(v) for v in untouched]
            if isinstance(edited[at][column], str) and isinstance(value, bytes):
                value = edited[at][column].encode()  # the text's bytes: a BLOB of the same text
            edited[at][column] = value
            for mode in ("all", "keep-digests"):
                values = _reseal([tuple(v) for v in edited], mode)
                assert _by_the_pass(written, values) == _by_each_feed(written, values)
