"""CoDiEmb §4 diagnostics (Eq. 14–16) against a direct numpy computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_unified_embed.evaluation import embedding_space_diagnostics, token_matrix_diagnostics


def numpy_reference(matrix: np.ndarray, eps: float) -> dict[str, float]:
    """Eq. 14–16 written out literally for one token matrix X (n × d)."""
    n, d = matrix.shape
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    cosines = unit @ unit.T
    token_similarity = (cosines.sum() - np.trace(cosines)) / (n * (n - 1)) if n > 1 else np.nan
    sigma = np.linalg.svd(matrix, compute_uv=False)
    p = sigma**2 / np.sum(sigma**2)
    p = p[p > 0]
    return {
        "token_similarity": token_similarity,
        "rank": np.linalg.matrix_rank(matrix, tol=sigma.max() * max(n, d) * eps),
        "condition_number": np.linalg.cond(matrix),
        "svd_entropy": -np.sum(p * np.log(p)),
    }


def padded(matrices: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(m) for m in matrices)
    batch = torch.full((len(matrices), length, matrices[0].shape[1]), 7.0)  # garbage in padding must not matter
    mask = torch.zeros(len(matrices), length, dtype=torch.long)
    for i, m in enumerate(matrices):
        batch[i, : len(m)] = torch.from_numpy(m)
        mask[i, : len(m)] = 1
    return batch, mask


def test_padded_batch_matches_numpy_per_text() -> None:
    rng = np.random.default_rng(0)
    dim = 6
    # Lengths below, at and above the dimension (n > d makes k = d), plus a single token.
    matrices = [rng.normal(size=(n, dim)).astype(np.float32) + 0.5 for n in (1, 3, 6, 9)]
    batch, mask = padded(matrices)
    got = token_matrix_diagnostics(batch, mask)
    eps = float(np.finfo(np.float32).eps)
    for i, matrix in enumerate(matrices):
        expected = numpy_reference(matrix.astype(np.float64), eps)
        for name, value in expected.items():
            if np.isnan(value):
                assert torch.isnan(got[name][i]), name
            else:
                assert got[name][i].item() == pytest.approx(value, rel=1e-9, abs=1e-12), (name, len(matrix))


def test_rank_deficient_matrix_has_lower_rank_and_infinite_condition() -> None:
    base = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    matrix = np.vstack([base, 2 * base, -base])  # rank 1, three tokens
    batch, mask = padded([matrix])
    got = token_matrix_diagnostics(batch, mask)
    assert got["rank"].item() == 1
    assert got["condition_number"].item() > 1e6  # σ_3 is (numerically) zero
    assert got["svd_entropy"].item() == pytest.approx(0.0, abs=1e-9)
    # Two parallel and one anti-parallel token: pairwise cosines 1, −1, −1 (each counted twice) → −1/3.
    assert got["token_similarity"].item() == pytest.approx(-1 / 3)


def test_explicit_rtol_overrides_default_tolerance() -> None:
    matrix = np.diag([1.0, 1e-3, 1e-6]).astype(np.float32)
    batch, mask = padded([matrix])
    assert token_matrix_diagnostics(batch, mask)["rank"].item() == 3
    assert token_matrix_diagnostics(batch, mask, rtol=1e-4)["rank"].item() == 2


def test_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="attention_mask"):
        token_matrix_diagnostics(torch.zeros(2, 3, 4), torch.ones(2, 4))


def test_model_diagnostics_average_the_per_text_values(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    texts = ["a", "a cat sat on the mat", "the quick brown fox jumps over the lazy dog near the river bank today"]
    got = embedding_space_diagnostics(model, texts, batch_size=2)
    per_text = [
        numpy_reference(m.numpy().astype(np.float64), float(np.finfo(np.float32).eps))
        for m in model.encode(texts, output_value="token_embeddings")
    ]
    assert got.num_texts == 3
    for name in ("token_similarity", "rank", "condition_number", "svd_entropy"):
        assert getattr(got, name) == pytest.approx(np.mean([p[name] for p in per_text]), rel=1e-5)


def test_model_diagnostics_need_texts(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    with pytest.raises(ValueError, match="at least one text"):
        embedding_space_diagnostics(SentenceTransformer(tiny_model_path, device="cpu"), [])
