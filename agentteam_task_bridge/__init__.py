"""agentteam-task-bridge: the one import package the wheel installs.

    agentteam_task_bridge.bridge   the trio stdio MCP server (the seven Task tools)
    agentteam_task_bridge.journal  the append-only, hash-chained SQLite journal
    agentteam_task_bridge.replay   the offline auditor (`agentteam-replay`)
    agentteam_task_bridge.runtime  the reference Agent Runtime API
    agentteam_task_bridge.cli      the `agentteam-bridge` command

In the repository the first four are the top-level folders of those names, reached from here by
symbolic links; the build follows the links, so site-packages holds this package alone and a
PyPI ``journal``, ``replay`` or ``runtime`` installs beside it without either replacing the
other. Everything imports through this name (``from agentteam_task_bridge.journal import X``):
a bare ``import journal`` from the repository's root would load a second copy of every module,
with classes that ``except`` clauses of the first do not catch (``tools.import_contract``
refuses it). Importing this package imports nothing else.
"""
