"""Secrets and isolation: canary tokens never leak; no other credential is used; model input never
changes the hidden context."""

from __future__ import annotations

from pathlib import Path

from tools.reliability.secrets import HIDDEN_ATTEMPTS, canary_run, foreign_token_run
from tools.reliability.stand import open_stand


async def test_canary_tokens_never_leak_and_model_input_never_changes_hidden_context(
    tmp_path: Path,
) -> None:
    async with open_stand(tmp_path) as stand:
        report = await canary_run(stand, tmp_path / "journal.db")
        workspace, agent = stand.runtime.workspace_id, stand.runtime.agent_id
    assert report.codes.count("hidden_context_field") == len(HIDDEN_ATTEMPTS)
    assert report.codes[-1] == "ok"  # the refreshed token was read from the file and used
    assert report.owners == {(workspace, agent)}  # whatever the arguments and _meta said
    assert report.injected and all(
        i["workspace_id"] == workspace
        and i["agent_id"] == agent
        and i["bearer_token"].lower() == "[redacted]"
        for i in report.injected
    )
    assert report.leaks == []
    assert report.audit.ok, report.audit.findings


async def test_a_token_for_another_agent_or_workspace_fails_closed_with_nothing_else_tried(
    tmp_path: Path,
) -> None:
    async with open_stand(tmp_path) as stand:
        report = await foreign_token_run(stand, tmp_path / "journal.db")
    for errors in report.answers.values():
        assert [e.get("code") for e in errors] == ["credential_mismatch"] * 3
        assert not any(e.get("retryable") for e in errors)
    assert report.tasks_created == 0
    assert report.leaks == []
    assert report.audit is not None and report.audit.ok, report.audit.findings
    # One upstream attempt per call: no refresh, no fallback credential.
    assert all(
        k.count("upstream_request") == 1 and "token_refreshed" not in k for k in report.kinds
    )
