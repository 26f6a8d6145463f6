"""After a crash or Ctrl-C: orphaned servers killed, stale trials failed, interrupted configs and
unmeasured baselines queued again (each once, across workers)."""

from __future__ import annotations

import socket
from datetime import datetime
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.outcomes import OutcomeKind
from autotune.server import pid_alive, reap_orphans
from autotune.space import SearchSpace, baseline_params
from autotune.study import attrs
from autotune.study.storage import heartbeat_enabled

# A trial names its host and worker right after Optuna hands it out; one still nameless after this
# long was asked for by a tuner that died in between (no host can claim it, so any worker fails it).
UNCLAIMED_GRACE_S = 300.0


def recover(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    servers: Path,
    *,
    unclaimed_grace_s: float = UNCLAIMED_GRACE_S,
) -> tuple[int, int]:
    """Kill orphaned servers, fail trials left RUNNING by a dead tuner on this host (or by a tuner
    that died before it wrote its host into the trial). ``storage`` is the one ``study`` was opened on.

    With heartbeats on, Optuna fails stale trials itself (and retries them once), on any host.
    Returns (servers killed, trials failed).
    """
    killed = len(reap_orphans(servers))
    failed = 0
    if heartbeat_enabled(storage):
        return killed, failed
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = attrs.trial_record(trial)
        if record.launch.host is None and record.launch.worker_pid is None:
            started = trial.datetime_start
            if started is not None and (datetime.now() - started).total_seconds() > unclaimed_grace_s:
                why = "the tuner that asked for it died before starting it"
                attrs.mark_stale(storage, study.study_name, trial, why)
                failed += 1
            continue
        if record.launch.host != host or record.launch.worker_pid is None or pid_alive(record.launch.worker_pid):
            continue
        attrs.mark_stale(storage, study.study_name, trial, "the tuner running it died")
        failed += 1
    return killed, failed


def requeue_interrupted(study: optuna.Study) -> list[int]:
    """Queue again, once, the sampled configurations whose trial was interrupted (Ctrl-C, crash)."""
    trials = study.get_trials(deepcopy=False)
    records = [attrs.trial_record(t) for t in trials]
    retried = {r.proposal.retry_of for r in records}
    queued = []
    for trial, record in zip(trials, records, strict=True):
        if trial.state is not TrialState.FAIL or record.outcome != OutcomeKind.INTERRUPTED.value:
            continue
        if record.number in retried or record.proposal.retry_of is not None or not trial.params:
            continue
        if record.baseline:
            continue  # enqueue_baselines queues it again
        attrs.enqueue_retry(study, trial.params, record.number)
        queued.append(record.number)
    return queued


def enqueue_baselines(study: optuna.Study, space: SearchSpace) -> list[str]:
    """Enqueue each baseline once per study (a resumed study does not measure them again)."""
    present = {
        r.baseline
        for r in map(attrs.trial_record, study.get_trials(deepcopy=False))
        if r.state != "FAIL" or r.outcome != OutcomeKind.INTERRUPTED.value
    }
    queued = []
    for baseline in space.baselines:
        if baseline.name in present:
            continue
        attrs.enqueue_baseline(study, baseline_params(space, baseline), baseline.name)
        queued.append(baseline.name)
    return queued
