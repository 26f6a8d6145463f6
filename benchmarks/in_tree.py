"""Runs one benchmark script with the code of one tree (an unpacked ``git archive``), and proves it:

    .venv/bin/python benchmarks/in_tree.py TREE MODULE [ARGS...]

MODULE is ``search_efficiency`` or ``verdicts``: ``benchmarks/MODULE.py`` of TREE runs with ARGS, on
TREE's ``autotune`` and ``passmodel``. It prints a ``MARKER loaded`` line for each file the judgement
rests on and stops unless each lies in TREE: a copy of another tree's modules on the path would judge
the wrong code without an error. Run it by its path, not with ``-m`` (that would import this tree's
``benchmarks`` first, and the check would refuse it).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

MODULES = ("search_efficiency", "verdicts")
# The product's parts a benchmark judges: the search's sampler, the race, the pass model's fit.
PRODUCT = ("autotune.study.guided", "autotune.study.race", "passmodel.calibrate")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in MODULES:
        print(f"usage: in_tree.py TREE {{{','.join(MODULES)}}} [ARGS...]", file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    if not root.is_dir():
        print(f"in_tree.py: no such tree: {root}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    # Each module is checked before the next is imported, so the first one from elsewhere stops the run.
    for name in (*PRODUCT, f"benchmarks.{argv[1]}"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as missing:
            print(f"in_tree.py: {root} does not hold {name}: {missing}", file=sys.stderr)
            return 1
        where = Path(str(module.__file__)).resolve()
        if not where.is_relative_to(root):
            print(f"in_tree.py: loaded from outside the tree: {where}", file=sys.stderr)
            return 1
        print("MARKER loaded", where, flush=True)
    result: int = module.main(argv[2:])
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
