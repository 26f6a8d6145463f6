"""Shared fixtures: paths of the shipped files, the twin's GPUs and a clean studies folder per test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

# The hooks that provide the selected tests' tiers (tests/tiers.py).
from tests.tiers import (  # noqa: F401
    executable_of,
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
    pytest_xdist_node_collection_finished,
)

if TYPE_CHECKING:
    from autotune.gpu import GpuInventory
    from autotune.study import StudyRunner

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "search_spaces"
TWIN_SPACE = SPACES / "qwen3.6-27b-2xa6000-twin.yaml"
REAL_SPACE = SPACES / "qwen3.6-27b-2xa6000.yaml"


def load_benchmark(name: str = "search_efficiency") -> ModuleType:
    """benchmarks/<name>.py executed afresh as the top-level module ``name`` (a script that is not
    imported as ``benchmarks.<name>``)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def twin_gpus(profile: str = "qwen3.6-27b-2xa6000") -> GpuInventory:
    """The GPUs a twin profile simulates, as autotune reads them from the twin's inventory command
    (for :mod:`autotune.testing`'s runner; no process is started)."""
    from autotune.gpu import GpuInventory
    from autotune_twin.gpu_state import inventory
    from passmodel.profile import load_profile

    return GpuInventory.model_validate(inventory(load_profile(profile)))


def idle_gpus(count: int) -> GpuInventory:
    """``count`` idle 48 GiB GPUs (an inventory for :mod:`autotune.testing`'s runner)."""
    from autotune.gpu import GpuInfo, GpuInventory

    return GpuInventory(
        driver_version="test",
        simulated=True,
        gpus=[GpuInfo(index=i, name="48 GiB GPU", uuid=f"GPU-{i}", memory_total_bytes=48 << 30, memory_used_bytes=0,
                      memory_free_bytes=48 << 30, bandwidth_bytes_per_s=768e9) for i in range(count)],
    )  # fmt: skip


def autotune_cmd(*args: str) -> list[str]:
    """Run the installed console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "autotune"
    return [str(script), *args]


def run_queued(runner: StudyRunner, trials: int = 1) -> None:
    """Run the next ``trials`` trials of a runner's study (queued ones first), launched or not:
    ``run(trials=N)`` counts launches only."""
    finished = sum(1 for t in runner.study.get_trials(deepcopy=False) if t.state.is_finished())
    runner.run(trials=None, timeout_s=None, total_trials=finished + trials)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rich output is asserted as plain text.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    os.environ.pop("FORCE_COLOR", None)


# ---------------------------------------------------------------- a real llama-server's tests


@pytest.fixture(scope="module")
def server_binary() -> str:
    return executable_of("llama-server")


CLOSE_DRAFT = ("--divergence", "0.005", "--shared-type", "q4_0")


@pytest.fixture(scope="module")
def models(server_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target and draft models: made by scripts/make-test-models.py (or AUTOTUNE_LLAMA_MODELS); per
    module, so a module's tests share them (and a worker under xdist)."""
    given = os.environ.get("AUTOTUNE_LLAMA_MODELS")
    if given and (Path(given) / "target.gguf").exists() and (Path(given) / "draft.gguf").exists():
        return Path(given)
    folder = tmp_path_factory.mktemp("models")
    # A draft closer to its target than the script's default: its longest drafts run about 1.6x the
    # plain server's rate instead of 1.3x, a margin a loaded CI host does not turn around (at 1.3x one
    # CI run measured the plain server fastest, in search and race).
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-test-models.py"), str(folder), *CLOSE_DRAFT],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return folder
