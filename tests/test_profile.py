"""Exported profiles: secrets stay out, the shell and systemd renderings quote correctly."""

from __future__ import annotations

import shlex
from pathlib import Path

from autotune.profile import Profile, ProfileGain, ProfileMetric, load_profile, render
from autotune.secrets import redact_env

PROFILE = Profile(
    study="s",
    trial=4,
    engine="sglang",
    model="Qwen/Qwen3.6-27B",
    launcher=["/opt/sglang/bin/python", "-m", "sglang.launch_server"],
    flags={"tp-size": 2, "mem-fraction-static": 0.88, "enable-metrics": True, "served-model-name": "my model $x 50%"},
    env=redact_env({"HF_TOKEN": "hf_secret_value", "SGLANG_LOG_LEVEL": "info"}),
    gpu_devices=[0, 1],
    metrics={"decode_tok_s": ProfileMetric(value=51.234, unit="tok/s", ci95=0.8, n=8)},
)


def test_secret_values_never_rendered(tmp_path: Path) -> None:
    assert PROFILE.env == {"HF_TOKEN": None, "SGLANG_LOG_LEVEL": "info"}
    for fmt in ("yaml", "sh", "systemd"):
        text = render(PROFILE, fmt)  # type: ignore[arg-type]
        assert "hf_secret_value" not in text
        assert "HF_TOKEN" in text


def test_shell_script_round_trips_argv() -> None:
    script = render(PROFILE, "sh", host="0.0.0.0", port=31000)
    exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
    assert shlex.split(exec_line)[1:] == PROFILE.argv(host="0.0.0.0", port=31000)
    assert "export CUDA_VISIBLE_DEVICES=0,1" in script
    assert ': "${HF_TOKEN:?set HF_TOKEN in the environment first}"' in script
    assert "decode 51.2 ± 0.8 tok/s" in script


def test_systemd_unit_escapes_specifiers() -> None:
    unit = render(PROFILE, "systemd")
    assert "Restart=on-failure" in unit and "EnvironmentFile=-/etc/autotune/s.env" in unit
    assert '"my model $$x 50%%"' in unit
    assert "ExecStart=/opt/sglang/bin/python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B" in unit


def test_yaml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(render(PROFILE, "yaml"))
    assert load_profile(path) == PROFILE


def test_yaml_says_its_verdict_and_gain_in_comments_and_still_loads(tmp_path: Path) -> None:
    gained = PROFILE.model_copy(
        update={"verdict": "recommend trial 4: faster than hand-found\n(a second line)",
                "gain": ProfileGain(over="hand-found", gain=0.124, low=0.02, high=0.23)}  # fmt: skip
    )
    text = render(gained, "yaml")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert "# gain over hand-found: +12.4% (+2.0% to +23.0%), the interval the verdict uses" in header
    assert "# (a second line)" in header  # every line of a long verdict stays a comment
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert load_profile(path) == gained
