"""Each trial's server log and measurement JSON, kept in Optuna's artifact store beside the study
(optuna-dashboard shows and serves them), and read back for the report."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta, upload_artifact
from pydantic import RootModel, ValidationError

from autotune.measure import Measurement
from autotune.trial import TrialOutcome

MEASUREMENT_SUFFIX = ".measurement.json"
MeasurementList = RootModel[list[Measurement]]


def artifact_store(folder: Path | None, *, create: bool = False) -> FileSystemArtifactStore | None:
    """The study's file-system artifact store; None where there is none (and ``create`` is off)."""
    if folder is None:
        return None
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    elif not folder.is_dir():
        return None
    return FileSystemArtifactStore(str(folder))


def upload(store: FileSystemArtifactStore, trial: optuna.Trial, outcome: TrialOutcome) -> None:
    if outcome.log_path is not None and outcome.log_path.exists():
        upload_artifact(
            artifact_store=store, file_path=str(outcome.log_path), study_or_trial=trial, mimetype="text/plain"
        )
    if outcome.measurements and outcome.log_path is not None:
        path = outcome.log_path.with_suffix(MEASUREMENT_SUFFIX)
        path.write_text(MeasurementList(outcome.measurements).model_dump_json(indent=2))
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial, mimetype="application/json")


def measurements(study: optuna.Study, number: int, store: FileSystemArtifactStore | None) -> list[Measurement]:
    """The measurements trial ``number`` uploaded (one per concurrency level); [] where none is readable."""
    if store is None:
        return []
    trial = study.get_trials(deepcopy=False)[number]
    for meta in get_all_artifact_meta(trial, storage=study._storage):
        if not meta.filename.endswith(MEASUREMENT_SUFFIX):
            continue
        try:
            with store.open_reader(meta.artifact_id) as reader:
                return MeasurementList.model_validate_json(reader.read()).root
        except (OSError, ValidationError, optuna.artifacts.exceptions.ArtifactNotFound):
            return []
    return []
