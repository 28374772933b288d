"""`agentteam-replay erase` on journals a real bridge wrote: live under calls, segmented, proofs.

The bridge runs as a subprocess against the reference runtime over real HTTP; the erase runs as
`agentteam-replay` subprocesses while the bridge keeps answering calls.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import RuntimeConfig, open_runtime

from .replay_helpers import RawBridge, replay_cli, replay_main
from .test_journal_tlog import _check, _prove
from .test_journal_tlog import oracle as oracle  # the Go oracle fixture

SECRET = "Grace Hopper lives at 1 Cobol Lane, grace@example.org"


def leaks(directory: Path, text: str, run: int = 12) -> list[str]:
    """The files under ``directory`` (recursively) holding any ``run``-byte piece of ``text``."""
    data = text.encode()
    pieces = {data[i : i + run] for i in range(len(data) - run + 1)}
    found: list[str] = []
    for file in sorted(directory.rglob("*")):
        if file.is_file():
            raw = file.read_bytes()
            if any(piece in raw for piece in pieces):
                found.append(file.name)
    return found


def _env(journal_dir: Path) -> dict[str, str]:
    # The bridge's key lives under XDG_CONFIG_HOME beside the journal (RawBridge); erase signs
    # with the same key, as it would on the bridge's machine.
    return {"XDG_CONFIG_HOME": str(journal_dir / "config")}


async def _tool(bridge: RawBridge, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = await bridge.request("tools/call", {"name": name, "arguments": arguments})
    result: dict[str, Any] = answer["result"]
    return result


def test_erase_a_live_journal_under_calls_then_verify_and_prove(
    tmp_path: Path, oracle: Path
) -> None:
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    path = journal_dir / "journal.db"
    runtime_db = tmp_path / "runtime.db"  # the runtime's own store keeps its tasks: elsewhere
    erased: dict[str, Any] = {}
    answers: list[bool] = []

    async def main() -> None:
        async with open_runtime(RuntimeConfig(db_path=str(runtime_db))) as rt:
            bridge = await RawBridge.start(rt, path)
            try:
                for i in range(3):
                    title = f"{SECRET} #{i}"
                    done = await _tool(
                        bridge, "task_create", {"channel": "eng", "tasks": [{"title": title}]}
                    )
                    assert not done.get("isError"), done
                for i in range(3):
                    done = await _tool(
                        bridge, "task_create", {"channel": "general", "tasks": [{"title": f"t{i}"}]}
                    )
                    assert not done.get("isError"), done
                assert leaks(journal_dir, SECRET)

                async def erase() -> None:
                    done = await trio.run_process(
                        [
                            *_replay(),
                            "erase",
                            str(path),
                            "--matching",
                            SECRET,
                            "--reason",
                            "subject request",
                            "--json",
                        ],
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                        env={**os.environ, **_env(journal_dir)},
                    )
                    assert done.returncode == 0, done.stderr.decode()
                    erased.update(json.loads(done.stdout))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(erase)
                    # Calls go on while erase takes the write lock (bounded).
                    for i in range(40):
                        done = await _tool(
                            bridge, "task_get", {"channel": "general", "number": 1 + i % 3}
                        )
                        answers.append(not done.get("isError"))
                        if erased:
                            break
                for _ in range(5):  # and after it: the writer sequences them after the erasure
                    done = await _tool(bridge, "task_get", {"channel": "general", "number": 1})
                    answers.append(not done.get("isError"))
            finally:
                assert bridge.process.stdin is not None
                await bridge.process.stdin.aclose()
                with trio.fail_after(30):
                    await bridge.process.wait()

    trio.run(main)
    assert all(answers) and len(answers) >= 6
    (result,) = erased["journals"]
    assert erased["ok"] and result["live"] and result["scrubbed"] and len(result["seqs"]) >= 6
    assert leaks(journal_dir, SECRET) == []

    vkey = journal.load_key(journal_dir / "config/agentteam-bridge/journal-signing.key").verifier
    done = replay_cli("verify", path, "--trusted-key", vkey.to_text(), "--json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["journals"][0]["erased_seqs"] == result["seqs"]
    # Every event the bridge journaled after the erasure is in the chain, after its event.
    with journal.open_reader(path) as reader:
        kinds = [r.kind for r in reader.events(since_seq=result["event_seq"])]
    assert kinds.count("call_result") >= 5 and kinds[-1] == "session_ended"
    assert "journal_gap" not in kinds  # nothing lost: no failed commit, no recovery
    # An erased event still proves inclusion, by check-proof and by Go's tlog.
    for seq in result["seqs"][:2]:
        proof = _prove(path, "--seq", str(seq))
        assert _check(oracle, proof, tmp_path / f"proof-{seq}.json", [vkey.to_text()]) == (
            True,
            True,
        )
    # Rendered as erased, not as corruption: calls, show, audit.
    with journal.open_reader(path) as reader:
        call_id = next(r.call_id for r in reader.events() if r.seq == result["seqs"][0])
    assert call_id is not None
    listed = replay_main("calls", path, "--json")
    assert listed.returncode == 0, listed.stderr
    assert call_id in listed.stdout and SECRET[:12] not in listed.stdout
    shown = replay_main("show", path, call_id, "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["arguments"] == {"erased": True}
    assert detail["outcome_kind"] == "call_result" and detail["outcome"] == {"erased": True}
    table = replay_main("show", path, call_id)
    assert "(payload erased)" in table.stdout and "nothing recorded" not in table.stdout
    audited = replay_main("audit", path, "--json")
    assert audited.returncode == 0, audited.stderr


def _replay() -> list[str]:
    import sys

    return [sys.executable, "-m", "agentteam_task_bridge.replay._cli"]


def test_serve_retain_payloads_erases_old_payloads_and_keeps_the_envelope(tmp_path: Path) -> None:
    journal_dir = tmp_path / "journals"
    journal_dir.mkdir()
    path = journal_dir / "journal.db"
    fresh = "Katherine Johnson, 4 Langley Court"

    async def session(*extra: str, title: str, wait_erased: bool = False) -> None:
        async with open_runtime(RuntimeConfig(db_path=str(tmp_path / "runtime.db"))) as rt:
            bridge = await RawBridge.start(rt, path, *extra)
            try:
                if wait_erased:  # the start-up trim runs beside the session, off the call path
                    await bridge.wait_for_event("payload_erased")
                done = await _tool(
                    bridge, "task_create", {"channel": "eng", "tasks": [{"title": title}]}
                )
                assert not done.get("isError"), done
            finally:
                assert bridge.process.stdin is not None
                await bridge.process.stdin.aclose()
                with trio.fail_after(30):
                    await bridge.process.wait()

    trio.run(lambda: session(title=SECRET))
    assert leaks(journal_dir, SECRET)
    trio.run(lambda: session("--retain-payloads", "0", title=fresh, wait_erased=True))

    assert leaks(journal_dir, SECRET) == []
    assert leaks(journal_dir, fresh)  # written after the trim: kept until it is older
    with journal.open_reader(path) as reader:
        (event,) = list(reader.events(kind="payload_erased"))
        results = list(reader.events(kind="call_result"))
    assert isinstance(event.payload, journal.PayloadErased)
    assert event.payload.actor == "retention" and event.payload.selector == "older_than"
    first = results[0]  # the first session's call: payload gone, envelope kept
    assert first.seq in event.payload.seqs and first.payload == {"erased": True}
    assert first.gen_ai_tool_name == "task_create" and first.duration_ms is not None
    vkey = journal.load_key(journal_dir / "config/agentteam-bridge/journal-signing.key").verifier
    done = replay_cli("verify", path, "--trusted-key", vkey.to_text(), "--json")
    assert done.returncode == 0, done.stdout
