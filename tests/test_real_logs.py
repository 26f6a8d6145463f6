"""The engines on real server output: excerpts of SGLang, vLLM and llama.cpp logs users posted publicly.

Every excerpt of ``tests/fixtures/real_logs/index.yaml`` goes through its engine's failure
classification (``failure_in``: which failure the log names, or none) and figure parsing
(``memory_facts``, ``log_figures``). The labels were written by reading each excerpt (see the
fixture's README), so a miss is the engine's. The summary test reports the scores of the entries the
rules were written against (``dev``) and of those kept aside (``holdout``), and lists every miss.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.engines import get_engine
from autotune.engines.base import Engine
from autotune.outcomes import OutcomeKind

CORPUS = Path(__file__).parent / "fixtures" / "real_logs"
GIB = 2**30
CLASS_TARGET, FIGURE_TARGET = 0.95, 0.98


def entries() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = yaml.safe_load((CORPUS / "index.yaml").read_text())["entries"]
    return data


@cache
def engine(name: str) -> Engine:
    return get_engine(name)


def observed_kind(entry: dict[str, Any]) -> str:
    failure = engine(entry["engine"]).failure_in((CORPUS / entry["file"]).read_text())
    return failure.kind.value if failure is not None else OutcomeKind.OK.value


def close(seen: float | None, expected: float) -> bool:
    return seen is not None and seen == pytest.approx(expected, rel=2e-3, abs=6e-3)


def figure_checks(entry: dict[str, Any]) -> list[tuple[str, bool, object]]:
    """(figure, right?, what the engine read) for every figure the entry names."""
    text = (CORPUS / entry["file"]).read_text()
    eng = engine(entry["engine"])
    facts = eng.memory_facts(text)
    logged = eng.log_figures(text)
    checks: list[tuple[str, bool, object]] = []
    for name, expected in (entry.get("figures") or {}).items():
        if name in ("decode_tok_s", "accept_length"):
            seen = sorted(v for vs in logged.gen_tok_s.values() for v in vs) if name == "decode_tok_s" else sorted(
                logged.accept_lengths
            )
            right = len(seen) == len(expected) and all(close(a, b) for a, b in zip(seen, sorted(expected), strict=True))
            checks.append((name, right, seen))
        elif name == "kv_tokens":
            seen_tokens = facts.kv_tokens if facts else None
            checks.append((name, seen_tokens == expected, seen_tokens))
        else:
            attribute = {
                "weights_gb": "weights_bytes",
                "kv_gb": "kv_pool_bytes",
                "graph_gb": "graph_bytes",
                "free_gb": "free_at_start_bytes",
                "pools_avail_gb": "avail_after_pools_bytes",
            }[name]
            raw = getattr(facts, attribute) if facts else None
            seen_gb = raw / GIB if raw is not None else None
            checks.append((name, close(seen_gb, expected), seen_gb))
    return checks


def marks(entry: dict[str, Any]) -> list[pytest.MarkDecorator]:
    return [pytest.mark.xfail(reason=entry["xfail"], strict=True)] if entry.get("xfail") else []


@pytest.mark.parametrize(
    "entry", [pytest.param(e, id=e["file"], marks=marks(e)) for e in entries()]
)
def test_class(entry: dict[str, Any]) -> None:
    assert observed_kind(entry) == entry["kind"], (CORPUS / entry["file"]).read_text()[-400:]


@pytest.mark.parametrize(
    "entry", [pytest.param(e, id=e["file"], marks=marks(e)) for e in entries() if e.get("figures")]
)
def test_figures(entry: dict[str, Any]) -> None:
    wrong = [(name, seen) for name, right, seen in figure_checks(entry) if not right]
    assert not wrong, f"expected {entry['figures']}, read {wrong}"


def test_index_is_complete_and_labelled_by_the_vocabulary() -> None:
    listed = {e["file"] for e in entries()}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.log")}
    assert listed == on_disk
    for entry in entries():
        assert OutcomeKind(entry["kind"]) and entry["split"] in ("dev", "holdout"), entry["file"]
        assert entry["source"].startswith("https://github.com/"), entry["file"]


def test_scores(capsys: pytest.CaptureFixture[str]) -> None:
    """Classes >= 95 % and figures >= 98 % right over the corpus; each split's score is printed."""
    lines: list[str] = []
    totals = {"class": [0, 0], "figure": [0, 0]}
    for split in ("dev", "holdout"):
        chosen = [e for e in entries() if e["split"] == split]
        class_hits = [e for e in chosen if observed_kind(e) == e["kind"]]
        figure_results = [(e, name, right, seen) for e in chosen for name, right, seen in figure_checks(e)]
        figure_hits = sum(1 for *_, right, _ in figure_results if right)
        totals["class"][0] += len(class_hits)
        totals["class"][1] += len(chosen)
        totals["figure"][0] += figure_hits
        totals["figure"][1] += len(figure_results)
        lines.append(
            f"{split}: classes {len(class_hits)}/{len(chosen)}, figures {figure_hits}/{len(figure_results)}"
        )
        lines += [
            f"  class miss {e['file']}: expected {e['kind']}, got {observed_kind(e)}"
            + (f" (xfail: {e['xfail']})" if e.get("xfail") else "")
            for e in chosen
            if e not in class_hits
        ]
        lines += [f"  figure miss {e['file']}: {name} read {seen}" for e, name, ok, seen in figure_results if not ok]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    classes, figures = (totals[k][0] / totals[k][1] for k in ("class", "figure"))
    assert classes >= CLASS_TARGET and figures >= FIGURE_TARGET, "\n".join(lines)
