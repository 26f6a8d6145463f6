"""``python -m autotune_twin calibrate`` and ``predict``: a twin profile fitted to measured points,
and the rate a profile (or a setup of public facts) predicts for one launch.

    python -m autotune_twin calibrate SETUP.yaml POINTS.jsonl -o PROFILE.yaml
    python -m autotune_twin predict PROFILE_OR_SETUP.yaml --flags "..." --concurrency N
        --input-len I --output-len O [--accept-length A]
    python -m autotune_twin predict PROFILE_OR_SETUP.yaml --points POINTS.jsonl

``SETUP.yaml`` may also be a twin profile (then its constants are the starting point). A bad
file, field, point or flag prints one line naming it and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from passmodel import calibrate, launch_flags
from passmodel.calibrate import PointsError
from passmodel.config import LaunchConfig
from passmodel.profile import ProfileError, TwinProfile, load_profile
from passmodel.setup import SetupError, load_setup, profile_from_setup

COMMANDS = ("calibrate", "predict")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, not argparse's usage block
        raise _UsageError(f"{self.prog}: {message}")


def load_profile_or_setup(path: Path) -> TwinProfile:
    """A twin profile (it has ``gpus:``; a built-in name too) or a setup of public facts as a profile.

    Raises:
        SetupError, ProfileError: the file is missing or wrong (named in the message).
    """
    if not path.exists():
        return load_profile(str(path))
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SetupError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError:
        data = None  # the loaders below name the YAML error
    if isinstance(data, dict) and "gpus" in data:
        return load_profile(str(path))
    return profile_from_setup(load_setup(path), name=path.stem)


def _resolved_points(profile: TwinProfile, path: Path) -> list[tuple[int, calibrate.Point, LaunchConfig]]:
    """(line number, point, the twin's configuration of its flags) for each point of ``path``.

    Raises:
        PointsError: the file or a line is unreadable, or a point's flags the twin cannot simulate.
    """
    resolved = []
    for line, point in calibrate.load_points(path):
        try:
            resolved.append((line, point, launch_flags.launch_config(profile, point.flags)))
        except ValueError as exc:
            raise PointsError(f"{path}:{line}: flags: {exc}") from None
    return resolved


def _calibrate(args: argparse.Namespace) -> int:
    profile = load_profile_or_setup(args.setup)
    points = [point for _, point, _ in _resolved_points(profile, args.points)]
    fitted = calibrate.fit(profile, points).model_copy(update={"name": args.output.stem})
    errors = [abs(calibrate.predict_point(fitted, p).tok_s / p.tok_s - 1) for p in points]
    dumped = fitted.model_dump(mode="json", exclude_unset=True)  # a drafter's foreign fields stay out
    args.output.write_text(yaml.safe_dump(dumped, sort_keys=False), encoding="utf-8")
    print(json.dumps({"profile": str(args.output), "points": len(points), "max_error": round(max(errors), 4)}))
    return 0


def _predict(args: argparse.Namespace) -> int:
    profile = load_profile_or_setup(args.profile)
    if args.points is not None:
        return _predict_points(profile, args.points)
    try:
        cfg = launch_flags.launch_config(profile, launch_flags.flags_from_text(args.flags))
    except ValueError as exc:
        raise _UsageError(f"--flags: {exc}") from None
    prediction = calibrate.predict(
        profile,
        cfg,
        concurrency=args.concurrency,
        input_len=args.input_len,
        output_len=args.output_len,
        accept=args.accept_length,
    )
    print(json.dumps({"tok_s": round(prediction.tok_s, 2), "accept_length": round(prediction.accept_length, 3)}))
    return 0


def _predict_points(profile: TwinProfile, path: Path) -> int:
    """Each measured point's predicted rate beside the measured one, a JSON object a line: how well a
    profile (calibrated on other launches, or from public facts alone) foresees these launches."""
    for line, point, cfg in _resolved_points(profile, path):
        predicted = calibrate.predict_point(profile, point, cfg)
        row = {"line": line, "tok_s": round(predicted.tok_s, 2), "measured_tok_s": point.tok_s}
        row["error"] = round(predicted.tok_s / point.tok_s - 1, 4)
        row["accept_length"] = round(predicted.accept_length, 3)
        print(json.dumps(row))
    return 0


def _parser() -> _Parser:
    parser = _Parser(prog="python -m autotune_twin", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    cal = sub.add_parser("calibrate", help="fit a profile to measured points")
    cal.add_argument("setup", type=Path, help="SETUP.yaml (or a twin profile to start from)")
    cal.add_argument("points", type=Path, help="POINTS.jsonl: one measured point a line")
    cal.add_argument("-o", "--output", type=Path, required=True, help="the fitted profile's YAML")
    pred = sub.add_parser("predict", help="the rate a profile or setup predicts for one launch")
    pred.add_argument("profile", type=Path, help="a twin profile or a SETUP.yaml")
    pred.add_argument(
        "--flags", default="", help='the launch\'s speculative flags, e.g. "--speculative-num-steps 3 ..."'
    )
    pred.add_argument("--concurrency", type=int, default=1)
    pred.add_argument("--input-len", type=int, default=128)
    pred.add_argument("--output-len", type=int, default=256)
    pred.add_argument("--accept-length", type=float, default=None)
    pred.add_argument(
        "--points", type=Path, default=None, help="POINTS.jsonl: predict each point instead (other options unused)"
    )
    return parser


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "predict" and (args.concurrency < 1 or args.output_len < 1 or args.input_len < 0):
            raise _UsageError("predict: --concurrency and --output-len must be >= 1, --input-len >= 0")
        if args.command == "predict" and args.accept_length is not None and args.accept_length < 1:
            raise _UsageError("predict: --accept-length must be >= 1")
        return _calibrate(args) if args.command == "calibrate" else _predict(args)
    except (_UsageError, SetupError, ProfileError, PointsError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
