"""Model-facing results: each tool's `data` shape and the shared `{data, meta, error}` envelope.

Upstream answers are converted into these types (through their camelCase twins, bridge/_dto.py),
which both validates the upstream body and guarantees that `structuredContent` matches the
`outputSchema` generated from the same types.

Every integer is bounded as the inputs bound theirs: a task number is one the model can send back
(`TaskNumber`, 1 to 2**53, `_inputs.Number`'s range), a count or size is 0 to 2**53 (`Count`), so
a number past what a JSON client holds exactly (a JavaScript client reads 1e400 as Infinity and
its validator then refuses the whole answer) or a task #0 an upstream answers is
`upstream_malformed`, never a result.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Struct, UnsetType, field
from msgspec import Meta as Bounds

TaskNumber = Annotated[int, Bounds(ge=1, le=2**53)]
Count = Annotated[int, Bounds(ge=0, le=2**53)]
# A revision (RFC 3339); bounded, as it is part of a bridge cursor's key under `sort: updated`.
Stamp = Annotated[str, Bounds(min_length=1, max_length=64)]


class _Out(Struct, frozen=True):
    pass


class ChecklistItem(_Out, frozen=True):
    text: str
    done: bool


class Attachment(_Out, frozen=True):
    name: str
    media_type: str
    size_bytes: Count


class Checkpoint(_Out, frozen=True):
    id: Count
    summary: str
    author: str | None
    created_at: str


class SubtaskSummary(_Out, frozen=True):
    number: TaskNumber
    title: str
    status: str


class CheckpointSection(_Out, frozen=True):
    items: list[Checkpoint]
    total: Count


class SubtaskSection(_Out, frozen=True):
    items: list[SubtaskSummary]
    total: Count


class TaskSummary(_Out, frozen=True):
    channel: str
    number: TaskNumber
    scope_id: str
    title: str
    status: str
    priority: str | None
    assignee: str | None
    labels: list[str]
    parent: TaskNumber | None
    subtask_count: Count
    updated_at: Stamp


class TaskDetail(TaskSummary, frozen=True):
    description: str | None
    checklist: list[ChecklistItem]
    urls: list[str]
    attachments: list[Attachment]
    blocker: str | None
    thread: str | None
    creator: str | None
    created_at: str
    checkpoints: CheckpointSection
    subtasks: SubtaskSection
    # Set by task_update's patch; an upstream that predates them answers without them.
    messages: list[str] = field(default_factory=list)
    workspaces: list[str] = field(default_factory=list)


class ClaimFailure(_Out, frozen=True):
    number: TaskNumber
    code: str
    message: str
    holder: str | UnsetType | None = UNSET


class TaskListData(_Out, frozen=True):
    channel: str
    items: list[TaskSummary]


class TaskGetData(_Out, frozen=True):
    task: TaskDetail


class TaskCreateData(_Out, frozen=True):
    channel: str
    parent: TaskNumber | None
    tasks: list[TaskSummary]
    reused: bool


class TaskUpdateData(_Out, frozen=True):
    task: TaskSummary
    changed: list[str]


class TaskCheckpointData(_Out, frozen=True):
    checkpoint: Checkpoint
    task: TaskSummary


class TaskSetClaimData(_Out, frozen=True):
    channel: str
    claimed: bool
    count: Count
    changed: list[TaskNumber]
    unchanged: list[TaskNumber]
    failures: list[ClaimFailure]
    tasks: list[TaskSummary]


class TaskDeleteData(_Out, frozen=True):
    channel: str
    deleted: list[TaskNumber]
    promoted: list[TaskNumber]


class SuggestedAction(_Out, frozen=True):
    tool: str
    arguments: dict[str, Any]


class ErrorBody(_Out, frozen=True):
    code: str
    message: str
    retryable: bool
    field_errors: dict[str, str] | UnsetType = UNSET
    suggested_action: SuggestedAction | UnsetType = UNSET
    candidates: list[dict[str, Any]] | UnsetType = UNSET
    retry_after_seconds: Count | UnsetType = UNSET


class JournalNote(_Out, frozen=True):
    """`meta.journal`: the journal could not record this call's outcome (the answer is still
    the true outcome). `in_doubt`: a change was sent; the journal holds it as in doubt."""

    recorded: bool
    reason: str
    in_doubt: bool | UnsetType = UNSET


class Continued(_Out, frozen=True):
    """`meta.continued`: this task_get answer continues a cut one (`cursor`)."""

    # Where `task.description` starts in the whole description, in characters; null once the
    # description was given whole (then `description` is null too).
    description_from: Count | None


class Meta(_Out, frozen=True):
    next_cursor: str | UnsetType = UNSET
    truncated: bool | UnsetType = UNSET
    # JSON paths cut to fit the budget (`[*]`: one or more elements there); every required
    # property stays, only strings and lists get shorter.
    truncated_fields: list[str] | UnsetType = UNSET
    # How to get the cut parts, or that no tool can.
    truncation_note: str | UnsetType = UNSET
    continuation: SuggestedAction | UnsetType = UNSET
    continued: Continued | UnsetType = UNSET
    deprecation: dict[str, Any] | UnsetType = UNSET
    journal: JournalNote | UnsetType = UNSET
