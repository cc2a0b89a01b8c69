"""Tests of the NExT-GPT paper module (papers/nextgpt.py): the frozen PCA encoder (against numpy's eigendecomposition),
the generated clips' pitch (the spectrum peak at the class fundamental), the backbone forward (against the Hugging Face
Llama forward), the shallow ablation (by hand), which parameters each variant trains, the int8 record (every Linear
weight on its per-channel grid), and the spec path end to end on a tiny random Llama with striped stand-in images."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.compress.int8 import fake_quantize, linear_weight_names
from paperflow.papers import nextgpt as ng
from paperflow.registry import get_paper
from paperflow.spec import ConfigError, Resources
from synthetic_images import fake_fashion
from tiny_llama import tiny_resources

torch.set_num_threads(1)

TINY = dict(n_enc_fit=60, n_train=60, n_val=30, n_test=40, enc_dim=8, audio_len=64, backbone_layers=2, steps=3, warmup=1,
            batch_size=4, lr_grid=(0.001, 0.01), eval_batch=16, log_every=1)
TINY_WORDS = tuple(f" w{i}" for i in range(1, 11))  # the tiny tokenizer's words (one token each)
TINY_TARGETS = {"text": " w11", "audio": " w12", "image": " w13", "pick_img": " w14", "pick_aud": " w15"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(ng, "CLASS_WORDS", TINY_WORDS)
    mp.setattr(ng, "TARGET_WORDS", TINY_TARGETS)
    mp.setattr(ng, "BOS", "w0")
    tmp = tmp_path_factory.mktemp("nextgpt")
    res = tiny_resources(tmp)
    rng = np.random.default_rng(0)
    fashion = fake_fashion(tmp / "fashion.npz", rng, rng.integers(0, 10, 300), rng.integers(0, 10, 100))
    res = Resources(root=res.root, paths={**res.paths, "fashion_mnist": fashion})
    cfg = ng.Config(**TINY)
    data = get_paper("nextgpt").prepare(cfg, res)
    yield cfg, data
    mp.undo()


def test_pca_map_matches_numpy_eigendecomposition():
    x = torch.from_numpy(np.random.default_rng(1).normal(size=(200, 6)) @ np.diag([5, 3, 2, 1, 0.5, 0.1]))
    w, b = ng.pca_map(x.double(), 3)
    code = x.double() @ w.T + b
    assert code.mean(0).abs().max() < 1e-9  # centered
    var = code.var(0)
    assert float(var.mean()) == pytest.approx(1.0, rel=1e-9)  # unit mean variance per component
    evals, evecs = np.linalg.eigh(np.cov(x.numpy(), rowvar=False))
    top = evecs[:, ::-1][:, :3]
    scale = np.sqrt(evals[::-1][:3].mean())
    for k in range(3):  # each row = an eigenvector (up to sign) / sqrt(mean top eigenvalue)
        assert abs(abs(float(w[k].numpy() @ top[:, k])) - 1 / scale) < 1e-8
    assert np.allclose(var.numpy(), evals[::-1][:3] / evals[::-1][:3].mean())


def test_clip_spectrum_peaks_at_the_class_fundamental():
    rng = np.random.default_rng(0)
    for c in range(10):
        clip = ng.make_clips(np.array([c]), 256, jitter=0.0, noise=0.0, rng=rng)[0]
        spec = np.abs(np.fft.rfft(clip))
        assert abs(int(spec.argmax()) - ng.class_fundamental(c)) <= 1.0
        f0 = ng.class_fundamental(c)
        harmonics = [k for k in range(1, 5) if spec[int(round(k * f0))] > 0.15 * spec.max()]  # 4 f0 < 128 for all c
        assert len(harmonics) == 1 + c % 4  # 1-4 harmonics by class


def test_backbone_forward_equals_the_hugging_face_forward(tiny):
    _, data = tiny
    import transformers

    model = ng.NextModel(data)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**data["lm_config"])).eval()
    hf.model.layers.load_state_dict(data["layers_state"])
    hf.model.norm.load_state_dict(data["norm_state"])
    seq = torch.randn(5, 4, data["emb"].shape[1])
    with torch.no_grad():
        ref = hf.model(inputs_embeds=seq).last_hidden_state[:, -1]  # final norm applied; every layer of the tiny LM
        ours = model.last_state(seq)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_shallow_map_is_the_norm_of_the_mean_embedding(tiny):
    _, data = tiny
    model = ng.NextModel(data, shallow=True)
    seq = torch.randn(3, 4, data["emb"].shape[1])
    x = seq.mean(1)
    w = data["norm_state"]["weight"]
    eps = model.norm.variance_epsilon
    by_hand = w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    assert torch.allclose(model.last_state(seq), by_hand, atol=1e-6)
    assert len(model.layers) == 0


def test_variants_train_what_the_paper_says(tiny):
    cfg, data = tiny
    for variant in ng.VARIANTS:
        model = ng.build(data, variant, 0)
        groups = ng.param_groups(model, variant, 0.01, cfg.pretrained_lr_scale)
        trained = {n for n, p in model.named_parameters() if p.requires_grad}
        proj = {n for n, _ in model.named_parameters() if n.startswith(ng.PROJ_PREFIXES)}
        if variant == "e2e":
            assert trained == {n for n, _ in model.named_parameters()}
            assert [g["lr"] for g in groups] == [0.01, pytest.approx(0.01 * cfg.pretrained_lr_scale)]
        else:
            assert trained == proj and len(groups) == 1
    model = ng.build(data, "proj", 0)
    ng.param_groups(model, "proj", 0.01, cfg.pretrained_lr_scale)
    counts = ng.param_counts(model)
    n_proj = sum(p.numel() for n, p in model.named_parameters() if n.startswith(ng.PROJ_PREFIXES))
    assert counts["n_trainable"] == n_proj and counts["trainable_frac"] == pytest.approx(100 * n_proj / counts["n_params"])


def test_int8_record_puts_every_linear_weight_on_its_grid(tiny):
    cfg, data = tiny
    record = get_paper("nextgpt").train(cfg, data, "proj", 0, lambda *a, **k: None)
    comp = ng.compress(cfg, record, data, "proj", 0)[ng.INT8]
    dense, q = ng.load(data, record).state_dict(), ng.load(data, comp).state_dict()
    names = linear_weight_names(dense)
    assert any(n.startswith("layers.") for n in names) and any(n.startswith("in_img") for n in names)
    for n in names:
        assert torch.allclose(q[n], fake_quantize(dense[n]), atol=1e-6), n


def test_spec_end_to_end_on_tiny_data(tiny):
    cfg, data = tiny
    spec = get_paper("nextgpt")
    assert set(data["tuning"]) == set(ng.VARIANTS)
    for variant in ng.VARIANTS:
        record = spec.train(cfg, data, variant, 1, lambda *a, **k: None)
        m = spec.evaluate(cfg, record, data)
        for key in (*ng.TASKS, "retr_acc", "trainable_frac", "grid_edge", "tuned_lr"):
            assert key in m and np.isfinite(m[key]), key
        assert m["retr_acc"] == pytest.approx(sum(m[t] for t in ng.TASKS) / len(ng.TASKS))
        if variant != "shallow":  # the mechanism gate's metric: the same model with its backbone bypassed
            assert m["backbone_drop"] == pytest.approx(m["retr_acc"] - m["bypass_retr_acc"])
        comp = spec.compress(cfg, record, data, variant, 1)
        assert set(comp) == {ng.INT8}
        assert np.isfinite(spec.evaluate(cfg, comp[ng.INT8], data)["retr_acc"])


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError):
        ng.Config(lr_grid=(0.01, 0.001))
    with pytest.raises(ConfigError):
        ng.Config(test_seed=0)
    with pytest.raises(ConfigError):
        ng.Config(backbone_layers=0)


def test_proj_and_e2e_start_equal_and_are_tuned_alike(tiny):
    """The headline's two arms differ only in what trains: at the same seed they start from identical weights
    (frozen parts and projections), and every variant was scored on the whole lr grid by the same rule."""
    cfg, data = tiny
    a, b = ng.build(data, "proj", 3), ng.build(data, "e2e", 3)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    for variant in ng.VARIANTS:
        info = data["tuning"][variant]
        scores = [info[f"val_score@{j}"] for j in range(len(cfg.lr_grid))]
        assert info["tuned_lr"] == cfg.lr_grid[int(np.argmax(scores))]  # ties: the first (smaller) lr
