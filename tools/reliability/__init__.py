"""The reliability and security suite: the bridge as a real subprocess, attacked and crashed.

``fuzz`` (hypothesis tool calls, a malformed-frame corpus), ``faults`` (upstream faults through
the reference runtime's fault injection), ``crash`` (SIGKILL under concurrent load), ``secrets``
(canary tokens, foreign credentials, hidden context) and ``load`` (thousands of calls in flight);
``audit`` is what every journal must prove afterwards, ``wire`` the raw JSON-RPC client, ``stand``
the runtime and bridges a run uses, ``portal`` a trio loop for synchronous hypothesis properties.
The fast seeded portion runs in CI (``tests/test_reliability_*.py``); ``python -m
tools.reliability --long`` runs it all at length.
"""
