"""The canonical Task tool registry: the single source of every surface the bridge exposes.

Each `ToolSpec` is data: the MCP definition (name, title, description, schemas, annotations),
the metadata of contract section 9.1, and the one upstream operation of section 13.3. The MCP
`Tool` objects, the server instructions, the inventory and the docs are all generated from it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from agentteam_task_bridge.journal import TASKS_ROUTE_TEMPLATE

from . import _inputs as inp
from . import _outputs as out
from ._compat import ARGUMENT_ALIASES, TOOL_MIGRATIONS
from ._errors import OperationKind
from ._schema import input_schema, output_schema

if TYPE_CHECKING:
    import mcp_types as types

PermissionClass = Literal["read_only", "agent_mutation", "destructive_mutation"]
BudgetClass = Literal["collection", "detail", "receipt"]

# Result budgets after normalization, in bytes of compact JSON (contract section 8.3).
BUDGET_BYTES: dict[str, int] = {"collection": 48 * 1024, "detail": 24 * 1024, "receipt": 40 * 1024}

# Hidden context every Task request depends on (section 13.1), injected, never model input.
BASE_CONTEXT: tuple[str, ...] = ("workspace_id", "agent_id", "bearer_token")
WORKFLOW_CONTEXT: tuple[str, ...] = ("workflow_run_id", "callback_effect_id")

RECEIPT_RETENTION = "receipts are kept for the life of the workspace"


@dataclass(frozen=True)
class Upstream:
    op: str
    method: Literal["GET", "POST"]
    suffix: str

    def route(self) -> str:
        return TASKS_ROUTE_TEMPLATE + self.suffix


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_type: type[msgspec.Struct]
    data_type: type[msgspec.Struct]
    upstream: Upstream
    permission: PermissionClass
    idempotency: str
    concurrency: str
    budget: BudgetClass
    # The row of the retryability table (bridge/_errors.py) the tool's calls are on.
    operation: OperationKind = "mutation"
    hidden_context: tuple[str, ...] = BASE_CONTEXT
    idempotent_hint: bool = False
    owner: str = "task"
    exposure: str = "default"
    deprecation: str = "active"
    cli_route: str | None = None
    # Behaviour the call flow reads from here instead of testing tool names:
    # `paged`: results are pages the bridge may cut and continue with its own cursor;
    # `receipt_lists_tasks`: the result lists the tasks it made under `tasks`, and when it lists
    # exactly one, that one is the active task the runtime routes to (`_meta.agentteam/task`).
    paged: bool = False
    # `sectioned`: a detail whose description, checkpoints and subtasks the bridge continues
    # with its own cursor when they are cut or bounded (`_detail`).
    sectioned: bool = False
    receipt_lists_tasks: bool = False

    @property
    def read_only(self) -> bool:
        return self.permission == "read_only"

    @property
    def destructive(self) -> bool:
        return self.permission == "destructive_mutation"

    @property
    def mutation(self) -> bool:
        return not self.read_only

    def operation_kind(self, keyed: bool) -> OperationKind:
        """The table row of one call: a create is a keyed create only when it carries a key."""
        return "mutation" if self.operation == "keyed_create" and not keyed else self.operation

    @property
    def agent_tool_id(self) -> str:
        domain, _, verb = self.name.partition("_")
        return f"{domain}.{verb}"

    @property
    def budget_bytes(self) -> int:
        return BUDGET_BYTES[self.budget]

    @functools.cached_property
    def tool(self) -> types.Tool:
        """The MCP definition, built at its first use (the server builds them all at import:
        tools/list never builds a schema per call). Not at the registry's import: the MCP
        types and the schemas cost about 0.2 s that `agentteam-replay`, which reads the
        registry's data only, does not need."""
        import mcp_types as types

        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=input_schema(self.input_type),
            output_schema=output_schema(_pascal(self.name) + "Result", self.data_type),
            annotations=types.ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.idempotent_hint,
                open_world_hint=False,
            ),
        )


def _pascal(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


REGISTRY: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="task_list",
        title="List or search tasks",
        description=(
            "Browse one board's tasks, or search them when `query` is non-empty (relevance over "
            "title and description, also for finding duplicates before creating). Use task_get "
            "for one task's detail. Read-only; pages with `cursor`/`next_cursor`."
        ),
        input_type=inp.TaskListInput,
        data_type=out.TaskListData,
        upstream=Upstream("list", "GET", ""),
        permission="read_only",
        idempotency="natural: reads change nothing",
        concurrency="none: reads",
        budget="collection",
        operation="read",
        idempotent_hint=True,
        paged=True,
    ),
    ToolSpec(
        name="task_get",
        title="Get a task",
        description=(
            "Read one task's compact detail by board and number: profile, latest checkpoints, "
            "subtask summary, attachment metadata and its `updated_at` revision. Use task_list "
            "to find a number. Read-only."
        ),
        input_type=inp.TaskGetInput,
        data_type=out.TaskGetData,
        sectioned=True,
        upstream=Upstream("get", "POST", "/get"),
        permission="read_only",
        idempotency="natural: reads change nothing",
        concurrency="none: reads",
        budget="detail",
        operation="read",
        idempotent_hint=True,
    ),
    ToolSpec(
        name="task_create",
        title="Create tasks",
        description=(
            "Create 1-50 tasks on a board (`channel`, optional `parent` number) or under an exact "
            "task scope (`parent_task_scope`). Several tasks are title-only; one may be rich. "
            "Search with task_list first to avoid duplicates. Each call creates new tasks unless "
            "a workflow callback `idempotency_key` is replayed; " + RECEIPT_RETENTION + "."
        ),
        input_type=inp.TaskCreateInput,
        data_type=out.TaskCreateData,
        upstream=Upstream("create", "POST", ""),
        permission="agent_mutation",
        idempotency="key: idempotency_key inside an active workflow callback replays the receipt",
        concurrency="none: creation allocates new numbers",
        budget="receipt",
        operation="keyed_create",
        hidden_context=BASE_CONTEXT + WORKFLOW_CONTEXT,
        receipt_lists_tasks=True,
    ),
    ToolSpec(
        name="task_update",
        title="Update a task",
        description=(
            "Change a task's profile or lifecycle status with a `patch` (omitted fields stay, "
            "null clears). Pass the `expected_updated_at` you read to refuse stale overwrites. "
            "Use task_set_claim to take ownership and task_checkpoint to record progress."
        ),
        input_type=inp.TaskUpdateInput,
        data_type=out.TaskUpdateData,
        upstream=Upstream("update", "POST", "/update"),
        permission="agent_mutation",
        idempotency="natural: the same patch twice changes nothing more",
        concurrency="optimistic: expected_updated_at",
        budget="receipt",
        idempotent_hint=True,
    ),
    ToolSpec(
        name="task_set_claim",
        title="Claim or release tasks",
        description=(
            "Set whether you hold up to 50 tasks on a board: `claimed: true` claims them for you, "
            "false releases yours. A desired state, never a toggle: repeating it is harmless. "
            "Reports tasks held by others as per-task failures."
        ),
        input_type=inp.TaskSetClaimInput,
        data_type=out.TaskSetClaimData,
        upstream=Upstream("set-claim", "POST", "/set-claim"),
        permission="agent_mutation",
        idempotency="desired_state: claimed is the target state",
        concurrency="first claim wins; per-task failures",
        budget="receipt",
        operation="setter",
        idempotent_hint=True,
    ),
    ToolSpec(
        name="task_checkpoint",
        title="Record a checkpoint",
        description=(
            "Append one durable, high-signal checkpoint (decision, result, state reached) to a "
            "task. Append-only: every call adds one. Routine progress narrative belongs in task "
            "scope messages, field changes in task_update."
        ),
        input_type=inp.TaskCheckpointInput,
        data_type=out.TaskCheckpointData,
        upstream=Upstream("checkpoint", "POST", "/add-checkpoint"),
        permission="agent_mutation",
        idempotency="none: each call appends a checkpoint",
        concurrency="append-only",
        budget="receipt",
    ),
    ToolSpec(
        name="task_delete",
        title="Delete a task",
        description=(
            "Permanently delete a task you created; it cannot be recovered and its number is not "
            "reused. A task with subtasks needs `subtask_mode`: `promote` keeps them, `delete` "
            "removes them too. Only on explicit human intent."
        ),
        input_type=inp.TaskDeleteInput,
        data_type=out.TaskDeleteData,
        upstream=Upstream("delete", "POST", "/delete"),
        permission="destructive_mutation",
        idempotency="natural: a deleted task stays deleted",
        concurrency="atomic transaction",
        budget="receipt",
        idempotent_hint=True,
    ),
)

TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in REGISTRY}
# The migration table of old names (section 11) belongs to the registry too; it lives in _compat.
MIGRATION_TABLE = {"tool_names": TOOL_MIGRATIONS, "argument_spellings": ARGUMENT_ALIASES}


def mcp_tools() -> list[types.Tool]:
    """Every tool's MCP definition, in the registry's order (what tools/list serves)."""
    return [spec.tool for spec in REGISTRY]


INSTRUCTIONS = (
    "AgentTeam Task tools for this workspace: " + ", ".join(TOOLS) + ". "
    "Find work with task_list (a non-empty query searches), read it with task_get, and change it "
    "with the mutation tools. Workspace, agent and credentials are supplied by the bridge; never "
    "pass them as arguments. Errors are structured: follow `suggested_action` when present."
)


def describe(spec: ToolSpec) -> dict[str, Any]:
    """The section 9.1 metadata of one tool, as data (inventory, docs, lint)."""
    return {
        "name": spec.name,
        "owner": spec.owner,
        "permission_class": spec.permission,
        "read_only": spec.read_only,
        "destructive": spec.destructive,
        "idempotency": spec.idempotency,
        "concurrency": spec.concurrency,
        "hidden_context": list(spec.hidden_context),
        "budget_class": spec.budget,
        "budget_bytes": spec.budget_bytes,
        "mcp_name": spec.name,
        "agent_tool_id": spec.agent_tool_id,
        "cli_route": spec.cli_route,
        "exposure": spec.exposure,
        "deprecation": spec.deprecation,
        "upstream": {"method": spec.upstream.method, "route": spec.upstream.route()},
    }
