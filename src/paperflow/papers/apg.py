"""apg: "Accelerated Policy Gradient: On the Convergence Rates of the Nesterov Momentum for Reinforcement Learning"
(Yen-Ju Chen, Nai-Chieh Huang, Ching-Pei Lee, Ping-Chun Hsieh), ICML 2024 (arXiv 2310.11897).

What was read. The paper's text past the abstract was not retrievable (corpus `pages`: the title, "Algorithm 1",
"Theorem", "step size", "restart", "locally nearly-concave" return only abstracts and summaries). The authors' code
was read: github.com/NYCU-RL-Bandits-Lab/APG, true-gradient-mdp/train/{APG.py, PG.py, Bellman.py}, mdp_env/*.yaml
and the logged args.yaml of their 5-state 5-action runs (mdp_5s5a_uniform, mdp_5s5a_hard). The abstract gives the
claim: with the true gradient and softmax parametrization APG reaches the optimum at O~(1/t^2) with (nearly)
constant steps, PG at Theta(1/t); "numerical validation ... APG exhibits a O~(1/t^2) rate".

Method (APG, the Nesterov scheme of their code with 1-indexed t; where the code departs from the paper we follow
the paper as the catalog's notes on the code describe it, since the paper's Algorithm 1 itself was not readable):
    theta_t = omega_{t-1} + eta_t grad V(omega_{t-1})                    (gradient step at the look-ahead point)
    phi_t   = theta_t + (t - 1) / (t + 2) (theta_t - theta_{t-1})           (momentum)
    omega_t = phi_t if V(phi_t) >= V(theta_t) else theta_t                (monotone restart)
with the true softmax gradient grad V(theta)[s, a] = d_rho^pi(s) pi(a|s) A^pi(s, a) / (1 - gamma) (Agarwal et al.
2021 Lemma C.1; paperflow.tabular.softmax_policy_gradient) and the "nearly constant" step eta_t = eta t / (t + 1).
Baseline: vanilla softmax PG theta_{t+1} = theta_t + eta grad V(theta_t) at the same eta (the same step-size
budget; same number of iterations; both see true gradients).

Where the authors' code differs, and what we follow:
  * the gradient at omega uses the state visitation of theta (compute_d(pi_t) for both): we use the true gradient
    at omega (the paper's update);
  * the restart compares V(phi_t) with V(theta_{t-1}) (the value computed at the top of the loop, before the step):
    we compare with V(theta_t), the freshly updated iterate (the monotone-restart rule as stated);
  * the step is 0.5 (t+1)/(t+2) eta with eta forced to (1 - gamma)^3 / 8 and 1e8 iterations: we keep the form
    eta t/(t+1) but use a larger shared eta (cfg.eta, the same for PG) and cfg.iters iterations: the theory step
    (1 - gamma)^3/16 = 6e-5 at gamma 0.9 needs ~1e8 iterations to leave the transient, beyond the budget. Both
    methods share eta, so the comparison of rates is unaffected by the constant.
  * time-varying (exponentially growing) steps, the abstract's claim (ii), are not run here (not in the code read).

Settings (each a block of metrics "<env>_..."; the headline reads the random MDPs):
  * rand: random MDPs, S = A = 5, gamma 0.9, Dirichlet(1) transitions, U[0,1) rewards, uniform rho, each seed its own
    MDP (paperflow.tabular.random_mdp), uniform init theta_0 = 0 (the authors' "uniform" init);
  * mdp5: the authors' 5-state 5-action MDP (mdp_5s5a_*.yaml: rewards, transitions, rho (0.3, 0.2, 0.1, 0.15,
    0.25), gamma 0.9) from their uniform init plus a seed's jitter N(0, init_jitter^2) (their init is one point,
    so without jitter every seed is the same run);
  * mdp5_hard: the same MDP from their "hard" init (mdp_5s5a_hard.yaml: the optimal actions start with low
    logits) plus the jitter;
  * bandit: their 3-armed bandit r = (1, 0.99, 0) (bandit_uniform.yaml; gamma 0), uniform init plus jitter.
Sub-optimality gap V*(rho) - V^pi(rho) computed through the performance-difference lemma,
    gap = sum_s w^pi(s) sum_a pi(a|s) (-A*(s, a)),  w^pi = rho^T (I - gamma P_pi)^{-1},
which stays accurate to relative precision down to 1e-300 (V* - V in float64 loses everything below ~1e-15).

Rate fit (FIXED HERE, before any run): log gap against log t by least squares on N_FIT = 40 log-spaced iterations in
the window [FIT_LO * iters, iters] with FIT_LO = 0.1 (the last decade of the run), per seed and setting.
Mechanism gates (measured on the runs): PG's own slope on the same MDPs lies in (-1.25, -0.75) (the baseline's
Theta(1/t) rate holds, so the setting is past PG's transient), and APG's momentum is active: the fraction of
iterations whose restart test kept phi (momentum_frac) is above 0.5.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tabular as T
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

VARIANTS = ("apg", "pg")
SETTINGS = ("rand", "mdp5", "mdp5_hard", "bandit")
FIT_LO = 0.1  # fitting window [FIT_LO * iters, iters]: the run's last decade (fixed before any run)
N_FIT = 40  # log-spaced points in the window
PG_SLOPE_BAND = (-1.25, -0.75)  # mechanism gate: PG's fitted slope inside (its Theta(1/t) rate)
MOMENTUM_ABOVE = 0.5  # mechanism gate: APG kept the momentum point phi in more than half of the iterations

# the authors' 5-state 5-action MDP (true-gradient-mdp/mdp_env/mdp_5s5a_uniform.yaml)
_R5 = [[1.0, 0.8, 0.6, 0.7, 0.4], [0.5, 0.3, 0.1, 1.0, 0.6], [0.6, 0.9, 0.8, 0.7, 1.0], [0.1, 0.2, 0.6, 0.7, 0.4],
       [0.8, 0.4, 0.6, 0.2, 0.9]]
_P5 = [  # [s][a] -> next-state distribution
    [[.1, .5, .1, .2, .1], [.6, .1, .1, .1, .1], [.5, .1, .1, .2, .1], [.4, .3, .1, .1, .1], [.2, .1, .1, .1, .5]],
    [[.1, .5, .2, .1, .1], [.4, .1, .2, .2, .1], [.1, .4, .3, .1, .1], [.4, .1, .1, .1, .3], [.2, .2, .2, .2, .2]],
    [[.6, .1, .1, .1, .1], [.2, .4, .1, .2, .1], [.3, .3, .2, .1, .1], [.1, .4, .3, .1, .1], [.2, .1, .1, .1, .5]],
    [[.6, .1, .1, .1, .1], [.1, .5, .1, .2, .1], [.2, .1, .1, .1, .5], [.4, .3, .1, .1, .1], [.5, .1, .1, .2, .1]],
    [[.2, .2, .2, .2, .2], [.4, .1, .2, .2, .1], [.4, .1, .1, .3, .1], [.1, .4, .2, .1, .2], [.2, .5, .1, .1, .1]],
]
_RHO5 = [0.3, 0.2, 0.1, 0.15, 0.25]
# their "hard" init (mdp_5s5a_hard.yaml initial_theta_dict): the optimal actions start with low logits
_HARD5 = [[1, 2, 4, 3, 5], [3, 4, 5, 1, 2], [5, 2, 3, 4, 1], [5, 4, 2, 1, 3], [2, 4, 3, 5, 1]]
_BANDIT = [1.0, 0.99, 0.0]


@dataclass(frozen=True)
class Config:
    iters: int = 10000  # iterations of every method and setting
    eta: float = 5.0  # shared step size (APG: eta t / (t + 1); PG: eta)
    gamma: float = 0.9  # discount of the random MDPs (the authors' MDP has its own 0.9)
    n_states: int = 5
    n_actions: int = 5
    init_jitter: float = 0.1  # sd of the seed's jitter around the authors' uniform init (mdp5, bandit)

    def __post_init__(self) -> None:
        check(self.iters >= 100, f"apg.iters must be >= 100, got {self.iters}")
        check(self.eta > 0, f"apg.eta must be > 0, got {self.eta}")
        check(0 < self.gamma < 1, f"apg.gamma must lie in (0, 1), got {self.gamma}")
        check(self.n_states >= 1 and self.n_actions >= 2, "apg: n_states >= 1 and n_actions >= 2")
        check(self.init_jitter >= 0, "apg.init_jitter must be >= 0")


# ----------------------------------------------------------------------------------------------- the math
def authors_mdp() -> T.TabularMDP:
    return T.TabularMDP(P=np.array(_P5), R=np.array(_R5), gamma=0.9, rho=np.array(_RHO5))


def optimal_advantage(mdp: T.TabularMDP) -> np.ndarray:
    """A*(s, a) = Q*(s, a) - V*(s) <= 0 (exact policy iteration)."""
    V, _ = T.policy_iteration(mdp)
    A = T.q_values(mdp, V) - V[:, None]
    return np.minimum(A, 0.0)


def suboptimality_gap(mdp: T.TabularMDP, pi: np.ndarray, A_star: np.ndarray) -> float:
    """V*(rho) - V^pi(rho) by the performance-difference lemma (accurate for tiny gaps)."""
    return float(T.state_visitation(mdp, pi) @ (pi * (-A_star)).sum(-1))


def fit_points(iters: int) -> np.ndarray:
    """The iterations (1-indexed) at which the gap is recorded for the slope fit: N_FIT log-spaced points in
    [FIT_LO * iters, iters] (fixed before any run)."""
    return np.unique(np.geomspace(max(1, int(FIT_LO * iters)), iters, N_FIT).astype(int))


def fitted_slope(ts: np.ndarray, gaps: np.ndarray) -> float:
    """Least-squares slope of log gap on log t."""
    gaps = np.maximum(np.asarray(gaps, dtype=np.float64), 1e-300)
    return float(np.polyfit(np.log(ts), np.log(gaps), 1)[0])


def run(mdp: T.TabularMDP, theta0: np.ndarray, eta: float, iters: int, method: str, record=None) -> dict:
    """Run PG or APG for `iters` iterations; returns gaps at `record` iterations (default fit_points), the final
    gap and APG's momentum_frac (share of iterations whose restart test kept phi)."""
    A_star = optimal_advantage(mdp)
    record = fit_points(iters) if record is None else np.asarray(record)
    want = set(int(t) for t in record)
    gaps = {}
    theta = np.array(theta0, dtype=np.float64)
    theta_prev, omega, kept = theta.copy(), theta.copy(), 0
    for t in range(1, iters + 1):
        if method == "pg":
            theta = theta + eta * T.softmax_policy_gradient(mdp, theta)
        elif method == "apg":
            new = omega + eta * t / (t + 1) * T.softmax_policy_gradient(mdp, omega)
            phi = new + (t - 1) / (t + 2) * (new - theta_prev)
            if T.objective(mdp, T.softmax_policy(phi)) >= T.objective(mdp, T.softmax_policy(new)):
                omega, kept = phi, kept + 1
            else:
                omega = new
            theta = theta_prev = new
        else:
            raise ValueError(f"unknown method {method!r}")
        if t in want:
            gaps[t] = suboptimality_gap(mdp, T.softmax_policy(theta), A_star)
    ts = np.array(sorted(gaps))
    g = np.array([gaps[t] for t in ts])
    return {"ts": ts, "gaps": g, "final_gap": float(g[-1]), "momentum_frac": kept / iters if method == "apg" else 0.0}


def setting(cfg: Config, name: str, seed: int) -> tuple[T.TabularMDP, np.ndarray]:
    """(MDP, theta_0) of a setting at a seed."""
    rng = np.random.default_rng([seed, 31, SETTINGS.index(name)])
    if name == "rand":
        mdp = T.random_mdp(rng, cfg.n_states, cfg.n_actions, cfg.gamma)
        return mdp, np.zeros((cfg.n_states, cfg.n_actions))
    mdp = T.bandit_mdp(_BANDIT) if name == "bandit" else authors_mdp()
    base = np.array(_HARD5, dtype=np.float64) if name == "mdp5_hard" else np.zeros(mdp.R.shape)
    return mdp, base + cfg.init_jitter * rng.standard_normal(mdp.R.shape)


# ----------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    """Nothing to prepare: every seed builds its MDPs in train() (no tuning: eta is shared, fixed in params.yaml)."""
    return {"note": "generated MDPs per seed"}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    check(variant in VARIANTS, f"apg: variant must be one of {VARIANTS}, got {variant!r}")
    out: dict[str, float] = {}
    for name in SETTINGS:
        mdp, theta0 = setting(cfg, name, seed)
        r = run(mdp, theta0, cfg.eta, cfg.iters, variant)
        out[f"{name}_slope"] = fitted_slope(r["ts"], r["gaps"])
        out[f"{name}_log10_gap"] = float(np.log10(max(r["final_gap"], 1e-300)))
        out[f"{name}_momentum_frac"] = r["momentum_frac"]
        for t, g in zip(r["ts"][::8], r["gaps"][::8]):
            log(int(t), **{f"{name}_gap": float(g)})
    out["slope"] = out["rand_slope"]
    out["momentum_frac"] = out["rand_momentum_frac"]
    out["grad_evals_per_iter"] = 1.0
    out["value_evals_per_iter"] = 3.0 if variant == "apg" else 1.0  # APG: V(omega) in the gradient, V(phi), V(theta)
    return {"metrics": out}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    return dict(model["metrics"])


def comparisons(cfg: Config) -> list[Comparison]:
    lo, hi = PG_SLOPE_BAND
    where = (f"random {cfg.n_states}x{cfg.n_actions} MDPs (gamma {cfg.gamma:g}, uniform init), shared eta {cfg.eta:g}, "
             f"{cfg.iters} iterations, slope fitted on the last decade [{FIT_LO:g} T, T]")

    def pg_rate(s: str) -> Gate:
        return Gate(f"PG's own fitted slope lies in ({lo:g}, {hi:g}) ({s}: the baseline's Theta(1/t) rate holds)",
                    variant="pg", metric=f"{s}_slope", above=lo, below=hi, kind="mechanism")

    def momentum(s: str) -> Gate:
        return Gate(f"APG's momentum is active ({s}): the restart kept phi in > {MOMENTUM_ABOVE:g} of the iterations",
                    variant="apg", metric=f"{s}_momentum_frac", above=MOMENTUM_ABOVE, kind="mechanism")

    return [
        Comparison("slope", "apg", "", kind="matches", target=-2.0, tolerance=0.25, role="headline",
                   gates=(pg_rate("rand"), momentum("rand")), fidelity="official-code",
                   text=f"APG's sub-optimality gap falls at the O~(1/t^2) rate: fitted log-log slope -2 +- 0.25 ({where})",
                   refuted_if="the 95% interval over seeds of APG's fitted slope lies wholly outside [-2.25, -1.75] "
                              "(e.g. APG no faster than PG's -1, or far faster: a non-polynomial rate)"),
        Comparison("rand_log10_gap", "apg", "pg", better="lower", role="secondary", gates=(pg_rate("rand"),),
                   fidelity="official-code",
                   text="APG reaches a lower final sub-optimality gap than PG at the same eta and iterations (random MDPs)"),
        Comparison("mdp5_slope", "apg", "", kind="matches", target=-2.0, tolerance=0.25, role="secondary",
                   gates=(pg_rate("mdp5"), momentum("mdp5")), fidelity="official-code",
                   text="APG's fitted slope is -2 +- 0.25 on the authors' 5-state 5-action MDP (uniform init + jitter)"),
        Comparison("mdp5_hard_slope", "apg", "", kind="matches", target=-2.0, tolerance=0.25, role="secondary",
                   gates=(pg_rate("mdp5_hard"), momentum("mdp5_hard")), fidelity="official-code",
                   text="APG's fitted slope is -2 +- 0.25 on the authors' 5-state 5-action MDP from their hard init"),
        Comparison("bandit_slope", "apg", "", kind="matches", target=-2.0, tolerance=0.25, role="secondary",
                   gates=(pg_rate("bandit"), momentum("bandit")), fidelity="official-code",
                   text="APG's fitted slope is -2 +- 0.25 on the authors' 3-armed bandit r = (1, 0.99, 0)"),
        Comparison("rand_slope", "pg", "", kind="matches", target=-1.0, tolerance=0.25, role="control",
                   fidelity="official-code",
                   text="control: PG's fitted slope is -1 +- 0.25 on the random MDPs (the Theta(1/t) rate of Mei et al. 2020)"),
        Comparison("value_evals_per_iter", "apg", "pg", role="fact",
                   text="fact: APG evaluates V three times per iteration (gradient at omega, restart test at phi and "
                        "theta), PG once; both take one true gradient per iteration"),
    ]


SPEC = register_paper(PaperSpec(
    id="apg",
    title="Accelerated Policy Gradient: On the Convergence Rates of the Nesterov Momentum for Reinforcement Learning "
          "(Chen, Huang, Lee, Hsieh, ICML 2024)",
    claim="APG's sub-optimality gap slope ~ -2 vs PG ~ -1 (true gradients, softmax)",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    evaluate=evaluate,
    comparisons=comparisons,
    compress=None,
    fidelity="official-code",
    data="generated: random 5x5 MDPs (one per seed), the authors' 5-state 5-action MDP (uniform and hard init) and 3-armed bandit "
         "(from their true-gradient-mdp configs), exact values and true gradients (paperflow.tabular)",
    substitutions="shared step eta = 5 (APG eta t/(t+1)) for 1e4 iterations instead of the theory step (1-gamma)^3/8 "
                  "(their code: half of it) for 1e8 iterations; true gradient at omega (their code uses theta's state "
                  "visitation); restart compares V(phi_t) with V(theta_t) (their code: V(theta_{t-1})); a seed jitters "
                  "the authors' uniform init by N(0, 0.1^2); no time-varying-step runs, no Atari",
    compression="none: tabular softmax parameters of a 5x5 MDP, no trained network weights",
))
