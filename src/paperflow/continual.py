"""Class-incremental continual learning, shared by the continual-learning papers (issue 28: mrfa, masc).

What lives here (no paper's method, only the setting every CL paper of this family needs):
  - task splits: `class_incremental_splits` (classes -> n_tasks contiguous groups), `take_classes`;
  - `class_balanced_split`: per-class train / validation index draw from one labelled pool (a seed fixes it);
  - `ReplayBuffer`: a class-balanced episodic memory with a fixed number of exemplars per class (random
    selection, as ER's "fixed memory per class"), sampled uniformly with replacement; tensors only, so it can sit
    in a saved model/data artifact (`state()` / `ReplayBuffer.from_state`);
  - `run_tasks`: the CL training loop with hooks (before_task, step, after_task, evaluate), returning the
    accuracy matrix R[t, j] = accuracy on task j's classes after training task t;
  - metrics of an accuracy matrix (`cl_metrics`): final average accuracy (mean over tasks of R[T-1, j]), average
    incremental accuracy (mean over t of the mean of R[t, :t+1]; Rebuffi et al. 2017) and average forgetting
    (Chaudhry et al. 2018: f_j = max_{l < T-1} R[l, j] - R[T-1, j], averaged over j < T-1);
  - `random_shift_flip`: the input augmentation of replay baselines (random +-s pixel shift with zero fill and a
    random horizontal flip) on uint8 images.
Images stay uint8 (N, 28, 28) as everywhere in paperflow.data.images.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------- splits


def class_incremental_splits(classes: Sequence[int], n_tasks: int) -> list[tuple[int, ...]]:
    """`classes` in the given order cut into n_tasks contiguous groups of equal size (5 tasks of 2 classes for the
    10 Fashion-MNIST classes). Raises if the classes do not divide evenly."""
    classes = list(classes)
    if n_tasks < 1 or len(classes) % n_tasks:
        raise ValueError(f"class_incremental_splits: {len(classes)} classes do not split into {n_tasks} equal tasks")
    k = len(classes) // n_tasks
    return [tuple(classes[i * k : (i + 1) * k]) for i in range(n_tasks)]


def take_classes(x: torch.Tensor, y: torch.Tensor, classes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples whose label is in `classes`, labels kept (a class-incremental head uses the global label space)."""
    keep = torch.isin(y, torch.as_tensor(list(classes), dtype=y.dtype))
    return x[keep], y[keep]


def class_balanced_split(y: torch.Tensor, classes: Sequence[int], n_first: int, n_second: int,
                         seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per class, n_first then n_second distinct indices of `y` (a seeded permutation per class): e.g. training and
    validation images from one pool. Raises when a class has fewer than n_first + n_second examples."""
    gen = torch.Generator().manual_seed(seed)
    first, second = [], []
    for c in classes:
        idx = torch.nonzero(y == c).flatten()
        if idx.numel() < n_first + n_second:
            raise ValueError(f"class {c} has {idx.numel()} examples, fewer than {n_first} + {n_second}")
        idx = idx[torch.randperm(idx.numel(), generator=gen)]
        first.append(idx[:n_first])
        second.append(idx[n_first : n_first + n_second])
    return torch.cat(first), torch.cat(second)


# ---------------------------------------------------------------------------------------------- replay memory


class ReplayBuffer:
    """Class-balanced episodic memory: `per_class` exemplars of every class added (chosen at random by the caller's
    generator), sampled uniformly with replacement. Holds uint8 images x (M, 28, 28) and labels y (M,)."""

    def __init__(self, per_class: int, x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> None:
        if per_class < 1:
            raise ValueError(f"ReplayBuffer: per_class must be >= 1, got {per_class}")
        self.per_class = per_class
        self.x = x if x is not None else torch.zeros(0, 28, 28, dtype=torch.uint8)
        self.y = y if y is not None else torch.zeros(0, dtype=torch.long)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def classes(self) -> list[int]:
        return sorted(set(self.y.tolist()))

    def add(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> None:
        """Store per_class random exemplars of each class in y (all of a class if it has fewer)."""
        xs, ys = [self.x], [self.y]
        for c in sorted(set(y.tolist())):
            if c in self.classes:
                raise ValueError(f"ReplayBuffer: class {c} is already in memory")
            idx = torch.nonzero(y == c).flatten()
            idx = idx[torch.randperm(idx.numel(), generator=gen)[: self.per_class]]
            xs.append(x[idx])
            ys.append(y[idx])
        self.x, self.y = torch.cat(xs), torch.cat(ys)

    def sample(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """n exemplars drawn uniformly with replacement (empty tensors when the memory is empty)."""
        if len(self) == 0:
            return self.x[:0], self.y[:0]
        idx = torch.randint(0, len(self), (n,), generator=gen)
        return self.x[idx], self.y[idx]

    def state(self) -> dict:
        return {"per_class": self.per_class, "x": self.x, "y": self.y}

    @classmethod
    def from_state(cls, state: dict) -> "ReplayBuffer":
        return cls(int(state["per_class"]), state["x"], state["y"])


# ---------------------------------------------------------------------------------------------- the loop and metrics


def run_tasks(n_tasks: int, steps_per_task: int, step: Callable[[int, int], None],
              evaluate: Callable[[int], Sequence[float]], before_task: Callable[[int], None] | None = None,
              after_task: Callable[[int], None] | None = None) -> np.ndarray:
    """The class-incremental loop: for each task t, before_task(t); step(t, s) for s < steps_per_task;
    after_task(t) (e.g. store exemplars); then evaluate(t) -> accuracies on tasks 0..n_tasks-1 (the entries for
    j > t are kept in the matrix but no metric reads them). Returns R (n_tasks, n_tasks)."""
    R = np.full((n_tasks, n_tasks), np.nan)
    for t in range(n_tasks):
        if before_task is not None:
            before_task(t)
        for s in range(steps_per_task):
            step(t, s)
        if after_task is not None:
            after_task(t)
        acc = list(evaluate(t))
        if len(acc) != n_tasks:
            raise ValueError(f"run_tasks: evaluate returned {len(acc)} accuracies for {n_tasks} tasks")
        R[t] = acc
    return R


def cl_metrics(R: np.ndarray) -> dict[str, float]:
    """From R[t, j] (accuracy on task j after task t; tasks of equal test size):
    final_acc   mean_j R[T-1, j] (accuracy on all classes after the last task);
    avg_inc_acc mean_t mean_{j<=t} R[t, j];
    forgetting  mean_{j<T-1} (max_{l<T-1} R[l, j] - R[T-1, j]) (0 for a single task; max over l >= j only,
                since R[l, j] for l < j is the accuracy before task j was learned)."""
    R = np.asarray(R, dtype=float)
    T = R.shape[0]
    final = float(np.mean(R[T - 1, :T]))
    avg_inc = float(np.mean([np.mean(R[t, : t + 1]) for t in range(T)]))
    if T == 1:
        forget = 0.0
    else:
        forget = float(np.mean([np.max(R[j : T - 1, j]) - R[T - 1, j] for j in range(T - 1)]))
    return {"final_acc": final, "avg_inc_acc": avg_inc, "forgetting": forget}


@torch.no_grad()
def per_class_accuracy(logits: torch.Tensor, y: torch.Tensor, groups: Sequence[Sequence[int]]) -> list[float]:
    """Accuracy in % (argmax over all logits) on the examples whose label is in each group of classes."""
    pred = logits.argmax(1)
    out = []
    for g in groups:
        mask = torch.isin(y, torch.as_tensor(list(g), dtype=y.dtype))
        out.append(100.0 * float((pred[mask] == y[mask]).float().mean()) if mask.any() else float("nan"))
    return out


# ---------------------------------------------------------------------------------------------- augmentation


def random_shift_flip(x: torch.Tensor, shift: int, gen: torch.Generator, flip: bool = True) -> torch.Tensor:
    """uint8 (B, H, W) -> uint8 (B, H, W): each image shifted by a random (dy, dx) in [-shift, shift]^2 (zero fill),
    then flipped left-right with probability 1/2 when `flip`."""
    b, h, w = x.shape
    out = x
    if shift > 0:
        padded = F.pad(x, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        dx = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        rows = (dy[:, None] + torch.arange(h)[None, :])  # (B, H)
        cols = (dx[:, None] + torch.arange(w)[None, :])  # (B, W)
        out = padded[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]
    if flip:
        mask = torch.rand(b, generator=gen) < 0.5
        out = torch.where(mask[:, None, None], out.flip(2), out)
    return out


# ---------------------------------------------------------------------------------------------- the model


class MLP(torch.nn.Module):
    """784 - widths[0] - ... - widths[-1] - n_classes ReLU MLP on standardized 28x28 images, with the hook the
    feature-space methods need: `forward(x, deltas)` adds deltas[l] (B, d_l) to the INPUT of linear layer l
    (l >= 1: the features after the previous layer's ReLU; the pixels, l = 0, are never perturbed), and
    `forward(x, keep_inputs=True)` also returns those layer inputs (for gradients with respect to features)."""

    def __init__(self, widths: Sequence[int], n_classes: int = 10) -> None:
        super().__init__()
        dims = [784, *widths, n_classes]
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    @property
    def feature_layers(self) -> list[int]:
        """Indices of the linear layers whose inputs are features (every layer but the first)."""
        return list(range(1, len(self.layers)))

    def forward(self, x: torch.Tensor, deltas: dict[int, torch.Tensor] | None = None, keep_inputs: bool = False):
        h = x.reshape(x.shape[0], -1)
        inputs = {}
        for i, layer in enumerate(self.layers):
            if i > 0:
                if deltas is not None and i in deltas:
                    h = h + deltas[i]
                if keep_inputs:
                    inputs[i] = h
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.relu(h)
        return (h, inputs) if keep_inputs else h


def mask_unseen(logits: torch.Tensor, seen: Sequence[int]) -> torch.Tensor:
    """Logits with every class outside `seen` set to -inf (a class-incremental head over the classes so far)."""
    mask = torch.full((logits.shape[1],), float("-inf"), dtype=logits.dtype, device=logits.device)
    mask[torch.as_tensor(list(seen), dtype=torch.long)] = 0.0
    return logits + mask
