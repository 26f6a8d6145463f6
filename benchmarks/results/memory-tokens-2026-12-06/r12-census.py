"""Round 12's census: both nights of tight-context members through the harness's own ``run_study``, with
every finished trial's record, every launch's flags and the landscape's answer kept, and each skipped
proposal's truth at its own flags. Run from a code tree (``PYTHONPATH=.``):
``python r12-census.py FIRST_SEED COUNT OUT.json``."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import autotune.feasibility
import benchmarks.nights as nights
from benchmarks import family, family_tight
from benchmarks.methods import methods
from benchmarks.search_efficiency import problem_of

FIELDS = ("outcome", "message", "kv_tokens", "weights_bytes", "server_free_bytes", "kv_pool_bytes", "graph_bytes",
          "graph_batch", "avail_after_pools_bytes", "true_tok_s")  # fmt: skip


class Recorder(nights.StepRecorder):
    """The harness's recorder, keeping each trial's record beside its step."""

    kept: list[dict[str, Any]] = []

    def trial_finished(self, record: Any) -> None:
        launched = len(self.launcher.evaluations) > self.seen
        entry = {"trial": record.number, "outcome": record.outcome, "reason": record.reason,
                 "baseline": record.baseline, "confirm_of": record.confirm_of, "flags": dict(record.flags or {}),
                 "launched": launched}  # fmt: skip
        if launched:
            evaluation = self.launcher.evaluations[-1]
            entry["ev"] = {name: getattr(evaluation, name) for name in FIELDS}
        elif record.flags and record.outcome != "ok":
            entry["truth"] = self.launcher.landscape.evaluate(record.flags).outcome
        Recorder.kept.append(entry)
        super().trial_finished(record)


def main() -> None:
    first, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    print("MARKER", autotune.feasibility.__file__, flush=True)
    nights.StepRecorder = Recorder  # type: ignore[misc]
    result = []
    with tempfile.TemporaryDirectory() as configs:
        for index, member in enumerate(family_tight.tight_context_members(count, first)):
            space = family.space_naming_configs(member, Path(configs) / str(index))
            problem = problem_of(member.profile, space, noise_rel=None)
            problem.launch_sd = 0.04
            for method in methods(["autotune", "autotune-model"], per_tier=8):
                Recorder.kept = []
                run = method.run(problem, member.seed, 60)
                deaths = sum(s.launched and s.outcome.startswith("infeasible-memory") for s in run.steps)
                launches = sum(s.launched for s in run.steps)
                result.append({"seed": member.seed, "summary": member.summary, "method": method.name,
                               "records": Recorder.kept, "deaths": deaths, "launches": launches})  # fmt: skip
                print(member.seed, method.name, deaths, launches, flush=True)
    Path(out).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
