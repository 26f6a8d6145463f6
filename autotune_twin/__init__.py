"""The autotune SGLang twin: a simulation of ``python -m sglang.launch_server`` for machines without GPUs.

Run as ``python -m autotune_twin <SGLang flags> [--twin-* options]``. It accepts SGLang 0.5.23's
flags, serves SGLang's endpoints, prints SGLang's log lines and memory failures, and produces
tokens at the rate a performance model of the profile's GPUs and model predicts. It is labelled a
simulation everywhere it shows. The tuner's core never imports it; it is reached only as a
launcher and a GPU inventory command.
"""

from __future__ import annotations
