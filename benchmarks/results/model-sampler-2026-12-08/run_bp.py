"""Runs this tree's search_efficiency, after printing which files the product and harness load from."""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import autotune.study.guided, passmodel.calibrate, benchmarks.search_efficiency as se
for m in (autotune.study.guided, passmodel.calibrate, se):
    assert str(Path(m.__file__).resolve()).startswith(str(ROOT)), m.__file__
    print("MARKER loaded", m.__file__, flush=True)
sys.exit(se.main(sys.argv[1:]))
