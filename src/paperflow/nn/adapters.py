"""Adapters on frozen nn.Linear layers: LoRA, ETHER, ETHER+ and OFT, one base class, one merge.

Every adapter wraps a frozen `base` nn.Linear (weight W of shape (out, in), optional bias b) and adds its
own trainable parameters. Convention (PyTorch): y = x W^T + b. A multiplicative adapter on the INPUT side
transforms W -> W H (H acts on the `in` features), on the OUTPUT side W -> H' W (H' acts on `out`).
In the papers' notation (weights as (in, out) matrices, y = W^T x), "H W" is our W H: the same map.

  LoRA (Hu et al. 2021; loralib/peft `Linear`):     W' = W + (alpha / r) B A,  A (r, in), B (out, r)
      A ~ Kaiming-uniform(a=sqrt(5)) (peft's default init), B = 0, so W' = W at init.
  ETHER (Bini et al. 2024, Eq. 2; mwbini/ether ether-instruct/lit_gpt/ether.py::ETHERLinear.ether):
      per block i of n, H_i = I - 2 u_i u_i^T / (u_i^T u_i) (a Householder reflection: orthogonal, det -1,
      ||H_i - I||_F = 2 whatever u_i), H = blockdiag(H_1..H_n), W' = W H. One vector u_i per block:
      `in` parameters per layer, independent of n. u ~ Kaiming-uniform (the code), so H != I at init.
  ETHER+ (Eq. 4; ::etherplus, Htype 'etherplusHH' = the paper's two-sided ETHER+):
      H+_i = I - u_i u_i^T/|u_i|^2 + v_i v_i^T/|v_i|^2 with v_i initialised to -u_i (H+ = I at init),
      applied on both sides: W' = H+_out W H+_in (`two_sided=False` gives the code's one-sided 'etherplus').
  OFT (Qiu et al. 2023; ::oft): Q_i = (I + S_i)(I - S_i)^{-1}, S_i = (R_i - R_i^T)/2, R_i = 0 at init
      (Cayley map, Q = I at init), W' = W blockdiag(Q).

Block-diagonal form. The paper applies H = blockdiag(H_1..H_n): block i transforms input features
[i*in/n, (i+1)*in/n). The authors' code, for n > 1 and no flip_side, reshapes W (out, in) row-major to
(n, out, in/n) before multiplying, which does not select those column blocks; we implement the paper's
block-diagonal product (for n = 1 both agree).

Efficiency (the paper's Sec. 3 point that reflections are cheap): forward() applies H to the activations,
x H^T (a reflection costs O(in) per token: x_i - 2 (x_i . u^_i) u^_i), which is the same map as using the
merged weight W H; merged() builds that weight explicitly (the compress stage), and the unit tests check
forward == merged.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F


# ------------------------------------------------------------------------------ block transforms (math)
def unit(u: torch.Tensor) -> torch.Tensor:
    """u / |u| along the last dim."""
    return u / u.norm(dim=-1, keepdim=True)


def householder(u: torch.Tensor) -> torch.Tensor:
    """(n, b) vectors -> (n, b, b) reflections I - 2 u u^T / (u^T u) (ETHER, Eq. 2)."""
    n, b = u.shape
    uh = unit(u)
    return torch.eye(b, dtype=u.dtype).expand(n, b, b) - 2 * uh[:, :, None] * uh[:, None, :]


def ether_plus_matrix(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(n, b) u, v -> (n, b, b) I - u u^T/|u|^2 + v v^T/|v|^2 (ETHER+, Eq. 4); I when v = -u (or v = u)."""
    n, b = u.shape
    uh, vh = unit(u), unit(v)
    return torch.eye(b, dtype=u.dtype).expand(n, b, b) - uh[:, :, None] * uh[:, None, :] + vh[:, :, None] * vh[:, None, :]


def cayley(r: torch.Tensor) -> torch.Tensor:
    """(n, b, b) R -> (n, b, b) orthogonal (I + S)(I - S)^{-1}, S = (R - R^T)/2 (OFT's Cayley map, det +1)."""
    s = 0.5 * (r - r.transpose(1, 2))
    eye = torch.eye(r.shape[-1], dtype=r.dtype).expand_as(r)
    return torch.linalg.solve(eye - s, eye + s, left=False)  # X (I - S) = I + S  ->  X = (I+S)(I-S)^{-1}


def cayley_apply(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """x (..., n b) -> apply_blocks(x, cayley(r)) = x_i Q_i^T per block, without forming Q when there are fewer
    rows than the block width. Q = (I+S)(I-S)^{-1} = 2 (I-S)^{-1} - I (the factors commute), and (I-S)^T = I+S
    for skew S, so x Q^T = 2 x (I+S)^{-1} - x: one LU of (I+S) and a solve against the rows of x, instead of the
    b right-hand sides an explicit inverse needs (OFT on the last-token-only layers: 16 rows vs b = 384)."""
    n, b, _ = r.shape
    rows = x.numel() // x.shape[-1]
    if rows >= b:
        return apply_blocks(x, cayley(r))
    s = 0.5 * (r - r.transpose(1, 2))
    eye = torch.eye(b, dtype=r.dtype).expand_as(r)
    xb = x.reshape(rows, n, b).transpose(0, 1)  # (n, rows, b)
    y = torch.linalg.solve(eye + s, xb, left=False)  # Y (I + S) = x_i  ->  Y = x_i (I+S)^{-1}, (n, rows, b)
    return (2 * y - xb).transpose(0, 1).reshape(x.shape)


def block_diag(blocks: torch.Tensor) -> torch.Tensor:
    """(n, b, b) -> the (n b, n b) block-diagonal matrix."""
    return torch.block_diag(*blocks.unbind(0))


def apply_blocks(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x (..., n b) -> x blockdiag(m)^T, i.e. block i of x times m_i^T: x_i m_i^T."""
    n, b, _ = m.shape
    xb = x.reshape(*x.shape[:-1], n, b)
    return torch.einsum("...nj,nij->...ni", xb, m).reshape(x.shape)


def reflect(x: torch.Tensor, u: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    """x (..., n b) -> per block x_i - scale (x_i . u^_i) u^_i (x H^T for H = I - scale u^u^T), O(n b) per row."""
    n, b = u.shape
    uh = unit(u)
    xb = x.reshape(*x.shape[:-1], n, b)
    return (xb - scale * (xb * uh).sum(-1, keepdim=True) * uh).reshape(x.shape)


def ether_plus_apply(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x H+^T for H+ = I - u^u^T + v^v^T per block (H+ is symmetric), O(n b) per row."""
    n, b = u.shape
    uh, vh = unit(u), unit(v)
    xb = x.reshape(*x.shape[:-1], n, b)
    out = xb - (xb * uh).sum(-1, keepdim=True) * uh + (xb * vh).sum(-1, keepdim=True) * vh
    return out.reshape(x.shape)


def _kaiming_vectors(n: int, b: int) -> torch.Tensor:
    """(n, b) init as the code: kaiming_uniform_(a=sqrt(5)) on the (n, b) tensor (bound 1/sqrt(b))."""
    t = torch.empty(n, b)
    nn.init.kaiming_uniform_(t, a=math.sqrt(5))
    return t


# ---------------------------------------------------------------------------------------------- adapters
class Adapter(nn.Module):
    """Base: a frozen nn.Linear plus trainable adapter parameters; merged() folds them into one nn.Linear."""

    def __init__(self, base: nn.Linear):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def merged_weight(self) -> torch.Tensor:  # (out, in)
        raise NotImplementedError

    def adapter_parameters(self) -> list[nn.Parameter]:
        """The adapter's own parameters (the base is frozen); what the papers count as trainable."""
        base = {id(p) for p in self.base.parameters()}
        return [p for p in self.parameters() if id(p) not in base]

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain nn.Linear with the adapter folded into the weight (bias unchanged, as the codes' merge)."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.base.bias is not None)
        lin.weight.copy_(self.merged_weight().detach())
        if self.base.bias is not None:
            lin.bias.copy_(self.base.bias)
        lin.requires_grad_(False)
        return lin


class LoRALinear(Adapter):
    """y = x W^T + b + (alpha/r) (x A^T) B^T (loralib / peft LoRA Linear, no dropout)."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0):
        super().__init__(base)
        if r < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {r}")
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # peft LoraLayer.reset_lora_parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + self.scale * self.lora_B @ self.lora_A


class _Blocked(Adapter):
    def __init__(self, base: nn.Linear, nb: int, sides: tuple[str, ...]):
        super().__init__(base)
        for side, dim in (("in", base.in_features), ("out", base.out_features)):
            if side in sides and (nb < 1 or dim % nb):
                raise ValueError(f"{type(self).__name__}: nb={nb} blocks must divide {side}_features={dim}")
        self.nb = nb


class ETHERLinear(_Blocked):
    """W' = W blockdiag(H_i), H_i = I - 2 u^_i u^_i^T (input side, as the code's default, flip_side=False)."""

    def __init__(self, base: nn.Linear, nb: int = 1):
        super().__init__(base, nb, ("in",))
        self.ether_u = nn.Parameter(_kaiming_vectors(nb, base.in_features // nb))

    def transform(self) -> torch.Tensor:
        return householder(self.ether_u)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(reflect(x, self.ether_u))  # (x H^T) W^T + b, H symmetric

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight @ block_diag(self.transform())


class ETHERPlusLinear(_Blocked):
    """W' = H+_out W H+_in (two-sided, the paper's ETHER+ / code Htype 'etherplusHH'), v = -u at init."""

    def __init__(self, base: nn.Linear, nb: int = 1, two_sided: bool = True):
        super().__init__(base, nb, ("in", "out") if two_sided else ("in",))
        self.two_sided = two_sided
        u = _kaiming_vectors(nb, base.in_features // nb)
        self.ether_u = nn.Parameter(u)
        self.ether_v = nn.Parameter(-u.clone())
        if two_sided:
            u2 = _kaiming_vectors(nb, base.out_features // nb)
            self.ether_u2 = nn.Parameter(u2)
            self.ether_v2 = nn.Parameter(-u2.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = F.linear(ether_plus_apply(x, self.ether_u, self.ether_v), self.base.weight)
        if self.two_sided:  # (x H_in W^T) H_out^T, H_out symmetric
            z = ether_plus_apply(z, self.ether_u2, self.ether_v2)
        return z if self.base.bias is None else z + self.base.bias

    def merged_weight(self) -> torch.Tensor:
        w = self.base.weight @ block_diag(ether_plus_matrix(self.ether_u, self.ether_v))
        if self.two_sided:
            w = block_diag(ether_plus_matrix(self.ether_u2, self.ether_v2)) @ w
        return w


class OFTLinear(_Blocked):
    """W' = W blockdiag(Q_i), Q_i the Cayley map of R_i = 0 at init (the ETHER code's 'oft' Htype)."""

    def __init__(self, base: nn.Linear, nb: int = 1):
        super().__init__(base, nb, ("in",))
        b = base.in_features // nb
        self.oft_R = nn.Parameter(torch.zeros(nb, b, b))

    def transform(self) -> torch.Tensor:
        return cayley(self.oft_R)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(cayley_apply(x, self.oft_R))  # x Q^T W^T + b

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight @ block_diag(self.transform())

    def adapter_parameters(self) -> list[nn.Parameter]:
        return [self.oft_R]


def n_effective(adapter: Adapter) -> int:
    """Trainable degrees of freedom: OFT's skew part only (b(b-1)/2 per block, as the OFT/ETHER papers count);
    every other adapter: all its parameters."""
    if isinstance(adapter, OFTLinear):
        nb, b, _ = adapter.oft_R.shape
        return nb * b * (b - 1) // 2
    return sum(p.numel() for p in adapter.adapter_parameters())


ADAPTERS: dict[str, Callable[..., Adapter]] = {
    "lora": LoRALinear, "ether": ETHERLinear, "ether_plus": ETHERPlusLinear, "oft": OFTLinear,
}


def make_adapter(kind: str, base: nn.Linear, **kwargs) -> Adapter:
    if kind not in ADAPTERS:
        raise ValueError(f"unknown adapter {kind!r}; known: {sorted(ADAPTERS)}")
    return ADAPTERS[kind](base, **kwargs)


# ------------------------------------------------------------------------------------- module surgery
def add_adapters(module: nn.Module, targets: Iterable[str], factory: Callable[[nn.Linear], Adapter]) -> dict[str, Adapter]:
    """Replace every nn.Linear of `module` whose name ends with one of `targets` (e.g. "q_proj",
    "mlp.down_proj") by factory(linear); returns {full name: adapter}. Raises if nothing matched."""
    targets = tuple(targets)
    names = [n for n, m in module.named_modules() if isinstance(m, nn.Linear) and not isinstance(m, Adapter)
             and any(n == t or n.endswith("." + t) for t in targets)]
    names = [n for n in names if ".base" not in n and not n.endswith("base")]
    if not names:
        raise ValueError(f"add_adapters: no nn.Linear named {targets} in {type(module).__name__}")
    out = {}
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        adapter = factory(getattr(parent, child))
        setattr(parent, child, adapter)
        out[name] = adapter
    return out


def adapters_of(module: nn.Module) -> dict[str, Adapter]:
    return {n: m for n, m in module.named_modules() if isinstance(m, Adapter)}


@torch.no_grad()
def merge_adapters(module: nn.Module) -> int:
    """Replace every Adapter inside `module` by its merged nn.Linear (in place); returns how many."""
    found = adapters_of(module)
    for name, adapter in found.items():
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, adapter.merged())
    return len(found)
