"""Word-level descriptions of the ten Fashion-MNIST classes, for image-text (dual encoder) experiments.

Every class has 3 nouns x 4 phrases, written into 6 templates: 72 descriptions per class, e.g.
"a photo of a trousers, a garment for the legs". One in four combinations ((template + noun + phrase) % 4 == 0)
is held out: 54 training and 18 held-out descriptions per class, so a zero-shot evaluation can build its
class embeddings from descriptions never seen in training. Tokens are lower-case words; the vocabulary is
sorted for determinism and id 0 is padding.
"""
from __future__ import annotations

import re

import torch

TEMPLATES = ("a photo of a {n}, {p}", "a picture of the {n}, {p}", "an image of a {n} {p}", "{n}, {p}",
             "a {n} {p}", "a grayscale photo of a {n}, {p}")
CLASS_TEXT = (
    (("t-shirt", "top", "tee"), ("with short sleeves", "worn on the upper body", "a light casual garment", "with a round neck")),
    (("trousers", "pants", "slacks"), ("a garment for the legs", "with two long legs", "worn from the waist down", "long and narrow")),
    (("pullover", "sweater", "jumper"), ("with long sleeves", "a warm knitted top", "pulled on over the head", "for cold weather")),
    (("dress", "gown", "frock"), ("a one piece garment", "worn by women", "with a long skirt", "for a party")),
    (("coat", "jacket", "overcoat"), ("with buttons down the front", "worn over other clothes", "for cold weather", "with long sleeves and a collar")),
    (("sandal", "flip flop", "slipper"), ("an open shoe with straps", "worn in summer", "a light shoe for the feet", "showing the toes")),
    (("shirt", "blouse", "button shirt"), ("with a collar and buttons", "worn on the upper body", "with long sleeves", "a formal top")),
    (("sneaker", "trainer", "running shoe"), ("a sports shoe with laces", "a low shoe for the feet", "with a rubber sole", "for running")),
    (("bag", "handbag", "purse"), ("with a handle", "for carrying things", "a leather accessory", "with a strap")),
    (("ankle boot", "boot", "bootie"), ("a shoe that covers the ankle", "with a heel", "a high shoe for the feet", "for winter")),
)
N_CLASSES = len(CLASS_TEXT)


def descriptions() -> list[tuple[str, int, bool]]:
    """(text, class, held_out) for every template x noun x phrase; held out when (t + n + p) % 4 == 0."""
    out = []
    for c, (nouns, phrases) in enumerate(CLASS_TEXT):
        for ti, tmpl in enumerate(TEMPLATES):
            for ni, noun in enumerate(nouns):
                for pi, phrase in enumerate(phrases):
                    out.append((tmpl.format(n=noun, p=phrase), c, (ti + ni + pi) % 4 == 0))
    return out


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9\-]+", text.lower())


def tokenize(texts: list[str], max_len: int) -> tuple[torch.Tensor, list[str]]:
    """Word ids (len(texts), max_len), 0 = padding; vocabulary sorted for determinism."""
    vocab = ["<pad>"] + sorted({w for t in texts for w in words(t)})
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.zeros(len(texts), max_len, dtype=torch.long)
    for r, t in enumerate(texts):
        toks = [index[w] for w in words(t)]
        if len(toks) > max_len:
            raise ValueError(f"description {t!r} has {len(toks)} words > max_len={max_len}")
        ids[r, : len(toks)] = torch.tensor(toks)
    return ids, vocab
