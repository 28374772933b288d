"""No journal module reads a row by position: rows are :class:`journal.Row` (a NamedTuple)
or :class:`journal._tlog.Stored`, read by name, or single columns unpacked (``(value,) = row``).

The check is syntactic. A row is what sqlite3 hands back (``fetchone()``, an element of
``fetchall()``, a cursor iterated), what a name bound to one of those or to a reader's rows
holds, a parameter annotated as a row, and any name ``row`` or attribute ``.row``; a subscript
of one by a literal index or literal-bounded slice (``row[16]``, ``row[:17]``,
``fetchone()[0]``) is a finding. The one place a row's layout is spelled out by position is a
row factory (``journal._tlog.stored_of``), which slices by the named width ``len(COLUMNS)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from agentteam_task_bridge import journal

JOURNAL = Path(journal.__file__).resolve().parent

# Calls whose result is a row, or rows (a list, or a cursor or reader yielding them).
ROW_SOURCES = frozenset({"execute", "fetchone", "fetchall", "rows", "stored_rows"})
ONE_ROW = frozenset({"fetchone"})
ROW_LIST = frozenset({"fetchall"})
ROW_NAMES = frozenset({"row"})
LIST_NAMES = frozenset({"rows"})
Names = tuple[set[str], set[str]]  # names holding a row, names holding a list of rows


def _literal(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int)


def _positional(node: ast.Subscript) -> bool:
    index = node.slice
    if isinstance(index, ast.Slice):
        return index.step is None and _literal(index.lower) and _literal(index.upper)
    return _literal(index)


def _calls(node: ast.AST, sources: frozenset[str]) -> bool:
    """Whether an expression calls a row source (``conn.execute(...).fetchone()``...)."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in sources
        for n in ast.walk(node)
    )


def _row_names(tree: ast.AST) -> Names:
    rows, lists = set(ROW_NAMES), set(LIST_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            if not _calls(node.value, ROW_SOURCES):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {t.id for t in targets if isinstance(t, ast.Name)}
            (lists if _calls(node.value, ROW_LIST) else rows).update(bound)
        elif isinstance(node, ast.For | ast.comprehension) and _calls(node.iter, ROW_SOURCES):
            if isinstance(node.target, ast.Name):
                rows.add(node.target.id)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            kind = ast.unparse(node.annotation)
            if any(word in kind for word in ("Row", "Stored")):
                listed = kind.startswith(("Sequence[", "list[", "Iterable["))
                (lists if listed else rows).add(node.arg)
    return rows, lists


def _is_row(node: ast.expr, names: Names) -> bool:
    rows, lists = names
    if isinstance(node, ast.Subscript):  # an element of a list of rows, or part of a row
        inner = node.value
        listed = isinstance(inner, ast.Name) and inner.id in lists
        return listed or _is_row(inner, names) or _calls(inner, ROW_LIST)
    if isinstance(node, ast.Name):
        return node.id in rows
    if isinstance(node, ast.Attribute):
        return node.attr in ROW_NAMES
    return isinstance(node, ast.Call) and _calls(node, ONE_ROW)


def positional_reads(root: Path) -> list[tuple[str, int, str]]:
    """(module, line, source) of every positional read of a row under ``root``, sorted."""
    found = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        names = _row_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and _positional(node) and _is_row(node.value, names):
                found.append((path.name, node.lineno, ast.get_source_segment(text, node) or ""))
    return sorted(found)


def test_no_journal_module_reads_a_row_by_position() -> None:
    assert positional_reads(JOURNAL) == [], "read these rows by name (journal.Row) or unpack"


def test_the_check_finds_each_form_of_positional_row_read(tmp_path: Path) -> None:
    (tmp_path / "_mod.py").write_text(
        "def f(conn, rows, cp: Row, raw: bytes, item):\n"
        "    head = conn.execute('SELECT seq, hash FROM events').fetchone()\n"
        "    for r in conn.execute('SELECT seq FROM events'):\n"
        "        r[0]\n"
        "    return (rows[-1][16], head[1], cp[2], item.row[3], raw[:4], row.seq, row[i],\n"
        "            conn.execute('PRAGMA page_size').fetchone()[0], rows[-1], row[:17])\n"
    )
    assert [(line, src) for _, line, src in positional_reads(tmp_path)] == [
        (4, "r[0]"),
        (5, "cp[2]"),
        (5, "head[1]"),
        (5, "item.row[3]"),
        (5, "rows[-1][16]"),
        (6, "conn.execute('PRAGMA page_size').fetchone()[0]"),
        (6, "row[:17]"),
    ]
