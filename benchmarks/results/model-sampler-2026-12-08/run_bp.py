"""Runs the search_efficiency of the tree this file lies in (an archive's), after printing which files the
model sampler, the fit and the harness load from, and stops unless each lies in that tree."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import autotune.study.guided  # noqa: E402
import benchmarks.search_efficiency as se  # noqa: E402
import passmodel.calibrate  # noqa: E402

for m in (autotune.study.guided, passmodel.calibrate, se):
    assert str(Path(str(m.__file__)).resolve()).startswith(str(ROOT)), m.__file__
    print("MARKER loaded", m.__file__, flush=True)
sys.exit(se.main(sys.argv[1:]))
