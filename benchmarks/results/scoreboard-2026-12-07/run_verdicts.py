"""The scoreboard's verdicts run (round 8's and round 15's script, copied; not the product):
``benchmarks/verdicts.py`` with the product code of one tree.

Usage: python run_verdicts.py TREE VERDICTS_ARGS... (TREE: an unpacked archive holding this branch's
benchmarks/verdicts.py, which has --night; its autotune package is the tree's own.) Prints the MARKER
lines of the files the run loaded and stops unless each lies in TREE.
"""

import sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root))
import autotune.study.night  # noqa: E402
import autotune.study.race  # noqa: E402
import benchmarks.verdicts as verdicts  # noqa: E402

for module in (autotune.study.night, autotune.study.race, verdicts):
    if not Path(str(module.__file__)).resolve().is_relative_to(root):
        sys.exit(f"loaded from outside the tree: {module.__file__}")
    print("MARKER loaded", module.__file__, flush=True)
sys.exit(verdicts.main(sys.argv[2:]))
