"""The autotune SGLang twin: a simulation of ``python -m sglang.launch_server`` for machines without GPUs.

Run as ``python -m autotune_twin <SGLang flags> [--twin-* options]``. It accepts SGLang 0.5.23's
flags, serves SGLang's endpoints, prints SGLang's log lines and memory failures, and produces
tokens at the rate a performance model of the profile's GPUs and model predicts. It is labelled a
simulation everywhere it shows. ``--personality vllm serve MODEL`` makes it ``vllm serve`` 0.34 (or
0.33) instead. The product never imports it, nor it the product: it is reached only as a launcher and a
GPU inventory command.

A shared core (profile, physics, launch rules, scheduler loop, HTTP core ``web``, command line
``cli``) and two personalities on it: ``sglang/`` and ``vllm/``, each holding only what its engine
does differently (flag table, parser, admission and counters, log lines, endpoints).
"""

from __future__ import annotations
