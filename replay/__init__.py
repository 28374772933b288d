"""Offline readers of journals: verify, debug and audit without the bridge running."""

__all__: list[str] = []
