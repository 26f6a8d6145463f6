"""The vLLM personality: ``python -m autotune_twin --personality vllm serve MODEL [vLLM 0.34 flags]``.

The releases it speaks and their flag tables (``releases``), the parser (``flags``), its
configuration rules and memory sizing (``config``), admission and counters (``scheduler``), launch
sequence and log lines (``app``) and endpoints (``server``), on the twin's shared core.
"""

from __future__ import annotations
