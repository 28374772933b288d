"""Contract lint: the twelve checks of contract section 12 (and a few more) over the registry.

Run `python -m tools.contract_lint`; it exits 1 and names the rule, tool and field of every
violation. Each rule is a function of a `Surface` (the surfaces built from the registry), so a
test can feed it a deliberately broken surface and see that rule fail.

The surfaces are built in ``_surface``; the rules of section 12 are in ``_section12``, the further
ones in ``_forms`` and ``_portability`` (OpenAI strict mode, Gemini, Anthropic); the worst-case
results the budget rule measures in ``_worst_case``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator

from agentteam_task_bridge.bridge import REGISTRY

from ._forms import rule_documented_defaults, rule_field_forms, rule_flat_roots, rule_profile_fields
from ._portability import STRICT_MODE_LIMITS, openai_strict, rule_portability, strict_blockers
from ._section12 import (
    definition_bytes,
    rule_annotations,
    rule_class_fits_operation,
    rule_definition_budgets,
    rule_migrations,
    rule_mutation_semantics,
    rule_naming,
    rule_no_deprecated_alias,
    rule_no_hidden_context,
    rule_owner_and_exposure,
    rule_pagination,
    rule_parameters_agree,
    rule_result_budgets,
    rule_snake_case_fields,
    rule_visible_references,
)
from ._surface import Surface, ToolSurface, Violation, surface_from_registry, walk_properties
from ._worst_case import worst_case

__all__ = [
    "RULES",
    "STRICT_MODE_LIMITS",
    "Surface",
    "ToolSurface",
    "Violation",
    "definition_bytes",
    "lint",
    "main",
    "openai_strict",
    "strict_blockers",
    "surface_from_registry",
    "walk_properties",
    "worst_case",
]

RULES: tuple[Callable[[Surface], Iterator[Violation]], ...] = (
    rule_naming,
    rule_snake_case_fields,
    rule_no_deprecated_alias,
    rule_parameters_agree,
    rule_annotations,
    rule_class_fits_operation,
    rule_no_hidden_context,
    rule_pagination,
    rule_mutation_semantics,
    rule_owner_and_exposure,
    rule_visible_references,
    rule_result_budgets,
    rule_definition_budgets,
    rule_migrations,
    rule_flat_roots,
    rule_field_forms,
    rule_documented_defaults,
    rule_profile_fields,
    rule_portability,
)


def lint(surface: Surface) -> list[Violation]:
    return [v for rule in RULES for v in rule(surface)]


def main(argv: list[str] | None = None) -> int:
    violations = lint(surface_from_registry())
    as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    if as_json:
        print(json.dumps([v.__dict__ for v in violations], indent=2))
    else:
        for v in violations:
            print(v)
        print(
            f"contract lint: {len(RULES)} rules, {len(REGISTRY)} tools, "
            f"{len(violations)} violation(s)"
        )
    return 1 if violations else 0
