"""MRFA: "Multi-layer Rehearsal Feature Augmentation for Class-Incremental Learning" (Bowen Zheng, Da-Wei Zhou, Han-Jia
Ye, De-Chuan Zhan), ICML 2024.

What was read. The paper's text beyond its abstract was not retrievable (pages corpus: the ICML poster page and
abstract only, for the title, "all-layer margin", "gradient ascent", "perturbation" queries). The code corpus holds a
class `MRFA` with forward pre-hooks on the stages of a PyCIL ResNet (stage_1..3 and the fc input; a PyCIL layout,
the authors' group's library) and several copies/ports of it (an Avalanche plugin, trainers that call it); its
authorship could not be confirmed, so fidelity is "reconstruction", following that code where the abstract is silent:
  1. for the rehearsal (replay) samples of a batch, one extra forward/backward with the current model, unperturbed,
     gives g_l = dL/dh_l, the gradient of the cross-entropy with respect to the INPUT h_l of every hooked layer l
     (the abstract: "augments the features of rehearsal samples at each layer by gradient ascent step of the current
     model with respect to the feature");
  2. every rehearsal sample draws one layer l uniformly among the hooked layers and a factor beta_hat = p_l * u,
     u ~ U(0, 1) (the code's `perturb_p[layer] * np.random.rand()`);
  3. in the training forward that layer's input becomes h_l + beta_hat ||h_l||^2 g_l (the code's `with_input_norm`:
     the squared norm of the sample's own feature; ||delta|| / ||h_l|| = beta_hat ||h_l|| ||g_l|| is invariant to a
     rescaling of h_l, as the all-layer margin of Wei & Ma 2019 that the paper optimises is); the update is the usual
     cross-entropy on the new-task samples and the perturbed rehearsal samples together.
  Differences, chosen here: one p for every layer (p_l = beta, the knob we tune; the code keeps a per-layer vector of
  unknown values); g_l from the per-sample loss (sum reduction; the code's batch mean only rescales beta); every
  sample is perturbed at one layer per step, so over the steps every layer is augmented (the brief's "every layer"):
  perturbing all layers at once with gradients of the clean pass is not what the code does.
Setting (the catalog's): class-incremental Fashion-MNIST, 5 tasks of 2 classes (order 0..9), a single head over the
classes seen so far (masked logits), a small class-balanced replay memory (mem_per_class exemplars per old class, random
selection), each step = batch_size new-task images + replay_batch memory images (from task 2 on), Adam.
Variants (the same memory, steps, batches and model; paperflow.continual holds the loop, memory and metrics):
  er         experience replay (Chaudhry et al. 2019 / Rolnick et al.), plain;
  er_aug     ER with input augmentation of the replay images (random +-shift px translation + horizontal flip);
  mrfa       ER + MRFA on the replay images (above);
  mrfa_rand  ablation: the same per-sample layer, factor and perturbation NORM as mrfa, random Gaussian direction
             instead of the gradient-ascent direction (is it the adversarial direction or any feature noise?).
Metrics (paperflow.continual.cl_metrics, test images of each task after each task): final_acc (headline: accuracy over
all 10 classes after the 5th task), avg_inc_acc, forgetting; the memory-overfitting mechanism (evaluate(), final
model): memory_loss = mean cross-entropy on the memory exemplars of the old classes (tasks 1-4), heldout_old_loss = on
held-out validation images of those classes, memory_gap = their difference (nats).
Equal tuning (fixed in code before any run; paperflow.tuning, best validation final_acc, ties to the smaller value):
once in prepare() at tune_seed on the validation images (training split), never the test images: er picks its Adam
lr from lr_grid; er_aug, mrfa and mrfa_rand each pick their own knob (shift from shift_grid, beta from beta_grid,
beta from beta_grid) at er's lr: every variant gets one grid of the same size. grid_edge is recorded per variant.
beta_grid spans three decades (0.03 ... 30) because the scale ||h_l|| ||g_l|| that beta multiplies ranged from ~0.005
(median, well-fit samples) to ~1 (mean, driven by the misfit ones) at every hooked layer of a probe MLP trained on 4
classes of the training split (no continual run, no validation or test score seen when the grid was set).
Data: Fashion-MNIST training split, per class n_train training + n_val validation images (data_seed); test: per class
n_test images of the official test split drawn with test_seed (read by no tuning step). A seed varies the init, the
batch order, the memory's exemplars and MRFA's random layers/factors.
Compression: global magnitude pruning of the final MLP's weight matrices (no fine-tuning), final_acc recomputed.
Substitutions: CIFAR-100 / ImageNet-100 with ResNet-32/18 and 2000 exemplars -> Fashion-MNIST 28x28, 3-hidden-layer MLP
(hooked: the inputs of hidden layers 2-3 and of the classifier), 20 exemplars per class, a few hundred Adam steps per
task; the method's per-layer factors replaced by one tuned beta.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..continual import (MLP, ReplayBuffer, class_balanced_split, class_incremental_splits, cl_metrics, mask_unseen,
                         per_class_accuracy, random_shift_flip, run_tasks)
from ..data.images import load_fashion, to_float
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("er", "er_aug", "mrfa", "mrfa_rand")
KNOB = {"er": "lr", "er_aug": "shift", "mrfa": "beta", "mrfa_rand": "beta"}
GAP_ABOVE = 0.5  # mechanism gate: ER's held-out old-class loss exceeds its memory loss by > 0.5 nats (fixed before any run)


@dataclass(frozen=True)
class Config:
    n_tasks: int = 5
    class_order: tuple = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
    n_train: int = 1200  # training images per class (Fashion-MNIST training split)
    n_val: int = 300  # validation images per class (same split, disjoint; tuning + the held-out loss)
    n_test: int = 500  # test images per class (official test split, test_seed)
    data_seed: int = 0
    test_seed: int = 1
    widths: tuple = (128, 128, 128)
    mem_per_class: int = 20
    steps_per_task: int = 200
    batch_size: int = 32
    replay_batch: int = 32
    lr_grid: tuple = (1e-4, 3e-4, 1e-3, 3e-3)
    shift_grid: tuple = (1, 2, 3, 4)
    beta_grid: tuple = (0.03, 0.3, 3.0, 30.0)
    tune_seed: int = 1000
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    eval_batch: int = 2500
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("class_order", "widths", "lr_grid", "shift_grid", "beta_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(sorted(self.class_order) == list(range(10)), f"class_order must be a permutation of 0..9, got {self.class_order}")
        check(self.n_tasks >= 2 and 10 % self.n_tasks == 0, f"n_tasks must divide 10 and be >= 2, got {self.n_tasks}")
        check(self.n_train > 0 and self.n_val > 0 and self.n_test > 0, "n_train, n_val, n_test must be > 0")
        check(self.n_train + self.n_val <= 6000 and self.n_test <= 1000, "per class: n_train + n_val <= 6000, n_test <= 1000")
        check(len(self.widths) >= 1 and all(w > 0 for w in self.widths), f"widths must be positive, got {self.widths}")
        check(0 < self.mem_per_class <= self.n_train, "0 < mem_per_class <= n_train")
        check(self.steps_per_task > 0 and self.batch_size > 0 and self.replay_batch > 0, "steps and batches must be > 0")
        for name in ("lr_grid", "shift_grid", "beta_grid"):
            grid = getattr(self, name)
            check(len(grid) >= 1 and all(v > 0 for v in grid) and list(grid) == sorted(grid), f"{name} must be positive and ascending, got {grid}")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities,
              f"sparsities in [0, 1) containing compare_level, got {self.sparsities}, {self.compare_level}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


# ---------------------------------------------------------------------------------------------- the method


def mrfa_deltas(model: MLP, x: torch.Tensor, y: torch.Tensor, seen: list[int], beta: float, gen: torch.Generator,
                direction: str = "grad") -> dict[int, torch.Tensor]:
    """Per-sample feature perturbations of replay images x (float, standardized) with labels y: one clean forward and
    backward of the current model give g_l = d(sum_i CE_i)/dh_l at every feature layer l; sample i draws a layer l_i
    uniformly and u_i ~ U(0, 1); its delta at l_i is beta u_i ||h_{l_i,i}||^2 g_{l_i,i} (zero at the other layers).
    direction="random": the same norm along a Gaussian direction (the ablation). Returns {layer: (B, d_l)}, detached."""
    layers = model.feature_layers
    logits, inputs = model(x, keep_inputs=True)
    loss = F.cross_entropy(mask_unseen(logits, seen), y, reduction="sum")
    grads = torch.autograd.grad(loss, [inputs[l] for l in layers])
    b = x.shape[0]
    pick = torch.randint(0, len(layers), (b,), generator=gen)
    u = torch.rand(b, generator=gen)
    out = {}
    for k, l in enumerate(layers):
        h, g = inputs[l].detach(), grads[k].detach()
        step = (beta * u * h.pow(2).sum(1))[:, None] * g
        if direction == "random":
            noise = torch.randn(g.shape, generator=gen)
            step = noise / noise.norm(dim=1, keepdim=True).clamp_min(1e-12) * step.norm(dim=1, keepdim=True)
        out[l] = torch.where((pick == k)[:, None], step, torch.zeros_like(step))
    return out


# ---------------------------------------------------------------------------------------------- data


def prepare(cfg: Config, res) -> dict:
    """Per-class train / validation images from the training split (data_seed), test images from the test split
    (test_seed), then the tuned knob of every variant (validation only)."""
    f = load_fashion(res["fashion_mnist"])
    classes = list(range(10))
    tr, va = class_balanced_split(f["y_train"].long(), classes, cfg.n_train, cfg.n_val, cfg.data_seed)
    te, _ = class_balanced_split(f["y_test"].long(), classes, cfg.n_test, 0, cfg.test_seed)
    data = {"x_train": f["x_train"][tr].contiguous(), "y_train": f["y_train"][tr].long().contiguous(),
            "x_val": f["x_train"][va].contiguous(), "y_val": f["y_train"][va].long().contiguous(),
            "x_test": f["x_test"][te].contiguous(), "y_test": f["y_test"][te].long().contiguous()}
    data["tuning"] = tune_variants(cfg, data)
    return data


def tune_variants(cfg: Config, data: dict) -> dict:
    """The rule fixed in code: er's lr from lr_grid, then each other variant's own knob at er's lr; score = final_acc
    on the validation images after the last task, one run at tune_seed per grid value."""
    def score(variant: str, lr: float, knob: float) -> tuple[None, float]:
        run = fit(cfg, data, variant, cfg.tune_seed, lr, knob, eval_x=data["x_val"], eval_y=data["y_val"])
        return None, float(run["metrics"]["final_acc"])

    out = {}
    _, out["er"] = tune(cfg.lr_grid, lambda lr: score("er", lr, 0.0), name="knob")
    lr = out["er"]["tuned_knob"]
    for v in VARIANTS[1:]:
        grid = cfg.shift_grid if KNOB[v] == "shift" else cfg.beta_grid
        _, out[v] = tune(grid, lambda k, v=v: score(v, lr, k), name="knob")
        out[v]["tuned_lr"] = lr
    out["er"]["tuned_lr"] = lr
    return out


# ---------------------------------------------------------------------------------------------- training


def fit(cfg: Config, data: dict, variant: str, seed: int, lr: float, knob: float, eval_x: torch.Tensor,
        eval_y: torch.Tensor, log=None) -> dict:
    """Train one class-incremental run; the accuracy matrix is measured on (eval_x, eval_y) after each task."""
    if variant not in VARIANTS:
        raise ValueError(f"mrfa: unknown variant {variant!r}; known: {VARIANTS}")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tasks = class_incremental_splits(cfg.class_order, cfg.n_tasks)
    model = MLP(cfg.widths, 10)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    memory = ReplayBuffer(cfg.mem_per_class)
    xt, yt = data["x_train"], data["y_train"]
    task_idx = [torch.nonzero(torch.isin(yt, torch.tensor(c))).flatten() for c in tasks]
    seen: list[int] = []

    def before(t: int) -> None:
        seen.extend(tasks[t])

    def step(t: int, s: int) -> None:
        idx = task_idx[t][torch.randint(0, task_idx[t].numel(), (cfg.batch_size,), generator=gen)]
        xb, yb = xt[idx], yt[idx]
        deltas = None
        n_new = xb.shape[0]
        if len(memory):
            xm, ym = memory.sample(cfg.replay_batch, gen)
            if variant == "er_aug":
                xm = random_shift_flip(xm, int(knob), gen)
            xb, yb = torch.cat([xb, xm]), torch.cat([yb, ym])
        xf = to_float(xb)
        if variant in ("mrfa", "mrfa_rand") and len(memory):
            d = mrfa_deltas(model, xf[n_new:], yb[n_new:], seen, knob, gen, "grad" if variant == "mrfa" else "random")
            deltas = {l: torch.cat([torch.zeros(n_new, v.shape[1]), v]) for l, v in d.items()}
        model.train()
        loss = F.cross_entropy(mask_unseen(model(xf, deltas), seen), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log is not None and (s % cfg.log_every == 0):
            log(t * cfg.steps_per_task + s, **{"train/loss": float(loss.detach())})

    def after(t: int) -> None:
        memory.add(xt[task_idx[t]], yt[task_idx[t]], gen)

    def evaluate_task(t: int) -> list[float]:
        return task_accuracies(cfg, model.state_dict(), seen, eval_x, eval_y)

    R = run_tasks(cfg.n_tasks, cfg.steps_per_task, step, evaluate_task, before, after)
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "memory": memory.state(),
            "R": torch.tensor(R), "metrics": cl_metrics(R)}


@torch.no_grad()
def logits_of(cfg: Config, state: dict, x: torch.Tensor) -> torch.Tensor:
    model = MLP(cfg.widths, 10)
    model.load_state_dict(state)
    model.eval()
    return torch.cat([model(to_float(x[a : a + cfg.eval_batch])) for a in range(0, x.shape[0], cfg.eval_batch)])


def task_accuracies(cfg: Config, state: dict, seen: list[int], x: torch.Tensor, y: torch.Tensor) -> list[float]:
    tasks = class_incremental_splits(cfg.class_order, cfg.n_tasks)
    return per_class_accuracy(mask_unseen(logits_of(cfg, state, x), seen), y, tasks)


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    info = data["tuning"][variant]
    run = fit(cfg, data, variant, seed, info["tuned_lr"], info["tuned_knob"], data["x_test"], data["y_test"], log)
    run["tuning"] = {"tuned_lr": float(info["tuned_lr"]), "tuned_knob": float(info["tuned_knob"]), "grid_edge": float(info["grid_edge"])}
    return run


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """final_acc from the (possibly compressed) model on the test images; avg_inc_acc and forgetting from the
    accuracy matrix of training with its last row replaced by this model's; the memory-overfitting measures."""
    classes = list(cfg.class_order)
    R = model["R"].numpy().copy()
    R[-1] = task_accuracies(cfg, model["state"], classes, data["x_test"], data["y_test"])
    out = dict(cl_metrics(R))
    out["acc_first_task"] = float(R[-1, 0])
    out["acc_last_task"] = float(R[-1, -1])
    old = [c for task in class_incremental_splits(cfg.class_order, cfg.n_tasks)[:-1] for c in task]
    mem = ReplayBuffer.from_state(model["memory"])
    keep = torch.isin(mem.y, torch.tensor(old))
    mem_loss = F.cross_entropy(logits_of(cfg, model["state"], mem.x[keep]), mem.y[keep]).item()
    vkeep = torch.isin(data["y_val"], torch.tensor(old))
    val_loss = F.cross_entropy(logits_of(cfg, model["state"], data["x_val"][vkeep]), data["y_val"][vkeep]).item()
    out.update({"memory_loss": mem_loss, "heldout_old_loss": val_loss, "memory_gap": val_loss - mem_loss})
    out["n_params"] = float(count_params(model["state"]))
    out.update(model.get("tuning", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the MLP's weight matrices at each level (no fine-tuning)."""
    return magnitude_models(model, cfg.sparsities)


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    def edge(v: str) -> Gate:
        return edge_gate(v, f"tuned {KNOB[v]}", "its grid")

    overfits = Gate(f"plain ER overfits its memory: held-out old-class loss exceeds the memory exemplars' loss by more than "
                    f"{GAP_ABOVE} nats after the last task (memory_gap of er)", variant="er", metric="memory_gap",
                    above=GAP_ABOVE, kind="mechanism")
    learns = Gate("ER learns: final accuracy above 30% (10 classes, chance 10%)", variant="er", metric="final_acc", above=30.0)
    rows = [Comparison("final_acc", "mrfa", "er", better="higher", role="headline", gates=(overfits, learns, edge("mrfa"), edge("er")),
                       text="MRFA (multi-layer rehearsal feature augmentation) has a higher final average accuracy than ER at "
                            "the same memory after 5 class-incremental Fashion-MNIST tasks",
                       refuted_if="the paired 95% interval of final_acc(mrfa) - final_acc(er) lies below 0 while ER overfits its "
                                  "memory (memory_gap > 0.5), ER learns and mrfa's beta is inside its grid")]
    rows.append(Comparison("forgetting", "mrfa", "er", better="lower", role="secondary", gates=(learns,),
                           text="MRFA forgets less than ER (average forgetting, Chaudhry et al.)"))
    rows.append(Comparison("final_acc", "mrfa", "er_aug", better="higher", role="secondary",
                           gates=(learns, edge("mrfa"), edge("er_aug")),
                           text="MRFA beats ER with input augmentation of the replay images at the same memory"))
    rows.append(Comparison("avg_inc_acc", "mrfa", "er", better="higher", role="secondary", gates=(learns,),
                           text="MRFA has a higher average incremental accuracy than ER"))
    rows.append(Comparison("final_acc", "mrfa", "mrfa_rand", better="higher", role="secondary",
                           gates=(learns, edge("mrfa"), edge("mrfa_rand")),
                           text="ablation: the gradient-ascent direction beats a random feature perturbation of the same norm"))
    rows.append(Comparison("memory_gap", "mrfa", "er", better="lower", role="control",
                           text="diagnostic: MRFA narrows the gap between held-out old-class loss and memory loss"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("final_acc", "mrfa", "er", better="higher", stage="compressed", level=level, role="control",
                           text=f"MRFA keeps a higher final accuracy than ER with weights pruned to {level}"))
    rows.append(Comparison("n_params", "mrfa", "er", role="fact", text="parameters: the same MLP for every variant"))
    return rows


SPEC = register_paper(PaperSpec(
    id="mrfa",
    title="Multi-layer Rehearsal Feature Augmentation for Class-Incremental Learning",
    claim="MRFA improves over ER",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="reconstruction", resources=("fashion_mnist",),
    data="Fashion-MNIST, class-incremental in 5 tasks of 2 classes (0-1, 2-3, ..., 8-9); per class 1,200 training and 300 "
         "validation images of the training split (data_seed), 500 test images of the official test split (test_seed)",
    substitutions="Paper: CIFAR-100 / ImageNet-100, ResNet-32/18, 2000-exemplar memory, per-layer perturbation factors. "
                  "Here: Fashion-MNIST 28x28, a 784-128-128-128-10 MLP (feature layers hooked: inputs of hidden layers 2-3 "
                  "and of the classifier), 20 exemplars per class, 200 Adam steps per task, one tuned factor beta for all "
                  "layers; the method follows a public MRFA implementation whose authorship is unconfirmed (paper text "
                  "not retrievable)",
    compression="global magnitude pruning of the final MLP's weight matrices at each level (no fine-tuning)",
    figure="sparsity", weight=1,
))
