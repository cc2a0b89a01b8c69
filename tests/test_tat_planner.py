"""tat_planner: the Trajectory Aggregation Tree against hand examples and brute force, the feasibility check, the maze,
and the sampler's pairing of raw with tat's sample 0."""
from __future__ import annotations

import numpy as np
import torch

from paperflow.papers import tat_planner as T


def _majority_brute(trajs: np.ndarray, merge: float, lam: float) -> np.ndarray:
    """Brute force for trajectories that form well-separated clusters (inside a cluster every pair of states at the
    same index is closer than `merge`, across clusters farther than any merge), all sharing s_0 and diverging at
    index 1 and never re-joining: the tree is one branch per cluster, so the plan is the lam-weighted mean of the
    largest cluster (first on ties), with s_0 of the first trajectory."""
    labels = []
    reps: list[np.ndarray] = []
    for tr in trajs:
        for k, r in enumerate(reps):
            if np.abs(tr[1:] - r[1:]).max() < merge / 4:
                labels.append(k)
                break
        else:
            reps.append(tr)
            labels.append(len(reps) - 1)
    labels = np.array(labels)
    counts = np.bincount(labels)
    best = int(np.argmax(counts))
    members = trajs[labels == best]
    plan = members.mean(0)  # equal weights per index: lam^(i-1) is the same for every member at index i
    plan[0] = trajs[0, 0]
    return plan


def test_tree_picks_the_majority_cluster_and_averages_it():
    rng = np.random.default_rng(0)
    h = 6
    base_a = np.stack([np.arange(h, dtype=float), np.zeros(h)], 1)
    base_b = np.stack([np.arange(h, dtype=float), np.full(h, 10.0)], 1)
    base_b[0] = base_a[0]
    trajs = []
    for k in range(7):
        base = base_b if k in (0, 3, 5, 6) else base_a  # 4 in b, 3 in a; trajectory 0 is in b
        tr = base + rng.normal(0, 0.01, base.shape)
        tr[0] = base_a[0]
        trajs.append(tr)
    trajs = np.array(trajs)
    plan, stats = T.tat_plan(trajs, merge=1.0, lam=0.98)
    np.testing.assert_allclose(plan, _majority_brute(trajs, 1.0, 0.98), atol=1e-12)
    assert stats["nodes"] == 2 * (h - 1)  # one branch per cluster


def test_tree_weights_follow_lambda_powers():
    """Hand example: two trajectories share index 1, split at index 2; at index 2 the branch with the larger total
    weight wins; a third trajectory that merges at index 2 into branch B flips the choice."""
    s0 = np.zeros(2)
    a = np.array([s0, [1.0, 0], [2.0, 0], [3.0, 0]])
    b = np.array([s0, [1.0, 0], [2.0, 5], [3.0, 5]])
    plan, _ = T.tat_plan(np.array([a, b]), merge=0.5, lam=0.5)
    np.testing.assert_allclose(plan, a)  # tie at index 2 (weights 0.5 each): the first child
    b2 = b.copy()
    b2[2, 1] = 5.2  # merges into b's node (distance 0.2 < 0.5) with weight lam^(2-1) = 0.5
    plan, _ = T.tat_plan(np.array([a, b, b2]), merge=0.5, lam=0.5)
    # node at index 2 of branch b: states (2, 5) and (2, 5.2), equal weights 0.5 -> mean (2, 5.1)
    np.testing.assert_allclose(plan[2], [2.0, 5.1])
    np.testing.assert_allclose(plan[1], [1.0, 0.0])


def test_node_state_is_the_weighted_mean():
    node = T.Node(np.array([0.0, 0.0]), 1.0)
    node.add(np.array([3.0, 3.0]), 2.0)
    np.testing.assert_allclose(node.state, [2.0, 2.0])
    assert node.value == 3.0


def test_feasibility_check_by_hand():
    wall = np.ones((5, 5), dtype=bool)
    wall[1, 1:4] = False
    wall[2:4, 3] = False  # an L corridor (1,1)-(1,3)-(3,3)
    good = np.array([[1, 1], [1, 2], [1, 3], [2, 3], [3, 3]], dtype=float)
    cut = np.array([[1, 1], [1, 2], [2, 2], [3, 3], [3, 3]], dtype=float)  # through the wall cell (2, 2)
    jump = np.array([[1, 1], [1, 1], [1, 1], [1, 3], [3, 3]], dtype=float)  # segments of length 2
    feas, hit = T.plan_feasibility(np.stack([good, cut, jump]), wall, max_step=1.5, check_points=8)
    assert feas.tolist() == [True, False, False]
    assert hit.tolist() == [False, True, False]


def test_maze_is_connected_and_demos_feasible():
    cfg = T.Config(n_demos=50)
    wall = T.make_maze(cfg.grid, cfg.extra_openings, 0)
    import networkx as nx
    assert nx.is_connected(T.maze_graph(wall))
    demos = T.make_demos(cfg, wall, 1)
    feas, _ = T.plan_feasibility(demos, wall, cfg.max_step, cfg.check_points)
    assert feas.all()


def test_medoid():
    trajs = np.array([np.zeros((3, 2)), np.ones((3, 2)), np.full((3, 2), 10.0)])
    assert T.medoid_index(trajs) == 1


def test_raw_is_tat_sample_zero():
    cfg = T.Config(horizon=8, hidden=16, diffusion_steps=8, sample_steps=8)
    net = T.Denoiser(cfg.horizon, cfg.hidden)
    tasks = torch.tensor([[[0.1, 0.2], [-0.3, 0.4]], [[0.5, -0.5], [0.0, 0.0]]])
    one = T.sample_plans(cfg, net.state_dict(), tasks, 1, 8, seed=3)
    many = T.sample_plans(cfg, net.state_dict(), tasks, 4, 8, seed=3)
    torch.testing.assert_close(one[:, 0], many[:, 0])
    torch.testing.assert_close(many[:, :, 0], tasks[:, None, 0].expand(2, 4, 2).float())  # inpainted start
    torch.testing.assert_close(many[:, :, -1], tasks[:, None, 1].expand(2, 4, 2).float())  # inpainted goal
