"""Benchmarks of the bridge, run together by ``python -m tools.bench [--quick]``.

Every figure is a ratio measured side by side in one run (see PRODUCT's performance targets):
``bench_latency`` (overhead over the stdio and HTTP floors), ``bench_throughput`` (calls in
flight), ``bench_http`` (httpx under trio), ``bench_coldstart``, ``bench_memory``; the journal's
and replay's own benchmarks (``bench_journal``, ``bench_replay``) are run as
``python -m tools.bench.<name> [--quick]`` when present and their output is printed after the
table. ``profile_bridge`` samples the bridge with py-spy; ``floor_server`` is the one-tool floor.
"""
