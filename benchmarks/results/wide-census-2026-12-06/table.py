"""The census table: one row per replayed night, read from out/model-SEED-BUDGET.txt (wide_replay.py's output)."""

import re
import sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "out")
print("| night | regret / gap % | optimum | trees served (width, tokens) | best shape measured | optimum priced "
      "| verify ms fit / true | miss factor fit / true | deaths launched / predicted | TPE proposals "
      "| pool: exact / within 4 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(folder.glob("model-*.txt")):
    text = path.read_text()
    night = re.search(r"night of (\d+) \(model\): regret ([\d.]+) %, incumbent gap ([\d.]+) %", text)
    if night is None:
        continue
    seed = path.stem.split("-")[1]
    optimum = re.search(r"optimum [\d.]+ tok/s: (.+?)  \{", text)
    best = re.search(r"at the optimum's other flags: ([\d.]+) of the optimum", text)
    priced = re.search(r"price of the top 5 shapes.*\n.*?([\d.]+)\n", text)
    constants = re.search(r"verify_token_ms ([\d.]+) / ([\d.]+); miss_factor_per_doubling ([\d.]+) / ([\d.]+)", text)
    pool = re.search(r"in (\d+) of 20 pools; .* in (\d+) of 20", text)
    rows = [line for line in text.splitlines() if re.match(r"\s+\d+ proposal", line)]
    launched_deaths = sum("infeasible" in r and "(no launch)" not in r for r in rows)
    predicted = sum("(no launch)" in r for r in rows)
    tpe = sum(" tpe " in r for r in rows)
    served = [m for r in rows if (m := re.search(r" s\d+ k(\d+) t(\d+) tp\d+ +ok +[\d.]+ +([\d.]+)", r))]
    trees = sorted((int(m.group(1)), int(m.group(2))) for m in served if int(m.group(1)) > 1 and float(m.group(3)) > 0)
    trees_text = ", ".join(f"k{k} t{t}" for k, t in trees) or "none"
    print(f"| {seed} @{night.group(1)} | {night.group(2)} / {night.group(3)} | {optimum.group(1) if optimum else '-'} "
          f"| {trees_text} | {best.group(1) if best else '-'} | {priced.group(1) if priced else '-'} "
          f"| {constants.group(1)} / {constants.group(2) if constants else '-'} "
          f"| {constants.group(3)} / {constants.group(4) if constants else '-'} | {launched_deaths} / {predicted} "
          f"| {tpe} | {pool.group(1)} / {pool.group(2) if pool else '-'} |")
