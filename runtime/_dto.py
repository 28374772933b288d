"""Request DTOs of the seven Agent Runtime routes: camelCase on the wire, strict types."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

Status = Literal["todo", "in_progress", "in_review", "done", "canceled"]
Priority = Literal["low", "normal", "high", "urgent"]
StatusView = Literal["open", "todo", "in_progress", "in_review", "done", "canceled", "all"]
Sort = Literal["number", "updated", "priority", "relevance"]
SubtaskMode = Literal["promote", "delete"]

STATUSES: tuple[str, ...] = ("todo", "in_progress", "in_review", "done", "canceled")
OPEN_STATUSES: tuple[str, ...] = ("todo", "in_progress", "in_review")
PRIORITY_RANK: dict[str | None, int] = {None: 0, "low": 1, "normal": 2, "high": 3, "urgent": 4}

MAX_BATCH = 50
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
MAX_KEY_BYTES = 128

Slug = Annotated[str, Meta(min_length=1, max_length=64)]
Number = Annotated[int, Meta(ge=-(2**62), le=2**62)]
Title = Annotated[str, Meta(min_length=1, max_length=200)]
Description = Annotated[str, Meta(max_length=10_000)]
Handle = Annotated[str, Meta(pattern=r"^@[a-z0-9][a-z0-9_.-]{0,63}$")]
Label = Annotated[str, Meta(min_length=1, max_length=50)]
Url = Annotated[str, Meta(pattern=r"^https?://\S{1,2040}$")]
Text = Annotated[str, Meta(min_length=1, max_length=500)]
Summary = Annotated[str, Meta(min_length=1, max_length=4000)]
Ident = Annotated[str, Meta(min_length=1, max_length=128)]
# `#channel` or `#channel:threadid`: a thread a task comes from (create's `target`, the patch's
# `thread`); a message reference always names the message.
Thread = Annotated[
    str, Meta(max_length=200, pattern=r"^#[a-z0-9][a-z0-9_-]*(:[A-Za-z0-9_.-]{1,64})?$")
]
MessageRef = Annotated[
    str, Meta(max_length=200, pattern=r"^#[a-z0-9][a-z0-9_-]*:[A-Za-z0-9_.-]{1,64}$")
]
WorkLocation = Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^\S(.*\S)?$")]
MAX_MESSAGES = 20
MAX_WORKSPACES = 10


class _Dto(Struct, rename="camel", forbid_unknown_fields=True, frozen=True):
    pass


class ChecklistItem(_Dto, frozen=True):
    text: Text
    done: bool = False


class Attachment(_Dto, frozen=True):
    name: Annotated[str, Meta(min_length=1, max_length=200)]
    media_type: Annotated[str, Meta(min_length=1, max_length=100)]
    size_bytes: Annotated[int, Meta(ge=0)]
    url: Url | None = None


class TaskScope(_Dto, frozen=True):
    kind: Annotated[str, Meta(min_length=1, max_length=32)]
    scope_id: Ident


class NewTask(_Dto, frozen=True):
    title: Title
    description: Description | UnsetType = UNSET
    assignee: Handle | UnsetType = UNSET
    labels: Annotated[list[Label], Meta(max_length=20)] | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET
    status: Status | UnsetType = UNSET
    checklist: Annotated[list[ChecklistItem], Meta(max_length=50)] | UnsetType = UNSET
    urls: Annotated[list[Url], Meta(max_length=20)] | UnsetType = UNSET
    blocker: Text | UnsetType = UNSET


# A new task's defaults a caller can spell out; each means the same as the field left out, so
# the create payload is canonicalised without them (contract 13.2's "canonical create payload").
NEW_TASK_DEFAULTS: dict[str, object] = {
    "description": "",
    "labels": [],
    "status": "todo",
    "checklist": [],
    "urls": [],
}


class CreateRequest(_Dto, frozen=True):
    tasks: Annotated[list[NewTask], Meta(max_length=MAX_BATCH)]
    channel: Slug | UnsetType = UNSET
    parent: Number | UnsetType = UNSET
    parent_task_scope: TaskScope | UnsetType = UNSET
    target: Annotated[str, Meta(min_length=1, max_length=200)] | UnsetType = UNSET
    idempotency_key: Annotated[str, Meta(max_length=1024)] | UnsetType = UNSET
    workflow_run_id: Ident | UnsetType = UNSET
    callback_effect_id: Ident | UnsetType = UNSET


class Locator(_Dto, frozen=True):
    channel: Slug
    number: Number


class GetRequest(Locator, frozen=True):
    """`get`: the detail's sections continue after what was read (docs/runtime.md)."""

    checkpoints_before: Annotated[int, Meta(ge=1, le=2**62)] | UnsetType = UNSET
    subtasks_after: Annotated[int, Meta(ge=0, le=2**62)] | UnsetType = UNSET


class Patch(_Dto, frozen=True):
    title: Title | UnsetType = UNSET
    description: Description | UnsetType | None = UNSET
    status: Status | UnsetType = UNSET
    priority: Priority | UnsetType | None = UNSET
    labels: Annotated[list[Label], Meta(max_length=20)] | UnsetType = UNSET
    assignee: Handle | UnsetType | None = UNSET
    checklist: Annotated[list[ChecklistItem], Meta(max_length=50)] | UnsetType = UNSET
    urls: Annotated[list[Url], Meta(max_length=20)] | UnsetType = UNSET
    attachments: Annotated[list[Attachment], Meta(max_length=20)] | UnsetType = UNSET
    blocker: Text | UnsetType | None = UNSET
    parent: Number | UnsetType | None = UNSET
    thread: Thread | UnsetType | None = UNSET
    messages: Annotated[list[MessageRef], Meta(max_length=MAX_MESSAGES)] | UnsetType = UNSET
    workspaces: Annotated[list[WorkLocation], Meta(max_length=MAX_WORKSPACES)] | UnsetType = UNSET


PATCH_FIELDS: tuple[str, ...] = Patch.__struct_fields__


class UpdateRequest(_Dto, frozen=True):
    channel: Slug
    number: Number
    patch: Patch
    expected_updated_at: Annotated[str, Meta(max_length=64)] | UnsetType = UNSET


class CheckpointRequest(_Dto, frozen=True):
    channel: Slug
    number: Number
    summary: Annotated[str, Meta(max_length=4000)]


class SetClaimRequest(_Dto, frozen=True):
    channel: Slug
    numbers: Annotated[list[Number], Meta(max_length=MAX_BATCH)]
    claimed: bool


class DeleteRequest(_Dto, frozen=True):
    channel: Slug
    number: Number
    subtask_mode: SubtaskMode | UnsetType = UNSET


class ListFilters(_Dto, frozen=True):
    assignee: Handle | UnsetType = UNSET
    label: Label | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET


class ListQuery(Struct, frozen=True):
    """The parsed query string of the list route (not a JSON body)."""

    channel: str
    query: str
    status: str
    include_subtasks: bool
    limit: int
    cursor: str | None
    sort: str
    filters: ListFilters


# --- admin DTOs (the test and seeding surface, outside the seven routes) ---------------------


class MintToken(_Dto, frozen=True):
    workspace_id: Ident
    agent_id: Ident
    ttl_seconds: Annotated[float, Meta(gt=0)] | UnsetType = UNSET


class NewWorkspace(_Dto, frozen=True):
    id: Ident
    name: Ident


class NewMember(_Dto, frozen=True):
    workspace_id: Ident
    id: Ident
    handle: Handle
    kind: Literal["agent", "human"]
    display_name: Ident | UnsetType = UNSET


class NewBoard(_Dto, frozen=True):
    workspace_id: Ident
    slug: Slug
    member_ids: list[Ident]
    name: Ident | UnsetType = UNSET


class Callback(_Dto, frozen=True):
    workspace_id: Ident
    run_id: Ident
    callback_effect_id: Ident
    responder_agent_id: Ident | UnsetType = UNSET


FaultKind = Literal[
    "latency",
    "status",
    "drop",
    "drop_after_commit",
    "malformed",
    "unauthorized",
    "deprecated",
    "echo_credentials",
]


class FaultSpec(_Dto, frozen=True):
    kind: FaultKind
    op: str = "*"
    times: Annotated[int, Meta(ge=1)] = 1
    delay_ms: Annotated[int, Meta(ge=0, le=600_000)] = 0
    status: Annotated[int, Meta(ge=400, le=599)] = 503
    retry_after_seconds: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
