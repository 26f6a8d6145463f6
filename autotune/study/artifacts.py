"""Each trial's server log and measurement JSON, kept in Optuna's artifact store beside the study
(optuna-dashboard shows and serves them), and read back for the report.

Reading goes without Optuna: its file-system store keeps an artifact as the file ``<folder>/<id>``
and names it in a system attr of the trial (``artifacts:<id>``, the meta as JSON); a test keeps
this module's reading in step with Optuna's writing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import RootModel, ValidationError

from autotune.measure.client import Measurement
from autotune.study.snapshot import StoredTrial

if TYPE_CHECKING:
    import optuna
    from optuna.artifacts import FileSystemArtifactStore

    from autotune.trial import TrialOutcome

MEASUREMENT_SUFFIX = ".measurement.json"
ARTIFACT_PREFIX = "artifacts:"  # optuna.artifacts._upload.ARTIFACTS_ATTR_PREFIX
MeasurementList = RootModel[list[Measurement]]


def artifact_store(folder: Path) -> FileSystemArtifactStore:
    """The study's file-system artifact store (the folder made if missing)."""
    from optuna.artifacts import FileSystemArtifactStore

    folder.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(folder))


def upload(store: FileSystemArtifactStore, trial: optuna.Trial, outcome: TrialOutcome) -> None:
    from optuna.artifacts import upload_artifact

    if outcome.log_path is not None and outcome.log_path.exists():
        upload_artifact(
            artifact_store=store, file_path=str(outcome.log_path), study_or_trial=trial, mimetype="text/plain"
        )
    if outcome.measurements and outcome.log_path is not None:
        path = outcome.log_path.with_suffix(MEASUREMENT_SUFFIX)
        path.write_text(MeasurementList(outcome.measurements).model_dump_json(indent=2))
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial, mimetype="application/json")


def measurements(trial: StoredTrial, folder: Path | None) -> list[Measurement]:
    """The measurements ``trial`` uploaded to the store in ``folder`` (one per concurrency level); []
    where none is readable."""
    if folder is None:
        return []
    for key, meta in trial.system_attrs.items():
        if not key.startswith(ARTIFACT_PREFIX):
            continue
        found = json.loads(meta)
        if not found["filename"].endswith(MEASUREMENT_SUFFIX):
            continue
        artifact_id = found["artifact_id"]
        if Path(artifact_id).name != artifact_id:  # a file of the store, never a path out of it
            return []
        try:
            return MeasurementList.model_validate_json((folder / artifact_id).read_bytes()).root
        except (OSError, ValidationError):
            return []
    return []
