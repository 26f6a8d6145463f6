"""``autotune report`` and the new parts of ``autotune show``, checked against the study's own database."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import optuna
import pytest
from PIL import Image

from autotune.profile import load_profile
from tests.browser import chromium, screenshot, wait_until
from tests.conftest import TWIN_SPACE, autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]

STUDY = "qwen3.6-27b-2xa6000-twin"
FIGURES = {
    "verdict.png",
    "history.png",
    "importance.png",
    "speed-vs-mem-fraction.png",
    "speed-vs-draft-depth.png",
    "accept-by-category.png",
    "feasibility.png",
    "break-even.png",
    "predicted.png",  # the default search (model-guided) keeps its predictions
}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(autotune_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"autotune {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("report")
    run("study", str(TWIN_SPACE), "--trials", "5", "--seed", "3", "--confirm-launches", "1", cwd=cwd)
    return cwd


@pytest.fixture(scope="module")
def folder(study_dir: Path) -> Path:
    proc = run("report", STUDY, cwd=study_dir)
    folder = study_dir / "studies" / STUDY / "report"
    assert f"wrote {Path('studies') / STUDY / 'report' / 'index.html'}" in proc.stdout
    assert "not drawn: Pareto front" in proc.stdout  # one objective today
    return folder


def load(study_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{study_dir}/studies/{STUDY}.db")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.spans: dict[str, str] = {}
        self._span: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(str(a["src"]))
        if tag in ("a", "link", "script") and (a.get("href") or a.get("src")):
            self.links.append(str(a.get("href") or a.get("src")))
        if tag == "span" and a.get("id"):
            self._span = a["id"]

    def handle_data(self, data: str) -> None:
        if self._span is not None:
            self.spans[self._span] = data
            self._span = None


def parse(folder: Path) -> _Page:
    page = _Page()
    page.feed((folder / "index.html").read_text(encoding="utf-8"))
    return page


def test_folder_holds_the_page_figures_summary_and_profile(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()}
    assert {"index.html", "summary.json", "best-profile.yaml"} | FIGURES <= names
    assert "pareto.png" not in names
    for name in FIGURES:
        with Image.open(folder / name) as image:
            image.verify()
        with Image.open(folder / name) as image:
            # the verdict's and the importance's heights follow their rows (3 configurations: 297 px)
            assert image.format == "PNG" and image.width >= 600 and image.height >= 150


def test_page_is_self_contained(folder: Path) -> None:
    page = parse(folder)
    assert set(page.images) == FIGURES
    for src in page.images + page.links:
        assert "://" not in src, f"{src} reaches outside the folder"
        assert (folder / src).is_file(), src
    text = (folder / "index.html").read_text(encoding="utf-8")
    assert "Simulated" in text and "Pareto front: not drawn" in text


def test_summary_numbers_match_the_study_db(folder: Path, study_dir: Path) -> None:
    study = load(study_dir)
    summary = json.loads((folder / "summary.json").read_text())
    confirmation = study.user_attrs["confirmation"]
    best = study.trials[confirmation["best"]]
    launches = [t for t in study.trials if t.user_attrs.get("confirm_of") == best.number
                and t.user_attrs.get("outcome") == "ok"]  # fmt: skip
    metrics = best.user_attrs["metrics"]

    assert summary["study"] == STUDY and summary["simulated"] is True
    finalists = len(confirmation["finalists"])
    relaunched = [t for t in study.trials if t.user_attrs.get("confirm_of") is not None]
    assert len(relaunched) == finalists  # one confirming launch each
    assert len(summary["trials"]) == len(study.trials)
    assert summary["best"]["number"] == best.number
    # The best carries the mean over its fresh launches, not its first measurement (chosen for being high).
    assert summary["best"]["value"] == pytest.approx(sum(t.value for t in launches) / len(launches))
    assert summary["best"]["confirmed_launches"] == len(launches) == 1
    assert summary["outcome_counts"] == dict(Counter(t.user_attrs["outcome"] for t in study.trials))
    relaunched = {t.user_attrs["confirm_of"]: t.value for t in study.trials if "confirm_of" in t.user_attrs}
    assert sorted(b["name"] for b in summary["baselines"]) == ["cautious", "hand-found"]  # each once
    for baseline in summary["baselines"]:
        stored = study.trials[baseline["trial"]]
        assert stored.user_attrs["baseline"] == baseline["name"] and "confirm_of" not in stored.user_attrs
        assert baseline["confirmed"] and baseline["value"] == pytest.approx(relaunched[stored.number])

    # the page shows the same numbers, rounded as printed
    spans = parse(folder).spans
    assert spans["best-trial"] == str(best.number)
    confirmed = next(f for f in confirmation["finalists"] if f["trial"] == best.number)
    assert spans["best-value"] == f"{confirmed['mean']:.2f}"
    assert spans["best-ci"] == (f"{confirmed['ci95']:.2f}" if confirmed["ci95"] is not None else "–")
    assert spans["best-confirmed"] == "1"
    assert spans["best-accept"] == f"{metrics['accept_length']['value']:.2f}"

    # the per-category numbers come from the best trial's measurement artifact
    measured = json.loads(
        (study_dir / "studies" / STUDY / "logs" / f"trial-{best.number:04d}.measurement.json").read_text()
    )
    best_categories = summary["categories"][0]
    assert best_categories["trial"] == best.number
    assert best_categories["categories"] == measured[0]["categories"]

    # importance: Optuna's own numbers for this study
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's "few trials in some regime" warning
        importance = optuna.importance.get_param_importances(study)
    assert summary["importance"]["values"] == pytest.approx(dict(importance))

    profile = load_profile(folder / "best-profile.yaml")
    assert profile.trial == best.number and profile.flags == best.user_attrs["flags"]
    assert profile.confirmed_launches == 1 and profile.metrics["decode_tok_s"].value == pytest.approx(confirmed["mean"])
    assert profile.verdict == confirmation["note"]
    # the export, the table and the figure show the gain over the verdict's baseline with the verdict's interval
    versus = {g["trial"]: g for g in confirmation["versus"]}
    if best.number in versus:
        assert profile.gain is not None and profile.gain.over == versus[best.number]["baseline"]
        assert (profile.gain.low, profile.gain.high) == (versus[best.number]["low"], versus[best.number]["high"])
        assert profile.gain.text() in (folder / "best-profile.yaml").read_text()
    else:
        assert profile.gain is None and best.number == confirmation["reference"]
    assert "widened for the finalists the best was picked from" in (folder / "index.html").read_text()


def test_show_adds_importance_and_the_best_trials_categories(study_dir: Path, folder: Path) -> None:
    data = json.loads(run("show", STUDY, "--json", cwd=study_dir).stdout)
    summary = json.loads((folder / "summary.json").read_text())
    assert data["importance"]["values"] == pytest.approx(summary["importance"]["values"])
    assert data["best_categories"] == summary["categories"][0]["categories"]
    text = run("show", STUDY, cwd=study_dir).stdout
    assert "parameter importance (PED-ANOVA" in text
    assert f"best trial {data['best_trial']} per prompt category" in text
    top = next(iter(data["importance"]["values"]))
    assert f"--{top}" in text


@pytest.mark.browser
def test_a_person_sees_every_figure(folder: Path) -> None:
    with chromium() as browser:
        browser.get((folder / "index.html").as_uri())
        wait_until(
            browser,
            lambda d: d.execute_script("return [...document.images].every(i => i.complete && i.naturalWidth > 0)"),
        )
        count = browser.execute_script("return document.images.length")
        assert count == len(FIGURES)
        assert "autotune report" in browser.title
        screenshot(browser, "report.png")


# ---------------------------------------------------------------- without the twin: edge cases


def _study(tmp_path: Path, directions: list[str]) -> optuna.Study:
    return optuna.create_study(study_name="edge", storage=f"sqlite:///{tmp_path}/edge.db", directions=directions)


def test_a_study_with_nothing_feasible_still_reports(tmp_path: Path) -> None:
    from autotune.report.html import write_report
    from autotune.report.summary import summarise
    from autotune.study import StudyView

    study = _study(tmp_path, ["maximize"])
    for outcome, fraction in (("infeasible-memory-low", 0.5), ("predicted-infeasible-memory-low", 0.55)):
        study.add_trial(
            optuna.trial.create_trial(
                params={"mem-fraction-static": fraction},
                distributions={"mem-fraction-static": optuna.distributions.FloatDistribution(0.5, 0.95, step=0.05)},
                value=0.0,
                user_attrs={
                    "outcome": outcome,
                    "feasible": False,
                    "reason": "too little memory",
                    "flags": {"mem-fraction-static": fraction},
                },
            )
        )
    files = write_report(summarise(StudyView(study, artifacts_dir=tmp_path / "missing")), tmp_path / "report")
    page = files.page.read_text()
    assert "No feasible trial has been measured yet." in page and "infeasible-memory-low" in page
    assert not (tmp_path / "report" / "best-profile.yaml").exists()
    assert [p.name for p in files.images] == ["history.png", "importance.png"]
    assert any("Feasibility map" in s for s in files.skipped)
    assert "no artifact store at" in page


def test_two_objectives_draw_a_pareto_front(tmp_path: Path) -> None:
    from autotune.report.html import write_report
    from autotune.report.summary import summarise
    from autotune.study import StudyView

    study = _study(tmp_path, ["maximize", "minimize"])
    for speed, latency in ((40.0, 0.05), (50.0, 0.08), (45.0, 0.09), (30.0, 0.04)):
        study.add_trial(optuna.trial.create_trial(values=[speed, latency], user_attrs={"outcome": "ok"}))
    summary = summarise(StudyView(study))
    assert summary.pareto is not None
    assert {p.trial for p in summary.pareto if p.on_front} == {0, 1, 3}
    files = write_report(summary, tmp_path / "report")
    assert "pareto.png" in {p.name for p in files.images}


def test_without_matplotlib_it_says_how_to_get_it(study_dir: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None; "
        "from autotune.cli import main; sys.argv = ['autotune', 'report', %r, '-o', 'elsewhere']; main()" % STUDY
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=study_dir, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "matplotlib is not installed" in proc.stderr and "pip install 'autotune[report]'" in proc.stderr
