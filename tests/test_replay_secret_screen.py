"""verify's secret screen finds what a search of the whole text finds, where a shape starts.

:func:`replay._secrets.first_secret` tries ``_SECRET`` only at the offsets where one of its
shapes can start (found with ``find``); it must return the same leftmost match, at the same
offset, as ``_SECRET.search`` over the whole text, for every text: shapes in any letter case,
several triggers in one text (a decoy ``bearer_token`` before a real credential), word
boundaries just before the start, and characters whose lower case is longer (``İ``). The
quick test before it (``_may_hold_secret``) rules out only texts the search finds nothing in.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.replay._secrets import _SECRET, _may_hold_secret, first_secret

# Pieces a text is made of: triggers that are secrets, triggers that are not, word characters
# that break a boundary, and characters lower() maps to another length or another letter.
PIECES = [
    "Bearer abcdefgh1234",
    "bEaReR\tXYZ-._~+/0123",
    "bearer_token",
    "bearer [REDACTED]",
    "BEARER\u00a0abcdefghij",
    "bearer\u2003abcdefgh1",
    "Bearer\u2028abcdefgh1",
    "bearer_token",
    "earer",
    "xbearer abcdefghij",
    "atk_",
    "ATK_abcdefgh",
    "aTk_0123456789_-xy",
    "at\u212a_abcdefghijk",  # KELVIN SIGN: a k in any letter case
    "eyJ",
    "eyJabcd.efgh.ij",
    "_eyJabcd.efgh.",
    "EYJabcd.efgh.",
    "\u0130",  # İ: lower() makes it two characters
    "\u0130bearer abcdefgh",
    " ",
    "\n",
    "x",
    "_",
    '"',
    "{",
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8), st.text(max_size=12))
def test_the_first_secret_is_the_searchs_match(pieces: list[str], noise: str) -> None:
    for text in ("".join(pieces), noise.join(pieces), noise + "".join(pieces) + noise):
        expected = _SECRET.search(text)
        found = first_secret(text)
        if not _may_hold_secret(text):  # the screen's quick test rules out no match
            assert expected is None, text
        if expected is None:
            assert found is None, text
        else:
            assert found is not None, text
            assert (found.start(), found.group(0)) == (expected.start(), expected.group(0)), text


def test_a_credential_after_a_decoy_field_name_is_found_at_its_offset() -> None:
    text = '{"name":"bearer_token","value":"[REDACTED]","note":"Bearer abcdefgh123"}'
    found = first_secret(text)
    assert found is not None and found.start() == text.index("Bearer ")
    assert first_secret('{"name":"bearer_token","value":"[REDACTED]"}') is None
