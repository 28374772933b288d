"""`agentteam-replay` as a person and a script run it: exit codes, --json, tables, errors.

One test per command drives the console script as a subprocess (its first invocation; the other
cases of the test call `main` in-process, whose return is the exit status); the tables of every
command (widths, help, JSON schemas, whole answers) call `main` in-process too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentteam_task_bridge import journal

from .replay_helpers import (
    SEED_VKEY,
    Built,
    call_event,
    cli_json,
    copy_journal,
    everyday_journal,
    injected,
    replay_cli,
    replay_main,
    route,
    seq_of,
    session_started,
    tamper,
    write_events,
)

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers

COMMANDS = ("verify", "calls", "idempotency", "deprecations", "audit", "rerun", "export")


def test_verify(everyday_journal: Built, tmp_path: Path) -> None:
    code, out = cli_json("verify", everyday_journal.path, "--key", everyday_journal.key_path)
    assert code == 0 and out["ok"] is True and out["findings"] == []
    assert out["journals"][0]["signatures_checked"] >= 2
    broken = copy_journal(everyday_journal, tmp_path / "broken")
    seq = seq_of(broken.path, "upstream_request", nth=1)
    tamper(
        broken.path, f"UPDATE events SET ts_wall = '2020-01-01T00:00:00.000000Z' WHERE seq = {seq}"
    )
    code, out = cli_json("verify", broken.path, "--key", broken.key_path, wire=False)
    assert code == 1 and out["ok"] is False
    assert [(f["seq"], f["rule"]) for f in out["findings"]] == [
        (seq, "hash_mismatch"),  # the chain
        (seq, "tree_hash_mismatch"),  # the Merkle leaf (ts_wall is in it)
    ]
    doubtful = tmp_path / "doubt.db"
    create = journal.UpstreamRequest(method="POST", route=route(""), body={"tasks": []})
    write_events(
        doubtful,
        [
            session_started(),
            call_event("c1", journal.CallReceived(arguments={}), tool="task_create"),
            call_event("c1", injected(), tool="task_create"),
            call_event("c1", create, tool="task_create"),
        ],
    )
    code, out = cli_json("verify", doubtful, "--trusted-key", SEED_VKEY, wire=False)
    assert code == 3 and out["ok"] is True
    assert [(c["call_id"], c["reason"]) for c in out["in_doubt"]] == [("c1", "no_outcome")]


def test_calls(everyday_journal: Built) -> None:
    code, out = cli_json("calls", everyday_journal.path, "--status", "error")
    assert code == 0 and [c["error_code"] for c in out["calls"]] == [
        "task_not_found",
        "idempotency_conflict",
    ]
    code, out = cli_json(
        "calls", everyday_journal.path, "--tool", "task_update", "--since", "1h", wire=False
    )
    assert code == 0 and out["matched"] == 2
    done = replay_main("calls", everyday_journal.path, "--since", "yesterday-ish")
    assert done.returncode == 2 and "is not a time" in done.stderr


def test_show(everyday_journal: Built) -> None:
    _, listed = cli_json(
        "calls", everyday_journal.path, "--error-code", "task_not_found", wire=False
    )
    call_id = listed["calls"][0]["call_id"]
    code, out = cli_json("show", everyday_journal.path, call_id)
    assert code == 0 and out["outcome"]["error"]["code"] == "task_not_found"
    assert out["exchanges"][0]["status"] == 404
    text = replay_main("show", everyday_journal.path, call_id)
    assert "The model sent" in text.stdout and "The model saw" in text.stdout
    missing = replay_main("show", everyday_journal.path, "nope.1")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "agentteam-replay: no call 'nope.1' in the journals given"


def test_idempotency(everyday_journal: Built, tmp_path: Path) -> None:
    code, out = cli_json("idempotency", everyday_journal.path)
    assert code == 0 and out["ok"] is True and out["groups"][0]["key"] == "k1"
    broken = tmp_path / "outside.db"
    body = {"channel": "g", "tasks": [{"title": "t"}], "idempotencyKey": "k"}
    write_events(
        broken,
        [
            session_started(),
            call_event("c1", journal.CallReceived(arguments={}), tool="task_create"),
            call_event("c1", injected(), tool="task_create"),
            call_event(
                "c1",
                journal.UpstreamRequest(method="POST", route=route(""), body=body),
                tool="task_create",
            ),
        ],
    )
    code, out = cli_json("idempotency", broken, wire=False)
    assert code == 1 and [f["rule"] for f in out["findings"]] == ["key_outside_callback"]


def test_deprecations(everyday_journal: Built) -> None:
    code, out = cli_json("deprecations", everyday_journal.path)
    assert code == 1 and out["ok"] is False  # just used: no gate is met
    assert {n["old_name"] for n in out["names"]} == {"list_tasks", "$.includeSubtasks"}
    code, out = cli_json("deprecations", everyday_journal.path, "--as-of", "2099-01-01", wire=False)
    assert code == 0 and all(n["gate"]["met"] for n in out["names"])
    code, out = cli_json(
        "deprecations",
        everyday_journal.path,
        "--name",
        "task_claim",
        "--as-of",
        "2099-01-01",
        wire=False,
    )
    assert code == 0 and [n["old_name"] for n in out["names"]] == ["task_claim"]


def test_audit(everyday_journal: Built, tmp_path: Path) -> None:
    code, out = cli_json("audit", everyday_journal.path, "--csv", tmp_path / "csv")
    assert code == 0 and out["calls"] == 18
    assert [lat["name"] for lat in out["latency"][:2]] == ["bridge", "upstream"]
    assert (tmp_path / "csv" / "sessions.csv").read_text().startswith("journal_id,session_id")


def test_rerun(everyday_journal: Built) -> None:
    code, out = cli_json("rerun", everyday_journal.path)
    assert code == 0 and out["ok"] is True and out["same"] == 18
    done = replay_main("rerun", everyday_journal.path, "--allow-mutations")
    assert done.returncode == 2 and "only with --against" in done.stderr


def test_export(everyday_journal: Built, tmp_path: Path) -> None:
    spans = tmp_path / "spans.json"
    code, out = cli_json("export", everyday_journal.path, "--output", spans)
    assert code == 0 and out["spans"] == 34 and out["calls"] == 18
    assert json.loads(spans.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    done = replay_main("export", everyday_journal.path, "--format", "jsonl")
    assert done.returncode == 0 and len(done.stdout.splitlines()) > 18
    assert "exported" in done.stderr  # the summary stays off the data on stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_tables_fit_the_columns_asked_and_pipes_are_not_wrapped(
    everyday_journal: Built, command: str
) -> None:
    done = replay_main(
        command, everyday_journal.path, *(["-o", "/dev/null"] * (command == "export"))
    )
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout and max(len(line) for line in done.stdout.splitlines()) <= 80
    assert "\x1b[" not in done.stdout
    # Piped with no $COLUMNS, nothing is wrapped: the journal's path stands whole on a line.
    done = replay_main(
        command,
        everyday_journal.path,
        *(["-o", "/dev/null"] * (command == "export")),
        env={"COLUMNS": ""},
    )
    assert done.returncode in (0, 1), done.stderr
    if command == "verify":
        assert f"{everyday_journal.path}\n" in done.stdout
    assert "\x1b[" not in done.stdout and "…" not in done.stdout.split("\n", 1)[0]


@pytest.mark.parametrize("command", (*COMMANDS, "show"))
def test_help_has_examples(command: str) -> None:
    done = replay_main(command, "--help")
    assert done.returncode == 0 and "examples:" in done.stdout
    assert f"agentteam-replay {command}" in done.stdout


def test_errors_a_person_hits_are_one_line_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database")
    for args, message in [
        ((tmp_path / "missing.db",), "no journal at"),
        ((tmp_path / "notes.txt",), "is not a journal"),
        ((tmp_path,), "no journal in the directory"),
    ]:
        done = replay_cli("verify", *args)
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and message in done.stderr
        assert "Traceback" not in done.stderr
    done = replay_cli("verify", tmp_path / "missing.db", "--key", tmp_path / "no.key")
    assert done.returncode == 2 and "no key file" in done.stderr


def test_show_prints_the_whole_answer_the_model_saw(everyday_journal: Built) -> None:
    _, listed = cli_json("calls", everyday_journal.path, "--status", "rejected", wire=False)
    rejected = {c["error_code"]: c["call_id"] for c in listed["calls"]}
    code, out = cli_json("show", everyday_journal.path, rejected["deprecated_tool"], wire=False)
    error = out["outcome"]["error"]
    assert code == 0 and error["retryable"] is False
    assert error["suggested_action"] == {
        "tool": "task_list",
        "arguments": {"channel": "general"},
    }
    # Piped with no $COLUMNS: nothing is cut or wrapped, the answer is all there.
    text = replay_main(
        "show", everyday_journal.path, rejected["deprecated_tool"], env={"COLUMNS": ""}
    )
    saw = text.stdout.split("The model saw", 1)[1].split("Timeline", 1)[0]
    assert '"suggested_action": {' in saw and '"retryable": false' in saw
    assert '"tool": "task_list"' in saw and "…" not in text.stdout
    _, errors = cli_json(
        "calls", everyday_journal.path, "--error-code", "idempotency_conflict", wire=False
    )
    code, out = cli_json("show", everyday_journal.path, errors["calls"][0]["call_id"], wire=False)
    assert out["outcome"]["error"]["retryable"] is False
    received = out["arguments"]
    shown = replay_main(
        "show", everyday_journal.path, errors["calls"][0]["call_id"], env={"COLUMNS": ""}
    )
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("  arguments "))
    assert json.loads(line.removeprefix("  arguments ")) == received


def test_rerun_differences_show_whole_values_and_outcomes() -> None:
    import io

    from rich.console import Console

    from agentteam_task_bridge.replay import RerunResult
    from agentteam_task_bridge.replay._diff import Difference
    from agentteam_task_bridge.replay._render import render_rerun
    from agentteam_task_bridge.replay._rerun import RerunCall

    long_title = "A title long enough to be cut in a narrow column, 漢字 and 🎉 included"
    call = RerunCall(
        journal_id="j",
        call_id="s1.4",
        session_id="s1",
        tool="task_get",
        seq=4,
        verdict="differs",
        recorded="task_not_found",
        today="result",
        differences=[
            Difference(
                path="$.outcome.result.data.task.title", recorded="<absent>", today=long_title
            )
        ],
    )
    result = RerunResult(mode="recorded", against=None, same=0, differs=1, skipped=0, calls=[call])
    for width in (80, 1 << 14):
        buffer = io.StringIO()
        render_rerun(Console(file=buffer, width=width, soft_wrap=width > 80), result)
        text = buffer.getvalue()
        assert "…" not in text and "task_not_found" in text and "result" in text
        if width > 80:
            assert long_title in text
        else:
            assert max(len(line) for line in text.splitlines()) <= 80
            assert all(word.strip(",") in text for word in long_title.split())  # folded, not cut


def test_published_json_schemas_are_current_and_every_json_output_follows_them(
    everyday_journal: Built, tmp_path: Path
) -> None:
    from jsonschema import Draft202012Validator

    from tools.replay_schemas import RESULTS, render

    for path, text in render().items():
        assert path.read_text() == text, f"{path} is stale: run python -m tools.replay_schemas"
    call_id = cli_json("calls", everyday_journal.path, wire=False)[1]["calls"][0]["call_id"]
    extra = {"show": [call_id], "export": ["--output", str(tmp_path / "spans.json")]}
    extra["report"] = ["--html", str(tmp_path / "report.html")]
    extra["key"] = ["--key-file", str(everyday_journal.key_path)]  # `key` reads no journal
    # `erase` changes no byte with --dry-run (the journal is the module's, shared)
    extra["erase"] = ["--call", call_id, "--reason", "schema", "--dry-run"]
    for command in RESULTS:
        if command in ("ship", "prune", "witness", "store-maintain"):
            # needs a store: test_fleet_ship, test_replay_prune, test_fleet_cosign, test_fleet_erase
            continue
        journals = [] if command == "key" else [everyday_journal.path]
        _, out = cli_json(command, *journals, *extra.get(command, []), wire=False)
        schema = json.loads(render_path(command).read_text())
        Draft202012Validator.check_schema(schema)
        errors = list(Draft202012Validator(schema).iter_errors(out))
        assert not errors, (command, [e.message for e in errors[:3]])
        wrong = {**out, next(iter(schema["required"])): {"not": "this shape"}}
        assert not Draft202012Validator(schema).is_valid(wrong), command


def render_path(command: str) -> Path:
    from tools.replay_schemas import DIRECTORY

    return DIRECTORY / f"{command}.schema.json"
