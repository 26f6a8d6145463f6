"""``autotune bench``: measure a running server, or relaunch an exported profile and check its numbers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from autotune.cli.common import app, console, err_console, error_funnel
from autotune.engines import DEFAULT_ENGINE
from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.bench import Verdict
    from autotune.measure.client import Measurement
    from autotune.measure.protocol import MeasureSettings
    from autotune.profile import Profile


# ``autotune bench`` without a profile's settings: a few minutes, not the study protocol's 10 rounds.
BENCH_DEFAULTS: dict[str, Any] = {"max_tokens": 128, "max_seconds": 180.0, "max_rounds": 5}
# bench --profile's verdict categories (autotune.bench.VerdictCategory), as Rich styles
VERDICT_STYLES = {"not-slower": "green", "slower": "red", "cannot-tell": "yellow"}


UrlOpt = Annotated[Optional[str], typer.Option("--url", help="Measure this running server (nothing is launched).")]
ProfileFileOpt = Annotated[
    Optional[Path], typer.Option("--profile", help="Launch this exported profile (YAML), measure it, compare.")
]
TargetCiOpt = Annotated[
    Optional[float], typer.Option("--target-ci", help="Stop at this relative 95% CI half width (0.02 = ±2%).")
]
MarginOpt = Annotated[
    float,
    typer.Option(
        "--margin",
        min=0.0,
        max=0.5,
        help="With --profile: a drop of at most this much (relative, "
        "0.03 = 3%) from the recorded figure is not slower; exit 1 when it is significantly beyond it.",
    ),
]
ApiKeyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        envvar="AUTOTUNE_API_KEY",
        show_default=False,
        help="Key of a server started with --api-key (sent as a Bearer header). Env: AUTOTUNE_API_KEY.",
    ),
]
WorkdirOpt = Annotated[Path, typer.Option("--workdir", help="Where a launched profile's log goes.")]


@app.command()
def bench(
    url: UrlOpt = None,
    profile_file: ProfileFileOpt = None,
    engine: Annotated[str, typer.Option("--engine", help="Protocol of the server behind --url.")] = DEFAULT_ENGINE,
    suite: Annotated[Optional[str], typer.Option("--suite", help="builtin:NAME or a JSONL file.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Parallel requests.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="Cap per request.")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, help="Warm-up requests, discarded.")] = None,
    target_ci: TargetCiOpt = None,
    max_rounds: Annotated[Optional[int], typer.Option("--max-rounds", min=2, help="Cap on rounds.")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Fixed-length generation.")] = False,
    workdir: WorkdirOpt = Path("studies/bench"),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    margin: MarginOpt = 0.03,
    api_key: ApiKeyOpt = None,
) -> None:
    """Measure a running server (--url), or re-launch an exported profile (--profile) and check its numbers.

    With --profile it asks whether the server got slower than the profile recorded, on the 95 %
    interval of the change: "not slower" (exit 0; "faster" when the whole interval is above 0) when
    its low end is at or above -margin; "slower by Y % (significant)" (exit 1: a cron job or a
    systemd timer can run it after every engine upgrade) when the whole interval is below -margin;
    otherwise "cannot tell yet" (exit 3) and what would settle it. A speculation schedule's profile
    is checked at every level, the worst deciding the exit (1, then 3). --json gives each verdict's
    category: not-slower, slower or cannot-tell.

    Without a profile's own settings, bench caps each answer at 128 tokens and the measurement at
    3 minutes (a few minutes in all); progress goes to stderr, also with --json.
    """
    with error_funnel():
        from autotune.bench import bench_url
        from autotune.profile import load_profile

        if (url is None) == (profile_file is None):
            raise UserError("give exactly one of --url URL or --profile PROFILE.yaml")
        profile = load_profile(profile_file) if profile_file else None
        settings = _bench_settings(
            profile,
            concurrency=concurrency,
            max_tokens=max_tokens,
            warmup_requests=warmup,
            target_rel_ci=target_ci,
            max_rounds=max_rounds,
            ignore_eos=ignore_eos or None,
        )
        suite_ref = suite or (profile.suite if profile and profile.suite else "builtin:mixed")
        if profile is None:
            assert url is not None
            measurement = bench_url(engine, url, suite_ref, settings, api_key=api_key, on_progress=_bench_progress)
            verdict = None
        elif profile.levels:  # a speculation schedule: every level it recorded, on one launch
            _bench_levels(profile, settings, suite_ref, workdir, api_key, margin=margin, as_json=as_json)
            return
        else:
            measurement, verdict = _bench_profile(
                profile, profile_file, settings, suite_ref, workdir, api_key, margin=margin
            )
        _print_bench(measurement, verdict, suite_ref=suite_ref, as_json=as_json)
        if verdict is not None and verdict.category.exit_code:
            raise typer.Exit(verdict.category.exit_code)


def _bench_levels(
    profile: Profile,
    settings: MeasureSettings,
    suite_ref: str,
    workdir: Path,
    api_key: str | None,
    *,
    margin: float,
    as_json: bool,
) -> None:
    """Launch a profile that recorded several load levels, check each; exit with the worst: 1 when any level
    is slower or was not measured, else 3 when any cannot tell yet."""
    from autotune.bench import bench_profile_levels, compare_levels, levels_exit_code
    from autotune.report.console import measurement_table

    if api_key:
        os.environ.setdefault("AUTOTUNE_API_KEY", api_key)
    levels = [level.concurrency for level in profile.levels]
    err_console.print(f"launching the profile at concurrency {levels}: {profile.summary()}", highlight=False)
    measurements = bench_profile_levels(
        profile, settings=settings, suite_ref=suite_ref, workdir=workdir, levels=levels, on_progress=_bench_progress
    )
    verdicts = compare_levels(profile, measurements, margin=margin)
    if as_json:
        payload = {
            "measurements": [m.model_dump(mode="json") for m in measurements],
            "verdicts": {str(c): v.model_dump(mode="json") if v else None for c, v in verdicts.items()},
        }
        print(json.dumps(payload, indent=2))
    else:
        for measurement in measurements:
            console.print(
                measurement_table(measurement, title=f"bench ({suite_ref}), concurrency {measurement.concurrency}")
            )
        for concurrency, verdict in verdicts.items():
            if verdict is None:
                console.print(f"[yellow]concurrency {concurrency}: not measured[/yellow]")
                continue
            style = VERDICT_STYLES[verdict.category.value]
            console.print(
                f"concurrency {concurrency}: [{style}]{verdict.text()}[/{style}] (measured "
                f"{verdict.measured:.1f}, recorded {verdict.recorded:.1f})",
                highlight=False,
            )
    code = levels_exit_code(verdicts.values())
    if code:
        raise typer.Exit(code)


def _bench_settings(profile: Profile | None, **overrides: float | None) -> MeasureSettings:
    """The profile's measurement settings (else bench's short defaults), with the options given overriding them."""
    from autotune.measure.protocol import MeasureSettings

    base = (profile.measure if profile and profile.measure else None) or MeasureSettings(**BENCH_DEFAULTS)
    return base.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def _bench_progress(text: str, detail: str = "") -> None:
    """Print bench's progress to stderr: stdout stays clean for --json."""
    err_console.print(f"bench: {text}" + (f" {detail}" if detail else ""), highlight=False, markup=False)


def _bench_profile(
    profile: Profile,
    profile_file: Path | None,
    settings: MeasureSettings,
    suite_ref: str,
    workdir: Path,
    api_key: str | None,
    *,
    margin: float,
) -> tuple[Measurement, Verdict | None]:
    """Launch the profile, measure it and compare the numbers with the ones it recorded."""
    from autotune.bench import bench_profile, compare

    err_console.print(f"launching profile {profile_file}: {profile.summary()}", highlight=False)
    if api_key:
        os.environ.setdefault("AUTOTUNE_API_KEY", api_key)
    measurement = bench_profile(
        profile, settings=settings, suite_ref=suite_ref, workdir=workdir, on_progress=_bench_progress
    )
    return measurement, compare(profile, measurement, margin=margin)


def _print_bench(measurement: Measurement, verdict: Verdict | None, *, suite_ref: str, as_json: bool) -> None:
    """Print the measurement and whether the profile still meets its numbers, as a table or as JSON."""
    from autotune.report.console import measurement_table

    if as_json:
        payload = {
            "measurement": measurement.model_dump(mode="json"),
            "verdict": verdict.model_dump(mode="json") if verdict else None,
        }
        print(json.dumps(payload, indent=2))
    else:
        console.print(measurement_table(measurement, title=f"bench ({suite_ref})"))
        if verdict is not None:
            style = VERDICT_STYLES[verdict.category.value]
            console.print(
                f"[{style}]{verdict.text()}[/{style}] — the profile's {verdict.metric}: measured "
                f"{verdict.measured:.1f} ± {verdict.measured_ci95 or 0:.1f}, recorded {verdict.recorded:.1f} "
                f"± {verdict.recorded_ci95 or 0:.1f}",
                highlight=False,
            )
