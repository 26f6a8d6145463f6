"""The pass model: how fast a (speculative) inference server decodes, from public facts.

A verify pass's time from the GPUs, the model's ``config.json`` and a few fitted constants
(:mod:`passmodel.physics`), the acceptance of draft tokens, the profile schema those read
(:mod:`passmodel.profile`), a profile built from public facts (:mod:`passmodel.setup`) and its
calibration to measured launches (:mod:`passmodel.calibrate`). The tuner (``autotune``) fits it to a
night's launches to propose the next; the twin (``autotune_twin``) serves it as a simulated server.
It imports neither.
"""
