"""TAT: "Resisting Stochastic Risks in Diffusion Planners with the Trajectory Aggregation Tree" (Lang Feng, Pengjie Gu,
Bo An, Gang Pan), ICML 2024 (arXiv 2405.17879).

What was read. The paper's abstract and introduction (pages corpus, arXiv HTML; a review page lists the node structure:
X(e) the set of merged trajectory states of a node, V(e) their weights, x(e) the node's state, and the operations
merging, expanding, weight allocation, acting, pruning). The method section itself was not retrievable as a passage,
but the authors' code is public although the catalog says "none found": github.com/langfengQ/tree-diffusion-planner,
branch maze2d: diffuser/tree/tree.py (TrajAggTree, TreeNode), diffuser/guides/policies.py (TATPolicy.tat_call),
scripts/plan_maze2d.py and config/maze2d.py. We followed that code (fidelity "official-code"); our code is written
from scratch. The algorithm as the code states it:
  * each sampled trajectory tau = (s_0, ..., s_{H-1}) is a branch; s_0 (the current, inpainted state) is history and
    is not integrated (history_length = 1);
  * merging: walk from the root; at depth i, the child whose node state is closest to s_i is entered if its distance
    is below the threshold (1 - alpha in the paper); s_i is appended to the node's states X(e) with weight
    w_i = lambda^(i-1) (weight allocation: nearer states weigh more), and the node state becomes the weighted mean
    x(e) = sum_k w_k s_k / sum_k w_k;
  * expanding: from the first state that matches no child, the rest of the trajectory becomes a new chain of nodes;
  * acting: the most impactful child of the root, the one with the largest total weight V(e) = sum_k w_k (visit
    frequency weighted by lambda), is chosen, its node state is the next waypoint, and the tree is pruned to it (the
    chosen child becomes the root); in Maze2D this is repeated H-1 times at t = 0 to give one open-loop plan
    (plan_maze2d.py plans once, "the open-loop plans are good enough for maze2d").
  * the vanilla diffuser baseline samples the same batch and acts on its first sample (Policy.__call__: actions[0]).
Where paper/code and ours differ, and which we followed:
  * distance: the code uses the cosine distance 1 - cos(s, x(e)) between normalised 4-d states (position, velocity),
    threshold 5e-4. Our states are 2-d positions only, for which the cosine distance is degenerate (every point on a
    ray from the maze centre would merge), so we use the Euclidean distance in maze-cell units, threshold `merge`
    tuned on validation tasks (below). lambda = 0.98 (config/maze2d.py).
  * the code's expansion skips a mismatch at the very last state (`if i < length - 1`); we always expand the rest, so
    every branch has depth H-1 (with goal inpainting the last state always merges, so this never changes a plan here).
Our setting (data and substitutions). Maze2D (MuJoCo point mass, D4RL data, a 6M-parameter temporal U-Net, 64-256
diffusion steps, 128 samples) becomes a generated grid maze: a `grid` x `grid` maze carved by a randomised depth-first
search on its odd cells with `extra_openings` walls knocked out (loops, so several shortest paths exist; data_seed).
Expert demonstrations: uniformly random start/goal free cells, one shortest path among all shortest paths (networkx,
chosen at random), the path of cell centres resampled at `horizon` equally spaced points along its arc length, plus
Gaussian noise `demo_noise` (cells) on every interior point. A DDPM over the (horizon, 2) plan, noise
(epsilon) prediction (Diffuser's maze2d config predicts x0, predict_epsilon False; see the development note below), x0
estimates clipped to [-1, 1], cosine noise schedule with `diffusion_steps` steps, an MLP denoiser with a sinusoidal
step embedding; start and goal conditioning by inpainting (Diffuser's apply_conditioning, at training on x_t, whose
inpainted states then carry no noise and get a zero noise target, and after every sampling step). Fewer sampling steps than training steps use
the respaced DDPM posterior (Nichol & Dhariwal 2021): the kept steps' cumulative alphas define the reverse chain.
The denoiser is trained ONCE in prepare() (data_seed), shared by every variant and seed; a seed draws its own
`n_tasks` test start/goal pairs (test_seed, seed) and its own sampling noise. Tuning reads only validation tasks drawn
from tune_seed.
Acting and success. Every variant produces one open-loop plan of `horizon` waypoints from start to goal; the agent
follows it in straight segments. A plan is feasible iff no point of any segment (checked at `check_points` points per
segment) lies in a wall or outside the maze, and no segment is longer than `max_step` cells (a speed limit: a plan that
jumps is not executable). Success = feasible plan (its last waypoint is the inpainted goal, so a feasible plan reaches
the goal). Metrics: success (%), wall_hit (% of plans crossing a wall: the infeasible-plan rate of the paper),
sample_infeasible (% of the N raw samples that are infeasible: the stochastic risk TAT is meant to resist).
Sampling steps, how we count. One denoising step = one forward pass of the denoiser over the whole batch of N samples
(the paper's "sampling steps": Diffuser samples its batch in parallel, and its vanilla policy also draws a batch and
uses sample 0). Equal sampling steps: raw and tat both run `sample_steps` denoising steps; raw acts on sample 0 of the
very same noise draw as tat's N samples, so the rows are paired. Per-sample network evaluations (n_evals = samples x
steps) are reported as facts: tat spends N x as many. Two rows control for that: tat_fast (N samples, `fast_steps`
steps: the paper's "fewer steps" acceleration claim) and tat_eq (`eq_samples` samples x `eq_steps` steps, equal to
raw's per-sample evaluations).
Variants: raw (vanilla diffusion planner, sample 0), tat (TAT over N samples), medoid (isolating ablation: the same N
samples, act on the medoid sample, the one with the least summed L2 distance to the others: consensus without a tree;
if it matches tat, the gain is N samples' agreement, not the tree's per-step aggregation), mean (second ablation: the
per-waypoint mean of the N samples, which is TAT with an infinite merge threshold: if it matches tat, the gain is
averaging, not the tree's branching and most-impactful-branch choice), tat_fast, tat_eq.
Tuning (the same rule for every variant with a knob, fixed here): tat's merge threshold is chosen from `merge_grid` by
success on `n_val_tasks` validation tasks (tune_seed; ties to the smaller threshold); tat_fast and tat_eq reuse it;
raw, medoid and mean have no knob. The denoiser's lr is fixed (shared by all variants, so it cannot favour one).
Mechanism gates (measured on raw's runs, thresholds fixed before any test run): sample_infeasible > 10% (the
raw samples carry the stochastic risk) and mixed_tasks > 10% (% of tasks whose N samples disagree on feasibility:
where every sample fails, or every sample succeeds, no aggregation can change the outcome, so the risk must be
per-sample, not per-task, for TAT to be testable).
Development note (disclosed; before any test_seed draw and before registration): the first setting was a 9x9 maze with
an x0-predicting denoiser (as Diffuser's maze2d config). Its failures were per-task systematic (smooth plans that cut
the same corner in every sample; on 60 development tasks drawn from seeds other than test_seed and tune_seed, 11 tasks
failed in all 16 samples), so TAT and raw differed by 1-2 points and the mixed_tasks premise was weak. Switching to a
7x7 maze and epsilon prediction gave samples whose failures are per-sample artifacts (jitter into walls), the regime the
paper addresses; on development tasks raw then fails often (about 80% of samples), so the default setting is one of low
sample quality (the paper's "tolerance margin for sample quality" regime), stated here, not hidden. The development
runs also evaluated the draws of test_seed 7 (seeds 0-2) while sizing the setting, so test_seed was moved to 20, whose
tasks (test_seed * 1000 + seed) no development run drew. Seen on those development draws (seed 0, 40-100 tasks): raw
18-23% success, tat 32-34%, medoid 22-25%, mean 33-35%, tat_fast 32-35%, tat_eq 27-34%, raw samples 78-80%
infeasible, 65-73% mixed tasks; tat's tuned merge threshold 2.0 (4.0 ties). The mean ablation was added after seeing
that, and 8000 training steps (vs 4000) and a small temporal-conv denoiser were tried and dropped (no better samples
at the budget). A 1-D temporal conv denoiser of Diffuser's kind gave much better samples (22% infeasible) but took
~390 s to train here, over the paper's budget.
Compression: global magnitude pruning of the denoiser's weight matrices (shared compress.magnitude) at `sparsities`,
no fine-tuning; the same plans are re-sampled with the pruned denoiser. Levels 0.1 and 0.3, not the project's usual
0.5/0.8: at 0.5 every variant planned 0% feasible on development tasks (the small denoiser has no slack).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("raw", "tat", "medoid", "mean", "tat_fast", "tat_eq")


@dataclass(frozen=True)
class Config:
    grid: int = 7  # maze side in cells (odd), outer ring walls
    extra_openings: int = 2  # interior walls knocked out after the DFS carve (loops)
    data_seed: int = 0  # maze, demonstrations, denoiser init
    n_demos: int = 3000  # expert trajectories
    horizon: int = 24  # plan length H (waypoints, start and goal included)
    demo_noise: float = 0.1  # Gaussian noise (cells) on interior demo waypoints
    diffusion_steps: int = 32  # T of the training chain
    hidden: int = 256
    train_steps: int = 4000
    batch_size: int = 256
    lr: float = 1e-3
    predict_epsilon: bool = True  # denoiser target: the noise (True) or x0 (Diffuser maze2d: False)
    n_samples: int = 16  # N trajectories per plan (tat, medoid; raw uses sample 0)
    sample_steps: int = 32  # denoising steps of raw / tat / medoid (equal sampling steps)
    fast_steps: int = 8  # tat_fast: N samples, fewer steps
    eq_samples: int = 4  # tat_eq: eq_samples x eq_steps = sample_steps per-sample evaluations
    eq_steps: int = 8
    tree_lambda: float = 0.98  # weight w_i = lambda^(i-1) (config/maze2d.py)
    merge_grid: tuple = (0.25, 0.5, 1.0, 2.0, 4.0)  # Euclidean merge threshold (cells), tuned for tat
    max_step: float = 1.5  # longest executable segment (cells)
    check_points: int = 8  # collision checks per segment
    n_val_tasks: int = 60  # validation start/goal pairs (tune_seed)
    tune_seed: int = 1000
    n_tasks: int = 80  # test start/goal pairs per seed (test_seed, seed)
    test_seed: int = 20  # fresh: development runs read test_seed 7's draws (see the module docstring)
    sparsities: tuple = (0.1, 0.3)  # the MLP denoiser fails at 0.5 without fine-tuning (every variant 0% on dev tasks)
    compare_level: float = 0.1
    log_every: int = 100

    def __post_init__(self) -> None:
        for name in ("merge_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.grid >= 5 and self.grid % 2 == 1, f"grid must be odd and >= 5, got {self.grid}")
        check(self.extra_openings >= 0, "extra_openings must be >= 0")
        check(self.n_demos > 0 and self.horizon >= 4, "n_demos > 0 and horizon >= 4")
        check(self.demo_noise >= 0, "demo_noise must be >= 0")
        check(self.diffusion_steps >= 2 and self.hidden > 0 and self.train_steps > 0 and self.batch_size > 1, "sizes must be > 0")
        check(self.lr > 0, "lr must be > 0")
        check(self.n_samples >= 2 and 1 <= self.sample_steps <= self.diffusion_steps, "n_samples >= 2 and 1 <= sample_steps <= diffusion_steps")
        check(1 <= self.fast_steps <= self.diffusion_steps and 1 <= self.eq_steps <= self.diffusion_steps, "fast_steps, eq_steps in 1..diffusion_steps")
        check(2 <= self.eq_samples <= self.n_samples, "2 <= eq_samples <= n_samples")
        check(0 < self.tree_lambda <= 1, "tree_lambda in (0, 1]")
        check(len(self.merge_grid) >= 1 and all(m > 0 for m in self.merge_grid) and list(self.merge_grid) == sorted(self.merge_grid),
              f"merge_grid must be positive and ascending, got {self.merge_grid}")
        check(self.max_step > 0 and self.check_points >= 1, "max_step > 0 and check_points >= 1")
        check(self.n_val_tasks > 0 and self.n_tasks > 0, "n_val_tasks and n_tasks must be > 0")
        check(self.test_seed != self.tune_seed, "test_seed must differ from tune_seed")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities,
              f"sparsities in [0, 1) and compare_level among them, got {self.sparsities}, {self.compare_level}")
        check(self.log_every > 0, "log_every must be > 0")


# ---------------------------------------------------------------------------------------------- maze and demos
def make_maze(grid: int, extra_openings: int, seed: int) -> np.ndarray:
    """(grid, grid) bool, True = wall: randomised depth-first carve over the odd cells, then `extra_openings` interior
    walls between two free cells (horizontally or vertically) knocked out."""
    rng = np.random.default_rng(seed)
    wall = np.ones((grid, grid), dtype=bool)
    start = (1, 1)
    wall[start] = False
    stack, seen = [start], {start}
    while stack:
        r, c = stack[-1]
        nbrs = [(r + dr, c + dc) for dr, dc in ((2, 0), (-2, 0), (0, 2), (0, -2))
                if 0 < r + dr < grid - 1 and 0 < c + dc < grid - 1 and (r + dr, c + dc) not in seen]
        if not nbrs:
            stack.pop()
            continue
        nr, nc = nbrs[rng.integers(len(nbrs))]
        wall[(r + nr) // 2, (c + nc) // 2] = False
        wall[nr, nc] = False
        seen.add((nr, nc))
        stack.append((nr, nc))
    cand = [(r, c) for r in range(1, grid - 1) for c in range(1, grid - 1) if wall[r, c] and
            ((not wall[r - 1, c] and not wall[r + 1, c]) or (not wall[r, c - 1] and not wall[r, c + 1]))]
    for k in rng.permutation(len(cand))[:extra_openings]:
        wall[cand[k]] = False
    return wall


def maze_graph(wall: np.ndarray):
    import networkx as nx
    g = nx.Graph()
    free = [tuple(int(v) for v in p) for p in np.argwhere(~wall)]
    g.add_nodes_from(free)
    for r, c in free:
        for q in ((r + 1, c), (r, c + 1)):
            if q in g:
                g.add_edge((r, c), q)
    return g


def resample_path(cells: np.ndarray, horizon: int) -> np.ndarray:
    """The polyline through the cell centres `cells` (L, 2) at `horizon` points equally spaced in arc length."""
    if len(cells) == 1:
        return np.repeat(cells.astype(float), horizon, axis=0)
    seg = np.linalg.norm(np.diff(cells, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    t = np.linspace(0.0, s[-1], horizon)
    return np.stack([np.interp(t, s, cells[:, d]) for d in range(2)], axis=1)


def draw_tasks(wall: np.ndarray, n: int, seed: int) -> np.ndarray:
    """(n, 2, 2): start and goal free cells (distinct), uniformly at random."""
    rng = np.random.default_rng(seed)
    free = np.argwhere(~wall)
    out = np.zeros((n, 2, 2))
    for k in range(n):
        i, j = rng.choice(len(free), size=2, replace=False)
        out[k] = free[[i, j]]
    return out


def make_demos(cfg: Config, wall: np.ndarray, seed: int) -> np.ndarray:
    """(n_demos, horizon, 2) expert plans in cell units: a random shortest path between random free cells, resampled,
    interior points jittered by demo_noise."""
    import networkx as nx
    g = maze_graph(wall)
    rng = np.random.default_rng(seed)
    tasks = draw_tasks(wall, cfg.n_demos, seed + 1)
    out = np.zeros((cfg.n_demos, cfg.horizon, 2))
    for k, (s, e) in enumerate(tasks):
        paths = list(nx.all_shortest_paths(g, tuple(int(v) for v in s), tuple(int(v) for v in e)))
        path = np.array(paths[rng.integers(len(paths))], dtype=float)
        plan = resample_path(path, cfg.horizon)
        plan[1:-1] += rng.normal(0.0, cfg.demo_noise, size=plan[1:-1].shape)
        out[k] = plan
    return out


def plan_feasibility(plans: np.ndarray, wall: np.ndarray, max_step: float, check_points: int) -> tuple[np.ndarray, np.ndarray]:
    """plans (..., H, 2) in cell units -> (feasible, wall_hit) bool arrays (...): wall_hit if a point of a segment
    (check_points per segment, both ends included) lies in a wall cell or outside the maze; feasible if no wall hit
    and every segment is at most max_step long."""
    a, b = plans[..., :-1, None, :], plans[..., 1:, None, :]
    u = np.linspace(0.0, 1.0, check_points + 1)[:, None]
    pts = a + (b - a) * u  # (..., H-1, P, 2)
    cells = np.floor(pts + 0.5).astype(int)
    g = wall.shape[0]
    inside = (cells >= 0).all(-1) & (cells < g).all(-1)
    cl = np.clip(cells, 0, g - 1)
    hit = ~inside | wall[cl[..., 0], cl[..., 1]]
    wall_hit = hit.reshape(*hit.shape[:-2], -1).any(-1)
    step = np.linalg.norm(np.diff(plans, axis=-2), axis=-1).max(-1)
    return ~wall_hit & (step <= max_step), wall_hit


# ---------------------------------------------------------------------------------------------- diffusion model
def to_norm(x, grid: int):
    h = (grid - 1) / 2
    return (x - h) / h


def from_norm(z, grid: int):
    h = (grid - 1) / 2
    return z * h + h


def cosine_alpha_bar(steps: int, s: float = 0.008) -> torch.Tensor:
    """abar_t, t = 1..T (Nichol & Dhariwal 2021), betas clipped at 0.999."""
    f = lambda t: math.cos((t / steps + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    betas = [min(1 - f(t + 1) / f(t), 0.999) for t in range(steps)]
    return torch.cumprod(1 - torch.tensor(betas, dtype=torch.float64), 0)


class Denoiser(nn.Module):
    """MLP denoiser (epsilon or x0 prediction) over the flattened plan with a sinusoidal step embedding."""

    def __init__(self, horizon: int, hidden: int, emb: int = 64) -> None:
        super().__init__()
        self.emb = emb
        d = horizon * 2
        self.net = nn.Sequential(nn.Linear(d + emb, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, d))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        half = self.emb // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32) / half)
        ang = t.float()[:, None] * freqs[None]
        e = torch.cat([ang.sin(), ang.cos()], 1)
        return self.net(torch.cat([x.flatten(1), e], 1)).view_as(x)


def condition(x: torch.Tensor, start: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """Inpainting (Diffuser's apply_conditioning): the first state is the start, the last the goal."""
    x = x.clone()
    x[:, 0], x[:, -1] = start, goal
    return x


def train_denoiser(cfg: Config, demos_norm: torch.Tensor, seed: int, log=None) -> dict:
    torch.manual_seed(seed)
    net = Denoiser(cfg.horizon, cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 * (1 + math.cos(math.pi * min(1.0, k / cfg.train_steps))))
    abar = cosine_alpha_bar(cfg.diffusion_steps).float()
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(cfg.train_steps):
        idx = torch.randint(0, demos_norm.shape[0], (cfg.batch_size,), generator=gen)
        x0 = demos_norm[idx]
        t = torch.randint(0, cfg.diffusion_steps, (cfg.batch_size,), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        a = abar[t][:, None, None]
        xt = condition(a.sqrt() * x0 + (1 - a).sqrt() * noise, x0[:, 0], x0[:, -1])
        noise[:, 0], noise[:, -1] = 0.0, 0.0  # inpainted states are noise-free in x_t: their implied noise is 0
        loss = F.mse_loss(net(xt, t), noise if cfg.predict_epsilon else x0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if log is not None and (step + 1) % cfg.log_every == 0:
            log(step + 1, loss=float(np.mean(losses[-cfg.log_every:])))
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "final_loss": float(np.mean(losses[-50:]))}


@torch.no_grad()
def sample_plans(cfg: Config, state: dict, tasks_norm: torch.Tensor, n: int, steps: int, seed: int) -> torch.Tensor:
    """(M, n, H, 2) normalised plans for M tasks (start, goal) by the respaced DDPM reverse chain over `steps` of the
    T training steps (evenly spaced, always ending at t = 0), x0 clipped to [-1, 1], inpainting after every step.
    The noise of sample k of every task is the same whatever n is (sample k's generator is seeded by (seed, k)), so
    raw (n = 1) acts on exactly tat's sample 0."""
    net = Denoiser(cfg.horizon, cfg.hidden)
    net.load_state_dict(state)
    net.eval()
    m = tasks_norm.shape[0]
    abar_all = cosine_alpha_bar(cfg.diffusion_steps)
    ts = np.unique(np.round(np.linspace(0, cfg.diffusion_steps - 1, steps)).astype(int))[::-1].copy()
    gens = [torch.Generator().manual_seed(seed * 100003 + k) for k in range(n)]
    draw = lambda: torch.stack([torch.randn(m, cfg.horizon, 2, generator=g) for g in gens], 1)  # noqa: E731
    start = tasks_norm[:, None, 0].expand(m, n, 2).reshape(m * n, 2).float()
    goal = tasks_norm[:, None, 1].expand(m, n, 2).reshape(m * n, 2).float()
    x = condition(draw().reshape(m * n, cfg.horizon, 2), start, goal)
    for i, t in enumerate(ts):
        a_t = float(abar_all[t])
        a_prev = float(abar_all[ts[i + 1]]) if i + 1 < len(ts) else 1.0
        out = net(x, torch.full((m * n,), int(t)))
        x0 = ((x - math.sqrt(1 - a_t) * out) / math.sqrt(a_t) if cfg.predict_epsilon else out).clamp(-1, 1)
        beta = 1 - a_t / a_prev
        mean = (math.sqrt(a_prev) * beta / (1 - a_t)) * x0 + (math.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t)) * x
        noise = draw().reshape(m * n, cfg.horizon, 2)
        var = beta * (1 - a_prev) / (1 - a_t)
        x = condition(mean + math.sqrt(max(var, 0.0)) * noise if i + 1 < len(ts) else x0, start, goal)
    return x.view(m, n, cfg.horizon, 2)


# ---------------------------------------------------------------------------------------------- the tree
class Node:
    __slots__ = ("children", "wsum", "count", "state", "value")

    def __init__(self, s: np.ndarray, w: float) -> None:
        self.children: list[Node] = []
        self.wsum = np.asarray(s, dtype=float) * w  # sum_k w_k s_k over X(e)
        self.count = 1  # |X(e)|
        self.state, self.value = np.asarray(s, dtype=float).copy(), float(w)

    def add(self, s: np.ndarray, w: float) -> None:
        """Merging: X(e) += s with weight w; x(e) = weighted mean sum w_k s_k / sum w_k, V(e) = sum w_k."""
        self.wsum = self.wsum + w * np.asarray(s, dtype=float)
        self.count += 1
        self.value += w
        self.state = self.wsum / self.value


def tat_plan(trajs: np.ndarray, merge: float, lam: float, history: int = 1) -> tuple[np.ndarray, dict]:
    """Trajectory Aggregation Tree over trajs (N, H, d) -> (open-loop plan (H, d), stats).

    Each trajectory is integrated from index `history` on: descend while the nearest child's node state is within
    `merge` (Euclidean) of s_i, merging s_i into it with weight lam^(i-1); expand the rest as a new branch. Acting: H-1
    times, step to the child of largest total weight V(e) and prune to it; the plan is s_0 of the first trajectory
    followed by the chosen node states. stats: nodes, mean branching of the root's children over the acting steps."""
    n, h, _ = trajs.shape
    root = Node(trajs[0, 0], 1.0)
    nodes = 0
    for tr in trajs:
        node, i = root, history
        while i < h and node.children:
            d = [float(np.linalg.norm(tr[i] - c.state)) for c in node.children]
            k = int(np.argmin(d))
            if d[k] >= merge:
                break
            node = node.children[k]
            node.add(tr[i], lam ** (i - 1))
            i += 1
        for j in range(i, h):  # expanding
            child = Node(tr[j], lam ** (j - 1))
            node.children.append(child)
            node = child
            nodes += 1
    plan, branching = [trajs[0, 0]], []
    node = root
    for _ in range(h - 1):
        branching.append(len(node.children))
        node = max(node.children, key=lambda c: c.value)  # most impactful child; ties: first
        plan.append(node.state)
    return np.array(plan), {"nodes": nodes, "branching": float(np.mean(branching))}


def medoid_index(trajs: np.ndarray) -> int:
    """The sample with the least summed L2 distance (flattened plans) to the others (ties: first)."""
    flat = trajs.reshape(trajs.shape[0], -1)
    d = np.linalg.norm(flat[:, None] - flat[None], axis=-1).sum(1)
    return int(np.argmin(d))


# ---------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    """Maze, demonstrations, the denoiser (trained once, data_seed), validation tasks (tune_seed) and tat's merge
    threshold tuned on them."""
    wall = make_maze(cfg.grid, cfg.extra_openings, cfg.data_seed)
    demos = make_demos(cfg, wall, cfg.data_seed + 1)
    feas, _ = plan_feasibility(demos, wall, cfg.max_step, cfg.check_points)
    demos_norm = torch.tensor(to_norm(demos, cfg.grid), dtype=torch.float32)
    den = train_denoiser(cfg, demos_norm, cfg.data_seed + 2)
    data = {"wall": torch.tensor(wall), "denoiser": den["state"], "train_loss": den["final_loss"],
            "demo_feasible": float(feas.mean() * 100)}
    val = draw_tasks(wall, cfg.n_val_tasks, cfg.tune_seed)
    data["tuning"] = tune_merge(cfg, data, val)
    return data


def tune_merge(cfg: Config, data: dict, val_tasks: np.ndarray) -> dict:
    """tat's merge threshold: success (%) on the validation tasks, each threshold over the same N samples per task
    (tune_seed); best kept, ties to the smaller threshold."""
    wall = data["wall"].numpy()
    plans = from_norm(sample_plans(cfg, data["denoiser"], torch.tensor(to_norm(val_tasks, cfg.grid)), cfg.n_samples,
                                   cfg.sample_steps, cfg.tune_seed).numpy(), cfg.grid)

    def fit(merge):
        out = np.array([tat_plan(p, merge, cfg.tree_lambda)[0] for p in plans])
        feas, _ = plan_feasibility(out, wall, cfg.max_step, cfg.check_points)
        return None, float(feas.mean() * 100)

    _, info = tune(list(cfg.merge_grid), fit, higher=True, name="merge")
    return info


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """No per-variant training: TAT is training-free; every variant acts with the denoiser trained in prepare()."""
    if variant not in VARIANTS:
        raise ValueError(f"tat_planner: unknown variant {variant!r}; known: {VARIANTS}")
    tuning = {"tuned_merge": float(data["tuning"]["tuned_merge"])}
    if variant.startswith("tat"):
        tuning["grid_edge"] = float(data["tuning"]["grid_edge"])
    return {"variant": variant, "seed": int(seed), "state": data["denoiser"], "tuning": tuning}


def variant_budget(cfg: Config, variant: str) -> tuple[int, int]:
    """(samples, denoising steps) a variant draws."""
    return {"raw": (1, cfg.sample_steps), "tat": (cfg.n_samples, cfg.sample_steps), "medoid": (cfg.n_samples, cfg.sample_steps),
            "mean": (cfg.n_samples, cfg.sample_steps),
            "tat_fast": (cfg.n_samples, cfg.fast_steps), "tat_eq": (cfg.eq_samples, cfg.eq_steps)}[variant]


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Plans for the seed's test tasks (test_seed, seed): success, wall_hit (%); sample_infeasible (% of the N raw
    samples at sample_steps that are infeasible; drawn for every variant, the same draw as raw/tat/medoid's)."""
    wall = data["wall"].numpy()
    variant, seed = model["variant"], model["seed"]
    tasks = draw_tasks(wall, cfg.n_tasks, cfg.test_seed * 1000 + seed)
    tn = torch.tensor(to_norm(tasks, cfg.grid))
    sseed = cfg.test_seed * 1000 + seed
    full = from_norm(sample_plans(cfg, model["state"], tn, cfg.n_samples, cfg.sample_steps, sseed).numpy(), cfg.grid)
    s_feas, _ = plan_feasibility(full, wall, cfg.max_step, cfg.check_points)
    n, steps = variant_budget(cfg, variant)
    if (n, steps) == (cfg.n_samples, cfg.sample_steps) or variant == "raw":
        samples = full[:, :n]
    else:
        samples = from_norm(sample_plans(cfg, model["state"], tn, n, steps, sseed).numpy(), cfg.grid)
    merge = model["tuning"]["tuned_merge"]
    out = {}
    if variant == "raw" or n == 1:
        plans = samples[:, 0]
    elif variant == "medoid":
        plans = np.array([p[medoid_index(p)] for p in samples])
    elif variant == "mean":
        plans = samples.mean(1)  # per-waypoint mean; start and goal are inpainted, so exact
    else:
        res = [tat_plan(p, merge, cfg.tree_lambda) for p in samples]
        plans = np.array([r[0] for r in res])
        out["tree_nodes"] = float(np.mean([r[1]["nodes"] for r in res]))
        out["tree_branching"] = float(np.mean([r[1]["branching"] for r in res]))
    feas, hit = plan_feasibility(plans, wall, cfg.max_step, cfg.check_points)
    out.update({"success": float(feas.mean() * 100), "wall_hit": float(hit.mean() * 100),
                "sample_infeasible": float((~s_feas).mean() * 100),
                "mixed_tasks": float((s_feas.any(1) & ~s_feas.all(1)).mean() * 100),
                "n_evals": float(n * steps), "denoise_steps": float(steps),
                "n_params": float(count_params(model["state"])), "demo_feasible": float(data["demo_feasible"])})
    out.update(model.get("tuning", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the denoiser's weight matrices at each level (no fine-tuning)."""
    return magnitude_models(model, cfg.sparsities)


def comparisons(cfg: Config) -> list[Comparison]:
    risk = Gate("raw diffusion samples are infeasible at a measured rate above 10% (the stochastic risk TAT resists)",
                variant="raw", metric="sample_infeasible", above=10.0, kind="mechanism")
    mixed = Gate("the risk is stochastic: in more than 10% of tasks the N samples disagree (some feasible, some not), "
                 "the only tasks where aggregating samples can change the outcome",
                 variant="raw", metric="mixed_tasks", above=10.0, kind="mechanism")
    edge = edge_gate("tat", "tuned merge threshold", "merge_grid")
    level = level_name(cfg.compare_level)
    return [
        Comparison("success", "tat", "raw", better="higher", role="headline", gates=(risk, mixed, edge),
                   text=f"TAT over {cfg.n_samples} samples has a higher success rate than acting on one raw sample, at equal "
                        f"sampling steps ({cfg.sample_steps} denoising steps each)",
                   refuted_if="tat's success rate is lower than raw's (paired 95% interval over seeds below 0) with the "
                              "mechanism gate passing"),
        Comparison("wall_hit", "tat", "raw", better="lower", role="secondary", gates=(risk,),
                   text="TAT's plans cross walls less often than one raw sample's (infeasible-plan rate)"),
        Comparison("success", "tat", "medoid", better="higher", role="secondary", gates=(risk, edge),
                   text="ablation: TAT beats acting on the medoid of the same N samples (consensus without the tree)"),
        Comparison("success", "tat", "mean", better="higher", role="secondary", gates=(risk, edge),
                   text="ablation: TAT beats the per-waypoint mean of the same N samples (the tree with an infinite merge "
                        "threshold: averaging without branching)"),
        Comparison("success", "tat_fast", "raw", better="higher", role="secondary", gates=(risk,),
                   text=f"fewer steps: TAT with {cfg.fast_steps} denoising steps beats one raw sample with {cfg.sample_steps}"),
        Comparison("success", "tat_eq", "raw", better="higher", role="secondary", gates=(risk,),
                   text=f"equal per-sample network evaluations: TAT over {cfg.eq_samples} samples x {cfg.eq_steps} steps vs one "
                        f"raw sample x {cfg.sample_steps} steps"),
        Comparison("success", "medoid", "raw", better="higher", role="control", gates=(risk,),
                   text="diagnostic: the medoid of N samples beats one raw sample"),
        Comparison("success", "tat", "raw", better="higher", stage="compressed", level=level, role="control",
                   text=f"TAT keeps its gain over a raw sample with the denoiser pruned to {level}"),
        Comparison("n_evals", "tat", "raw", role="fact",
                   text="per-sample denoiser evaluations per plan (samples x steps): TAT spends N times raw's"),
    ]


SPEC = register_paper(PaperSpec(
    id="tat_planner",
    title="Resisting Stochastic Risks in Diffusion Planners with the Trajectory Aggregation Tree",
    claim="TAT gives higher success than acting on one raw sample, with fewer steps",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="official-code",
    data="generated 7x7 grid maze (randomised DFS carve plus knocked-out walls, data_seed); expert plans = random "
         "shortest paths (networkx) between random free cells, resampled to 24 waypoints with Gaussian jitter; test "
         "start/goal pairs per seed from test_seed, validation pairs from tune_seed",
    substitutions="Paper: Maze2D (MuJoCo point mass, D4RL data), pretrained Diffuser temporal U-Net, 64-256 diffusion "
                  "steps, 128 samples, cosine merge distance on 4-d states. Here: a generated grid maze with 2-d "
                  "positions, a small MLP epsilon-prediction DDPM (T=32) trained here once in prepare(), 16 samples, Euclidean "
                  "merge distance (tuned), open-loop execution with a wall/step-length feasibility check instead of a "
                  "simulated controller",
    compression="global magnitude pruning of the denoiser's weight matrices (shared compress.magnitude) at each level, no "
                "fine-tuning; plans re-sampled with the pruned denoiser",
    figure="sparsity", weight=1,
))
