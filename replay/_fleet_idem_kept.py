"""``report --from``'s idempotency check read from the state the ingest keeps per journal.

The state (``_fleet_idem_state``) holds each journal's part of the checker's run as if the
journal were fed first; this module combines the journals in the checker's order (journal id,
``COLLATE "C"``) and answers the questions the ingest left (the earlier journals' effect):

* a call's place in the feed is its journal's offset (the calls of the journals before it)
  plus its place in its journal, so the findings sort as the checker emits them;
* a key scope held by several journals takes its group from the first, its baseline from the
  first journal holding a success, and every success of a later journal is judged again
  against that baseline (that journal's own verdicts on them dropped);
* a claim question is answered by the task's last claim set in an earlier journal, known when
  no journal after it changed the task (each journal's ``through``);
* a signature's first call in a journal repeats its last call in the nearest earlier journal
  holding it when that one succeeded within ``REPEAT_WINDOW`` calls of the feed, clean when the
  epochs match, each task's epoch being its journal's relative one plus the changes of the
  journals before (the same offsets answer a repeat whose two calls name other tasks).

It serves whole journals only (no filter, or ``--journal``), and only when every selected
journal's state covers all its calls (no tail after its frontier) and was kept with the same
repeat window: :func:`idempotency_kept` returns None otherwise, and the caller runs the
present statement (``_fleet_idempotency``) over the lines.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Any

from ._findings import Finding
from ._fleet_idempotency import _detail, _group
from ._fleet_store import Instant, read_only
from ._idempotency import HintCheck, IdempotencyResult, declared_hints

__all__ = ["idempotency_kept"]


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# The key scopes: the groups of those one journal holds, and the rows of the others.
_SCOPES = """
WITH s AS (
  SELECT journal_id, scope, ws, agent, run, cb, key, first_seq, calls, conflicts, created,
    replays, base_jo, base_call, base_numbers, base_reused
  FROM agentteam.idem_scopes WHERE journal_id = ANY (%(j)s)
), m AS (SELECT scope FROM s GROUP BY scope HAVING count(*) > 1)
SELECT
  (SELECT coalesce(json_agg(json_build_array(ws, agent, run, cb, key, first_seq, journal_id,
     calls, created, replays, conflicts, base_numbers, base_call, coalesce(base_reused, false),
     scope)), '[]')
   FROM s WHERE scope NOT IN (SELECT scope FROM m)),
  (SELECT coalesce(json_agg(json_build_array(journal_id, scope, ws, agent, run, cb, key,
     first_seq, calls, conflicts, created, replays, base_jo, base_call, base_numbers,
     base_reused)), '[]')
   FROM s WHERE scope IN (SELECT scope FROM m))"""

# The tasks the shared signatures' calls and the repeat questions name, with their changes.
_TASKS_NAMED = """
SELECT t.journal_id, t.task, t.through FROM agentteam.idem_tasks t
WHERE t.journal_id = ANY (%(j)s) AND t.task IN (
  SELECT unnest(g.first_tasks || g.last_tasks) FROM agentteam.idem_sigs g
  WHERE g.journal_id = ANY (%(j)s) AND g.sig IN (
    SELECT sig FROM agentteam.idem_sigs WHERE journal_id = ANY (%(j)s)
    GROUP BY sig HAVING count(*) > 1)
  UNION
  SELECT unnest(r.prev_tasks || r.tasks) FROM agentteam.idem_repq r
  WHERE r.journal_id = ANY (%(j)s))"""


class _Offsets:
    """Each task's changes by the journals before a given one (their ``through`` summed)."""

    def __init__(self, rows: list[tuple[str, str, int]]) -> None:
        self.by_task: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for jid, task, through in sorted(rows, key=lambda r: r[0]):
            self.by_task[task].append((jid, through))

    def epochs(self, jid: str, tasks: list[str], relative: list[int]) -> list[int]:
        return [
            r + sum(t for j, t in self.by_task.get(task, []) if j < jid)
            for task, r in zip(tasks, relative, strict=True)
        ]


def idempotency_kept(
    store_url: str | Instant,
    *,
    hints: dict[str, bool] | None = None,
    journal: str | None = None,
    window: int,
) -> IdempotencyResult | None:
    """The check over the journals ``journal`` (a prefix) selects, all when None, from the
    kept state; None when the state cannot serve (module docstring)."""
    hints = declared_hints() if hints is None else hints
    declared = sorted(tool for tool, on in hints.items() if on)
    with read_only(store_url) as conn:
        journals = conn.execute(
            "SELECT c.journal_id, c.calls, i.calls, i.keyed, i.claim_calls, i.claim_repeats,"
            " i.repeat_window FROM agentteam.call_counts c"
            " LEFT JOIN agentteam.idem_journals i USING (journal_id)"
            " WHERE c.journal_id LIKE %s",
            (_like(journal or ""),),
        ).fetchall()
        if any(r[2] is None or r[2] != r[1] or r[6] != window for r in journals):
            return None  # a tail after a frontier, or another window: the lines' statement
        journals.sort(key=lambda r: r[0])
        jids = [r[0] for r in journals]
        offset: dict[str, int] = {}
        total = 0
        for r in journals:
            offset[r[0]] = total
            total += int(r[1])
        kept = _Kept(conn, jids, offset, window, declared)
        result = kept.result(hints)
    result.calls = total
    result.keyed_calls = sum(int(r[3]) for r in journals)
    result.claim_calls = sum(int(r[4]) for r in journals)
    result.claim_repeats += sum(int(r[5]) for r in journals)
    return result


class _Kept:
    def __init__(
        self, conn: Any, jids: list[str], offset: dict[str, int], window: int, declared: list[str]
    ) -> None:
        self.conn, self.jids, self.offset = conn, jids, offset
        self.window, self.declared = window, declared
        self.emitted: list[tuple[tuple[int, int, int], Finding, str | None]] = []
        self.counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.claim_repeats = 0

    def q(self, sql: str, **params: Any) -> list[Any]:
        return list(self.conn.execute(sql, {"j": self.jids, **params}).fetchall())

    def emit(
        self,
        jid: str,
        jo: int,
        part: int,
        sub: int,
        call_id: str,
        fseq: int,
        rule: str,
        args: list[Any],
        scope: str | None,
    ) -> None:
        finding = Finding(
            journal_id=jid, seq=fseq, rule=rule, detail=_detail(rule, args), call_id=call_id
        )
        self.emitted.append(((self.offset[jid] + jo, part, sub), finding, scope))

    def result(self, hints: dict[str, bool]) -> IdempotencyResult:
        groups = self.groups()
        self.claims()
        self.repeats()
        violations: dict[str, int] = defaultdict(int)
        for _, _, scope in self.emitted:
            if scope is not None:
                violations[scope] += 1
        checks = {
            tool: HintCheck(
                tool=tool, declared=hints.get(tool), repeats=n, safe=safe, unsafe=n - safe
            )
            for tool, (n, safe) in self.counts.items()
            if n
        }
        for tool, declared in hints.items():
            checks.setdefault(tool, HintCheck(tool=tool, declared=declared))
        for check in checks.values():
            check.judge()
        findings = [f for _, f, _ in sorted(self.emitted, key=lambda p: p[0])]
        kept = [_group(row, violations[row[-1]]) for row in groups]
        return IdempotencyResult(
            groups=sorted(kept, key=lambda g: (g.journal_id, g.first_seq)),
            hints=sorted(checks.values(), key=lambda h: h.tool),
            findings=sorted(findings, key=lambda f: (f.journal_id or "", f.seq or 0)),
            claim_repeats=self.claim_repeats,
        )

    # --- keyed creates ----------------------------------------------------------------

    def groups(self) -> list[list[Any]]:
        # A scope one journal holds (nearly all) is its group as kept, read as one JSON value
        # (the statement's shape); the others are combined here.
        single, shared = self.q(_SCOPES)[0]
        rows: dict[str, list[Any]] = {row[-1]: row for row in single}
        by_scope: dict[str, list[Any]] = defaultdict(list)
        for row in shared:
            by_scope[row[1]].append(row)
        base_of: dict[str, str] = {}  # a scope judged again: the journal of its baseline
        base_at: list[tuple[str, int]] = []  # and that baseline's place (keys never sent back)
        for scope, held in by_scope.items():
            held.sort(key=lambda r: r[0])
            first = held[0]
            base = next((r for r in held if r[12] is not None), None)
            later = base is not None and any(r[0] > base[0] for r in held)
            if later and base is not None:
                base_of[scope] = base[0]
                base_at.append((base[0], base[12]))
            created = base[10] if base is not None else 0
            replays = base[11] if base is not None else 0
            rows[scope] = [
                first[2],
                first[3],
                first[4],
                first[5],
                first[6],
                first[7],
                first[0],
                sum(r[8] for r in held),
                created,
                replays,
                sum(r[9] for r in held),
                base[14] if base is not None else None,
                base[13] if base is not None else None,
                bool(base[15]) if base is not None else False,
                scope,
            ]
        for jid, jo, part, sub, call_id, fseq, rule, args, scope, judged in self.q(
            "SELECT journal_id, jo, part, sub, call_id, fseq, rule, args, scope, judged"
            " FROM agentteam.idem_findings WHERE journal_id = ANY (%(j)s)"
        ):
            if judged and scope in base_of and jid > base_of[scope]:
                continue  # judged against its own journal's baseline: judged again below
            self.emit(jid, jo, part, sub, call_id, fseq, rule, args, scope)
        if base_at:
            self.judge_again(base_at, rows)
        return list(rows.values())

    def judge_again(self, base_at: list[tuple[str, int]], rows: dict[str, list[Any]]) -> None:
        for jid, jo, call_id, fseq, scope, key, fresh, conflict, differ, reused in self.q(
            """
SELECT s.journal_id, s.jo, s.call_id, s.fseq, s.scope, b.key,
  CASE WHEN s.payload = b.base_payload THEN (
    SELECT coalesce(jsonb_agg(t -> 1 ORDER BY i), '[]')
    FROM jsonb_array_elements(s.identities) WITH ORDINALITY x(t, i)
    WHERE NOT b.base_numbers @> jsonb_build_array(t -> 1)) END,
  (s.payload <> b.base_payload) IS TRUE, s.identities <> b.base_identities, s.reused
FROM unnest(%(bj)s::text[], %(bo)s::bigint[]) AS q(journal_id, jo)
JOIN agentteam.idem_scopes b ON b.journal_id = q.journal_id COLLATE "C" AND b.base_jo = q.jo
JOIN agentteam.idem_successes s ON s.scope = b.scope AND s.journal_id > b.journal_id
WHERE s.journal_id = ANY (%(j)s)""",
            bj=[j for j, _ in base_at],
            bo=[jo for _, jo in base_at],
        ):
            row = rows[scope]
            if conflict:
                self.emit(jid, jo, 0, 0, call_id, fseq, "conflict_not_reported", [key], scope)
                continue
            if fresh is None:
                continue
            row[9] += 1
            if fresh:
                self.emit(
                    jid, jo, 0, 0, call_id, fseq, "replay_allocated_numbers", [key, fresh], scope
                )
            elif differ:
                self.emit(
                    jid, jo, 0, 0, call_id, fseq, "replay_identities_differ", [key, fresh], scope
                )
            if not reused:
                self.emit(jid, jo, 0, 1, call_id, fseq, "replay_not_reused", [key], scope)

    # --- claims -----------------------------------------------------------------------

    def claims(self) -> None:
        asked = self.q(
            """
SELECT q.journal_id, q.jo, q.pos, q.task, q.call_id, q.fseq, q.ch, q.num, q.listed, q.desired,
  q.counted
FROM agentteam.idem_claimq q
WHERE q.journal_id = ANY (%(j)s) AND EXISTS (
  SELECT 1 FROM agentteam.idem_tasks t
  WHERE t.task = q.task AND t.journal_id < q.journal_id AND t.journal_id = ANY (%(j)s)
    AND t.set_through IS NOT NULL)"""
        )
        if not asked:
            return
        held: dict[str, list[Any]] = defaultdict(list)
        for row in self.q(
            "SELECT journal_id, task, through, set_holder, set_through FROM agentteam.idem_tasks"
            " WHERE journal_id = ANY (%(j)s) AND task IN ("
            "   SELECT q.task FROM agentteam.idem_claimq q WHERE q.journal_id = ANY (%(j)s))"
        ):
            held[row[1]].append(row)
        for task_rows in held.values():
            task_rows.sort(key=lambda r: r[0])
        repeated: set[tuple[str, int]] = set()
        for jid, jo, pos, task, call_id, fseq, ch, num, listed, desired, counted in asked:
            changed = 0
            known: tuple[str | None] | None = None
            for r in reversed([r for r in held[task] if r[0] < jid]):
                if r[4] is not None:
                    if changed == 0 and r[2] == r[4]:
                        known = (r[3],)
                    break
                changed += r[2]
            if known is None:
                continue
            holder = known[0]
            same = holder == desired
            if same and not counted:
                repeated.add((jid, jo))
            if listed == same:
                rule = "claim_repeat_changed" if listed else "claim_state_wrong"
                args = [ch, num, desired if listed else holder]
                self.emit(jid, jo, 1, pos, call_id, fseq, rule, args, None)
        self.claim_repeats += len(repeated)

    # --- repeats ----------------------------------------------------------------------

    def repeats(self) -> None:
        for tool, n, safe in self.q(
            "SELECT tool, sum(n), sum(safe) FROM agentteam.idem_hints"
            " WHERE journal_id = ANY (%(j)s) GROUP BY tool"
        ):
            self.counts[tool][0] += int(n)
            self.counts[tool][1] += int(safe)
        for jid, jo, call_id, fseq, tool in self.q(
            "SELECT journal_id, jo, call_id, fseq, tool FROM agentteam.idem_unsafe"
            " WHERE journal_id = ANY (%(j)s) AND tool = ANY (%(d)s)",
            d=self.declared,
        ):
            self.emit(jid, jo, 2, 0, call_id, fseq, "idempotent_hint_unsafe", [tool], None)
        shared = self.q(
            """
WITH s AS (SELECT sig FROM agentteam.idem_sigs WHERE journal_id = ANY (%(j)s)
           GROUP BY sig HAVING count(*) > 1)
SELECT g.sig, g.journal_id, g.first_jo, g.first_call, g.first_fseq, g.first_tool, g.first_safe,
  g.first_tasks, g.first_now, g.last_jo, g.last_ok, g.last_tasks, g.last_after
FROM agentteam.idem_sigs g JOIN s USING (sig) WHERE g.journal_id = ANY (%(j)s)"""
        )
        asked = self.q(
            "SELECT journal_id, jo, call_id, fseq, tool, safe, prev_tasks, prev_after, tasks, now"
            " FROM agentteam.idem_repq WHERE journal_id = ANY (%(j)s)"
        )
        named = any(r[7] or r[11] for r in shared) or any(r[6] or r[8] for r in asked)
        offsets = _Offsets(self.q(_TASKS_NAMED) if named else [])
        by_sig: dict[str, list[Any]] = defaultdict(list)
        for row in shared:
            by_sig[row[0]].append(row)
        for held in by_sig.values():
            held.sort(key=lambda r: r[1])
            for prev, cur in pairwise(held):
                jid, jo = cur[1], cur[2]
                if not prev[10]:
                    continue
                if self.offset[jid] + jo - (self.offset[prev[1]] + prev[9]) > self.window:
                    continue
                before = offsets.epochs(prev[1], prev[11], prev[12])
                if before != offsets.epochs(jid, cur[7], cur[8]):
                    continue
                self.repeat(jid, jo, cur[3], cur[4], cur[5], cur[6])
        for jid, jo, call_id, fseq, tool, safe, prev_tasks, prev_after, now_tasks, now in asked:
            if offsets.epochs(jid, prev_tasks, prev_after) == offsets.epochs(jid, now_tasks, now):
                self.repeat(jid, jo, call_id, fseq, tool, safe)

    def repeat(self, jid: str, jo: int, call_id: str, fseq: int, tool: str, safe: bool) -> None:
        self.counts[tool][0] += 1
        self.counts[tool][1] += 1 if safe else 0
        if not safe and tool in self.declared:
            self.emit(jid, jo, 2, 0, call_id, fseq, "idempotent_hint_unsafe", [tool], None)


def idempotency_for_report(
    store_url: str | Instant,
    *,
    whole: bool,
    journal: str | None,
    calls: str,
    call_params: dict[str, Any],
) -> IdempotencyResult:
    """``report --from``'s check: from the kept state over whole journals when it serves,
    else the statement over the lines the filter keeps (``idempotency_from``, in order)."""
    from . import _fleet_idempotency as present

    if whole:
        kept = idempotency_kept(store_url, journal=journal, window=present.REPEAT_WINDOW)
        if kept is not None:
            return kept
    return present.idempotency_from(store_url, calls=calls, call_params=call_params, in_order=True)
