"""Measurement: the prompt suites, the benchmark client with its steady-state statistics, the protocol's
settings and the output-agreement check."""
