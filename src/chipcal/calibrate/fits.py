"""Least-squares fits of the physics model's free parameters (scipy.optimize).

Every fit returns a `FitResult`: parameter values with standard errors (from the covariance of
the linearised problem), residuals, R² and the formula fitted, never a bare number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize


@dataclass(frozen=True)
class FitResult:
    name: str
    model: str                      # the formula, in words/symbols
    parameters: dict[str, float]
    stderr: dict[str, float]        # 1-sigma; nan where the data cannot constrain a parameter
    residuals: tuple[float, ...]    # in the space the fit minimised (stated in `residual_space`)
    residual_space: str
    r2: float
    n: int
    # parameter -> why the data could not constrain it (its prior/default value was kept instead)
    unconstrained: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "model": self.model, "parameters": dict(self.parameters),
            "stderr": {k: (None if not np.isfinite(v) else v) for k, v in self.stderr.items()},
            "residuals": list(self.residuals), "residual_space": self.residual_space,
            **self._r2_record(), "n": self.n, "unconstrained": dict(self.unconstrained),
        }

    def _r2_record(self) -> dict:
        """R² for JSON: null with a reason when undefined (readings constant, e.g. a frozen counter)."""
        if np.isfinite(self.r2):
            return {"r2": self.r2}
        return {"r2": None, "r2_note": "undefined: the observed values are constant (no variance to explain)"}

    @classmethod
    def from_dict(cls, d: dict) -> FitResult:
        return cls(name=d["name"], model=d["model"], parameters=dict(d["parameters"]),
                   stderr={k: (float("nan") if v is None else v) for k, v in d["stderr"].items()},
                   residuals=tuple(d["residuals"]), residual_space=d["residual_space"],
                   r2=float("nan") if d["r2"] is None else d["r2"], n=d["n"],
                   unconstrained=dict(d.get("unconstrained") or {}))


SATURATION_RANGE = 100.0      # a saturating curve's W_half beyond the measured sizes by more is not seen
UNCONSTRAINED_SE_LOG = 1.0    # 1-sigma wider than a factor e: the data do not pin the parameter
AT_BOUND_LOG = 1e-3           # within 0.1 % of a bound: the bound decided, not the data
# Two loose parameters whose estimates correlate beyond this trade off (a class's efficiency and the
# size curve): holding one may pin the other, so a round holds the wider only. At 0.1 every recorded
# run holds what holding one loose parameter per round holds, in 1-3 rounds instead of one per parameter.
PARTNER_CORRELATION = 0.1
# Stop when an iteration lowers the cost by less than this fraction. The roofline's max(compute,
# memory) makes the layer fit's cost piecewise smooth, and at scipy's default 1e-8 the solver
# crawled along a kink for 783 evaluations (2 min of a 5 min quick run on the Zen 4 VM) to the
# same parameters, to 3 digits, that 1e-5 reaches in 23.
FTOL = 1e-5
# At most this many evaluations per round of a fit: a cross-validation fold of the recorded Zen 4
# full run crawled 301 (9 s of a 26 s refit) where the others stopped within 71; at a cap of 60, and of
# 100, the fourteen recorded runs re-fit to the same figures (issue 50). A capped round is a round like
# another: its parameters are judged (held, unconstrained) as usual.
MAX_NFEV = 100


def _r2(observed: np.ndarray, predicted: np.ndarray) -> float:
    ss_res = float(np.sum((observed - predicted) ** 2))
    ss_tot = float(np.sum((observed - np.mean(observed)) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def _covariance(jac: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """cov = s² (JᵀJ)⁻¹ with s² = Σr²/(n−p); pseudo-inverse so flat directions give large/nan."""
    n, p = jac.shape
    dof = max(n - p, 1)
    s2 = float(residuals @ residuals) / dof
    return np.linalg.pinv(jac.T @ jac) * s2


def saturating(work: np.ndarray, e_max: float, w_half: float) -> np.ndarray:
    """eff(W) = e_max · W / (W + W_half): small problems cannot fill the machine."""
    return e_max * work / (work + w_half)


def fit_saturating_efficiency(work_flop: Sequence[float], efficiency: Sequence[float],
                              name: str = "gemm_efficiency") -> FitResult:
    """Fit eff(W) = e_max·W/(W+W_half) to (problem FLOP, achieved/peak) points.

    Residuals are relative (fit in log space), so the small sizes, where efficiency changes
    fastest, weigh as much as the large ones.
    """
    w = np.asarray(work_flop, dtype=float)
    e = np.asarray(efficiency, dtype=float)
    if len(w) < 3 or np.any(w <= 0) or np.any(e <= 0):
        raise ValueError("need at least 3 points with positive work and efficiency")

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(saturating(w, np.exp(x[0]), np.exp(x[1]))) - np.log(e)

    x0 = np.log([float(np.max(e)), float(np.median(w))])
    sol = optimize.least_squares(residual, x0, method="trf")
    e_max, w_half = np.exp(sol.x)
    cov = _covariance(sol.jac, sol.fun)
    se_log = np.sqrt(np.clip(np.diag(cov), 0, None))
    unconstrained = {}
    if not (w.min() / SATURATION_RANGE <= w_half <= w.max() * SATURATION_RANGE) or not se_log[1] < UNCONSTRAINED_SE_LOG:
        # every size already saturated (or none yet): the knee lies outside the data
        unconstrained["w_half_flop"] = (f"fitted {w_half:.3g} FLOP lies outside {w.min() / SATURATION_RANGE:.3g}-"
                                        f"{w.max() * SATURATION_RANGE:.3g} (the sizes measured, x/÷{SATURATION_RANGE:g}) "
                                        "or is unconstrained: the curve's knee is not in the data")
    return FitResult(
        name=name, model="eff(W) = e_max * W / (W + w_half_flop)",
        parameters={"e_max": float(e_max), "w_half_flop": float(w_half)},
        stderr={"e_max": float(e_max * se_log[0]), "w_half_flop": float(w_half * se_log[1])},
        residuals=tuple(map(float, sol.fun)), residual_space="log(efficiency)",
        r2=_r2(e, saturating(w, e_max, w_half)), n=len(w), unconstrained=unconstrained,
    )


@dataclass(frozen=True)
class _LogProblem:
    """fit_log_latency's problem in log space: bounds, prior centre and widths per parameter,
    the measurements and their uncertainties."""

    names: list[str]
    predict: Callable[[dict[str, float]], np.ndarray]
    measured: np.ndarray
    sigma: np.ndarray           # each measurement's uncertainty, log units
    lo: np.ndarray              # log bounds
    hi: np.ndarray
    centre: np.ndarray          # log prior centres
    start: np.ndarray           # log starting values, inside the bounds
    hold: np.ndarray            # where a parameter the data cannot constrain is held at first
    widths: np.ndarray          # prior widths, log units (inf: no prior)
    has_prior: np.ndarray
    at_ceiling: np.ndarray      # the upper bound is a physical limit: held there when run into
    robust: bool

    @property
    def n_data(self) -> int:
        return len(self.measured)

    def residual(self, x: np.ndarray) -> np.ndarray:
        """Data residuals log(predicted/measured) / sigma, then (log p − log c) / width for each
        parameter with a prior."""
        params = dict(zip(self.names, np.exp(x), strict=True))
        data = (np.log(np.asarray(self.predict(params), dtype=float)) - np.log(self.measured)) / self.sigma
        if not self.has_prior.any():
            return data
        return np.concatenate([data, (x - self.centre)[self.has_prior] / self.widths[self.has_prior]])


def _log_problem(names: Sequence[str], x0: Sequence[float], predict: Callable[[dict[str, float]], np.ndarray],
                 measured_s: Sequence[float], lower: Sequence[float] | None, upper: Sequence[float] | None,
                 prior_sigma: float | Sequence[float | None] | None, data_sigma: float | Sequence[float],
                 robust: bool, prior_centre: Sequence[float] | None,
                 ceiling: Sequence[bool] | None) -> _LogProblem:
    """fit_log_latency's arguments as log-space arrays, one entry per parameter (scalars
    broadcast); ValueError for a latency that is not positive."""
    measured = np.asarray(measured_s, dtype=float)
    if np.any(measured <= 0):
        raise ValueError("measured latencies must be positive")
    names = list(names)
    lo = np.log(lower) if lower is not None else np.full(len(names), -np.inf)
    hi = np.log(upper) if upper is not None else np.full(len(names), np.inf)
    centre = np.log(np.asarray(x0 if prior_centre is None else prior_centre, dtype=float))
    start = np.clip(np.log(np.asarray(x0, dtype=float)), lo + 1e-9, hi - 1e-9)
    hold = np.clip(centre, lo, hi)
    sigma = np.broadcast_to(np.asarray(data_sigma, dtype=float), measured.shape)
    per_parameter = np.broadcast_to(np.asarray(prior_sigma, dtype=object), (len(names),))
    widths = np.array([np.inf if w is None else float(w) for w in per_parameter])
    at_ceiling = np.broadcast_to(np.asarray(False if ceiling is None else ceiling, dtype=bool), (len(names),))
    return _LogProblem(names=names, predict=predict, measured=measured, sigma=sigma, lo=lo, hi=hi, centre=centre,
                       start=start, hold=hold, widths=widths, has_prior=np.isfinite(widths), at_ceiling=at_ceiling,
                       robust=robust)


def _solve(problem: _LogProblem, held: np.ndarray, free: np.ndarray) -> optimize.OptimizeResult:
    """Fit the `free` parameters (trust-region reflective within the bounds, FTOL, at most
    MAX_NFEV evaluations; soft-L1 loss when robust); the others stay where `held` holds them."""
    def partial(xf: np.ndarray) -> np.ndarray:
        x = held.copy()
        x[free] = xf
        return problem.residual(x)

    return optimize.least_squares(partial, problem.start[free], bounds=(problem.lo[free], problem.hi[free]),
                                  method="trf", ftol=FTOL, max_nfev=MAX_NFEV,
                                  x_scale="jac", loss="soft_l1" if problem.robust else "linear", f_scale=2.0)


@dataclass(frozen=True)
class _Round:
    """One round of the fit: every parameter's log value (the free ones fitted) and what the
    Jacobian says about them."""

    x: np.ndarray
    cov: np.ndarray             # _covariance over every parameter (held ones: zero columns)
    se_log: np.ndarray          # 1-sigma of each log value
    dead: np.ndarray            # no data residual moves with it (zero Jacobian column)


def _fit_round(problem: _LogProblem, held: np.ndarray, free: np.ndarray) -> _Round:
    """Solve for the `free` parameters and place the solution among the held ones."""
    sol = _solve(problem, held, free)
    x = held.copy()
    x[free] = sol.x
    jac = np.zeros((len(sol.fun), len(problem.names)))
    jac[:, free] = sol.jac
    cov = _covariance(jac, sol.fun)
    se_log = np.sqrt(np.clip(np.diag(cov), 0, None))
    dead = np.all(np.abs(jac[:problem.n_data]) < 1e-12, axis=0)
    return _Round(x=x, cov=cov, se_log=se_log, dead=dead)


def _partners(cov: np.ndarray, i: int) -> set[int]:
    """The parameters whose estimates correlate with parameter i's beyond PARTNER_CORRELATION
    (|cov_ij| / sqrt(cov_ii cov_jj)): they trade off with it."""
    scale = np.sqrt(np.clip(cov[i, i] * np.diag(cov), 1e-300, None))
    return {j for j in np.flatnonzero(np.abs(cov[i]) / scale > PARTNER_CORRELATION) if j != i}


@dataclass(frozen=True)
class _Verdict:
    """What one round decides about its free parameters."""

    held_back: list[int]        # newly held: at the prior centre, or at a ceiling
    ceiling: list[int]          # of those, the ones held at their upper bound
    reasons: dict[str, str]     # parameter -> why the data could not constrain it, in the order judged


def _judge(problem: _LogProblem, rnd: _Round, held: np.ndarray, free: np.ndarray) -> _Verdict:
    """Which free parameters to hold (fit_log_latency's docstring), the widest first: one run
    into a ceiling is held there; with a prior, one run into a bound, dead, or wider than
    UNCONSTRAINED_SE_LOG is held at its prior centre, but a loose one whose partner this round
    holds is left for the next round to judge. A parameter without a prior is named, not held."""
    x, lo, hi = rnd.x, problem.lo, problem.hi
    held_back: list[int] = []
    ceiling: list[int] = []
    reasons: dict[str, str] = {}
    partners: set[int] = set()   # loose parameters that trade off with one held this round
    for i in sorted(range(len(problem.names)), key=lambda j: -rnd.se_log[j]):     # the widest first
        if not free[i]:
            continue
        nm = problem.names[i]
        kept = f"; the prior {np.exp(held[i]):.3g} is kept" if problem.has_prior[i] else ""
        if problem.at_ceiling[i] and hi[i] - x[i] < AT_BOUND_LOG:
            ceiling.append(i)
            reasons[nm] = f"ran into its upper bound ({np.exp(hi[i]):.3g}), a physical limit: held there"
            held_back.append(i)
            continue
        if x[i] - lo[i] < AT_BOUND_LOG or hi[i] - x[i] < AT_BOUND_LOG:
            reasons[nm] = f"ran into its bound ({np.exp(x[i]):.3g}){kept}"
        elif rnd.dead[i]:
            reasons[nm] = f"the data cannot constrain it (1-sigma beyond a factor e){kept}"
        elif problem.has_prior[i] and not rnd.se_log[i] < UNCONSTRAINED_SE_LOG:
            if i in partners:       # its partner is held: the next round says whether it still is loose
                continue
            reasons[nm] = f"the data cannot constrain it (1-sigma beyond a factor e){kept}"
            partners |= _partners(rnd.cov, i)
        else:
            continue
        if problem.has_prior[i]:
            held_back.append(i)
    return _Verdict(held_back=held_back, ceiling=ceiling, reasons=reasons)


def _model_text(model: str, problem: _LogProblem, prior_sigma: float | Sequence[float | None] | None) -> str:
    """The formula fitted, with the prior's widths and the loss when they apply."""
    width_text = (f"{prior_sigma:g}" if np.isscalar(prior_sigma) else
                  ", ".join(f"{n} {w:g}" for n, w, p in zip(problem.names, problem.widths, problem.has_prior,
                                                            strict=True) if p))
    model_text = (f"{model}; log-normal prior sigma={width_text} around the starting values"
                  if problem.has_prior.any() else model)
    if problem.robust:
        model_text += "; soft-L1 loss (f_scale 2 sigma)"
    return model_text


def _log_fit_result(problem: _LogProblem, name: str, model: str,
                    prior_sigma: float | Sequence[float | None] | None, x: np.ndarray, rnd: _Round,
                    free: np.ndarray, unconstrained: dict[str, str]) -> FitResult:
    """The FitResult at log values `x`: stderr by the delta method (p · se(log p); nan for a dead or
    held parameter) from the last round; residuals and R² of the data only."""
    values = np.exp(x)
    stderr = np.where(rnd.dead | ~free, np.nan, values * rnd.se_log)
    fitted = np.asarray(problem.predict(dict(zip(problem.names, values, strict=True))), dtype=float)
    return FitResult(
        name=name, model=_model_text(model, problem, prior_sigma),
        parameters=dict(zip(problem.names, map(float, values), strict=True)),
        stderr=dict(zip(problem.names, map(float, stderr), strict=True)),
        residuals=tuple(map(float, problem.residual(x)[:problem.n_data] * problem.sigma)),
        residual_space="log(predicted/measured latency)",
        r2=_r2(np.log(problem.measured), np.log(fitted)), n=len(problem.measured), unconstrained=unconstrained,
    )


def fit_log_latency(names: Sequence[str], x0: Sequence[float],
                    predict: Callable[[dict[str, float]], np.ndarray],
                    measured_s: Sequence[float], name: str, model: str,
                    lower: Sequence[float] | None = None, upper: Sequence[float] | None = None,
                    prior_sigma: float | Sequence[float | None] | None = None,
                    data_sigma: float | Sequence[float] = 1.0, robust: bool = False,
                    prior_centre: Sequence[float] | None = None,
                    ceiling: Sequence[bool] | None = None) -> FitResult:
    """Fit positive parameters so that predict(params) matches measured latencies.

    Parameters are optimised as logarithms (so they stay positive); residuals are
    log(predicted/measured), i.e. relative errors, so a 20 µs op and a 20 ms op weigh alike.
    `data_sigma` is each measurement's uncertainty in the same log units (scalar or per
    observation): data residuals are divided by it. With `prior_sigma`, each parameter also gets
    a residual (log p − log c) / prior_sigma: a log-normal prior centred on `prior_centre` c
    (default x0; maximum a posteriori); a sequence gives each parameter its own width, None for
    a parameter without a prior. It keeps parameters the data cannot
    separate near their documented starting values instead of letting them run to a bound,
    and barely moves those the data pin down.
    `robust` uses scipy's soft-L1 loss (quadratic within 2 sigma, linear beyond), so one
    measurement spoiled by a transient slowdown cannot drag every parameter.
    Standard errors come from the Jacobian (delta method: se(p) = p · se(log p)); a parameter
    the data cannot move (zero Jacobian column) gets stderr nan. Residuals and R² are the
    data's only.
    With a prior, a parameter that runs into a bound, or that the data leave unconstrained
    (1-sigma wider than a factor e), is held at its prior centre and the others are fitted again,
    until a round holds none; of loose parameters that trade off (estimates correlated beyond
    PARTNER_CORRELATION) a round holds only the widest: holding both at once moved recorded runs by
    several points for changes that did not touch them (docs/findings/2026-11-27-cpu-fit-bistable.md,
    2026-11-27-cpu-gemm-serial-streams.md).
    `FitResult.unconstrained` names each such parameter with the reason. A parameter marked in
    `ceiling` whose upper bound is a physical limit is held at that bound instead when it runs
    into it: the data want at least the limit, and the prior centre would be the far side.
    """
    problem = _log_problem(names, x0, predict, measured_s, lower, upper, prior_sigma, data_sigma, robust,
                           prior_centre, ceiling)
    held = problem.hold.copy()      # where each parameter the data cannot constrain is held
    free = np.ones(len(problem.names), dtype=bool)
    unconstrained: dict[str, str] = {}
    while True:     # again with each round's unconstrained parameters held (prior or ceiling), until none is new
        rnd = _fit_round(problem, held, free)
        x = rnd.x
        verdict = _judge(problem, rnd, held, free)
        unconstrained.update(verdict.reasons)
        for i in verdict.ceiling:
            held[i] = problem.hi[i]
        if not verdict.held_back:
            break
        free[verdict.held_back] = False
        if not free.any():
            x = held.copy()
            break
    return _log_fit_result(problem, name, model, prior_sigma, x, rnd, free, unconstrained)
