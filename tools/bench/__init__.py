"""Benchmarks of the bridge, run together by ``python -m tools.bench [--quick]``.

Every figure is a ratio measured side by side in one run (see PRODUCT's performance targets):
``bench_latency`` (overhead over the stdio and HTTP floors), ``bench_throughput`` (calls in
flight), ``bench_http`` (httpx under trio), ``bench_coldstart``, ``bench_memory``,
``bench_growth`` (a 1M-event journal against an empty one; every replay command at N and 4N
events), then ``targets`` (issue 19's ratios with PASS/MISS); the journal's
and replay's own benchmarks (``bench_journal``, ``bench_replay``) are run as
``python -m tools.bench.<name> [--quick]`` when present and their output is printed after the
table. ``profile_bridge`` samples the bridge with py-spy; ``floor_server`` is the one-tool floor;
``peer_server`` is the FastMCP peer (the ``[bench]`` extra); ``instructions`` is the CI guard
counting the bridge's instructions per call with callgrind.
"""
