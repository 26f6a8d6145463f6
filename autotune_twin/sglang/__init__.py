"""The SGLang personality: ``python -m autotune_twin [--twin-* options] <SGLang 0.5.23 flags>``.

SGLang's flag table and parser (``flags``), its launch sequence and log lines (``app``) and its
endpoints (``server``), on the twin's shared core (``autotune_twin.cli``, ``autotune_twin.http``,
``autotune_twin.scheduler``, the launch rules and the physics).
"""

from __future__ import annotations
