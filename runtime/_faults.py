"""Fault injection for tests: armed over the admin API, consumed by matching requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._dto import FaultSpec

OPS: tuple[str, ...] = ("list", "get", "create", "update", "checkpoint", "set-claim", "delete")


@dataclass
class Faults:
    """A queue of armed faults; each fires for at most `times` matching requests."""

    armed: list[FaultSpec] = field(default_factory=list)
    _left: list[int] = field(default_factory=list)
    fired: int = 0

    def arm(self, spec: FaultSpec) -> None:
        if spec.op != "*" and spec.op not in OPS:
            raise ValueError(f"unknown op {spec.op!r}; expected one of {', '.join(OPS)} or *")
        self.armed.append(spec)
        self._left.append(spec.times)

    def clear(self) -> None:
        self.armed.clear()
        self._left.clear()

    def take(self, op: str) -> FaultSpec | None:
        """The first armed fault matching `op`, consuming one of its uses."""
        for i, spec in enumerate(self.armed):
            if spec.op in ("*", op):
                self._left[i] -= 1
                if self._left[i] == 0:
                    del self.armed[i], self._left[i]
                self.fired += 1
                return spec
        return None

    def pending(self) -> list[dict[str, object]]:
        return [
            {"kind": s.kind, "op": s.op, "left": n}
            for s, n in zip(self.armed, self._left, strict=True)
        ]
