"""Diagnostic (outside the repo): one member's model night, each trial's launch, prediction, truth; the
model's prediction of the optimum's configuration at each proposal."""
import sys, tempfile, json
from pathlib import Path
ROOT = Path(sys.argv[1]).resolve(); sys.path.insert(0, str(ROOT))
import autotune.study.guided as g
from benchmarks import family, family_tight
from benchmarks.problems import problem_of, solve, add_unmodelled
from benchmarks.nights import run_study
print("MARKER", g.__file__)
case, seed, budget = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sampler = sys.argv[5] if len(sys.argv) > 5 else "model"
fam = (family.members if case == "all" else family_tight.tight_members)(1, seed)[0]
cfgdir = tempfile.mkdtemp()
space = family.space_naming_configs(fam, Path(cfgdir))
problem = problem_of(fam.profile, space, noise_rel=None)
problem.launch_sd = fam.profile.timing.launch_sd
add_unmodelled(problem, fam.seed)
opt = solve(problem)
print(fam.summary)
S = lambda f: {k.replace('speculative-',''): v for k, v in (f or {}).items() if k.startswith('speculative') and 'path' not in k and 'algorithm' not in k} | ({'alg': f.get('speculative-algorithm')} if f else {}) | {k: v for k, v in (f or {}).items() if k in ('tp-size','mem-fraction-static','cuda-graph-max-bs-decode','context-length')}
print("OPT", round(opt.tok_s,1), S(opt.flags))
optpred = []
orig = g.ModelGuided._choose
def choose(self, study):
    out = orig(self, study)
    space_ = self._study_space(study); fit = self._fitted(study)
    if fit is not None:
        params = g.model_params(space_, opt.flags)
        r = g._rate(fit, space_, g.flags_of(space_, params))
        optpred.append((len(study.trials), r, fit.error, out[1][:60]))
    else:
        optpred.append((len(study.trials), None, None, out[1][:60]))
    return out
g.ModelGuided._choose = choose
run = run_study(problem, seed, budget, sampler=sampler, name="x", confirm=True)
for i, s in enumerate(run.steps):
    print(i, 'L' if s.launched else '-', s.outcome[:10], 'meas', s.measured and round(s.measured,1), 'true', s.true and round(s.true,1), 'pred', s.predicted and round(s.predicted,1), S(s.flags))
for row in optpred: print("optpred at trial", row[0], row[1] and round(row[1],1), 'fiterr', row[2] and round(row[2],3), row[3])
print("regret", run.summary(opt.tok_s, problem.gpus)["regret_pct"], "confirmed true", run.confirmed_true)
