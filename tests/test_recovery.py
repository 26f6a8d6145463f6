"""Recovery after a tuner died: trials it left RUNNING are failed (and measured again), others kept."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.study import attrs
from autotune.study.recovery import recover, requeue_interrupted


def _study(tmp_path: Path) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    return optuna.create_study(storage=storage, study_name="s"), storage


def test_a_trial_its_tuner_never_claimed_is_failed_after_the_grace(tmp_path: Path) -> None:
    study, storage = _study(tmp_path)
    trial = study.ask()
    trial.suggest_int("speculative-num-steps", 1, 6)  # killed after sampling, before naming its host
    servers = tmp_path / "servers"
    servers.mkdir()

    assert recover(study, storage, servers) == (0, 0)  # within the grace: perhaps another worker's fresh trial
    assert study.trials[0].state is TrialState.RUNNING

    assert recover(study, storage, servers, unclaimed_grace_s=0.0) == (0, 1)
    failed = study.trials[0]
    assert failed.state is TrialState.FAIL
    assert attrs.trial_record(failed).outcome == "interrupted"
    assert requeue_interrupted(study) == [0]  # its configuration is measured again


def test_a_trial_claimed_by_a_live_tuner_elsewhere_is_left_running(tmp_path: Path) -> None:
    study, storage = _study(tmp_path)
    trial = study.ask()
    attrs.TrialStory.begin(trial, host="another-host", pid=1, gpus=[])
    servers = tmp_path / "servers"
    servers.mkdir()

    assert recover(study, storage, servers, unclaimed_grace_s=0.0) == (0, 0)
    assert study.trials[0].state is TrialState.RUNNING
