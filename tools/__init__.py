"""Repository tools: contract lint, generated inventory, benchmarks, fuzzers."""
