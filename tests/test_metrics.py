"""paperflow.metrics.auroc against the brute-force pair count (ties 1/2) and sklearn."""
from __future__ import annotations

import numpy as np
import pytest

from paperflow.metrics import auroc


def test_auroc_equals_the_pair_count_and_sklearn():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 6, 40).astype(float), rng.integers(0, 6, 30).astype(float)  # many ties
    pairs = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert auroc(pos, neg) == pytest.approx(pairs, abs=1e-12)
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(40), np.zeros(30)]
    assert auroc(pos, neg) == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-12)
    assert auroc([2.0, 3.0], [0.0, 1.0]) == 1.0 and auroc([0.0, 1.0], [2.0, 3.0]) == 0.0
    with pytest.raises(ValueError, match="both classes"):
        auroc([], [1.0])
