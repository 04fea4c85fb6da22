"""Phenotype code streams for the tests: the shape of ``bench/icd_phenotype_streams.py``
(a wide vocabulary of rare codes grouped in chapters) without its ICD-10-CM table."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def zipf(rng: np.random.Generator, d: int, columns: np.ndarray) -> np.ndarray:
    """A Zipf(1) distribution over ``columns`` of d, in an order drawn from ``rng``."""
    p = np.zeros(d)
    columns = rng.permutation(columns)
    rate = 1.0 / np.arange(1, columns.size + 1)
    p[columns] = rate / rate.sum()
    return p


def wide_phenotypes(n: int, seed: int) -> tuple[sp.csr_array, np.ndarray]:
    """Eight phenotypes over a wide vocabulary of rare codes (d = 6,300), the shape of
    ``bench/icd_phenotype_streams.py``: four groups of 1,500 codes, two phenotypes a group;
    a patient draws Poisson(8 q_j) of every code, q_j = 0.4 background (300 codes) + 0.2 its
    group's codes + 0.4 its own block of 300, each a Zipf(1) over its codes in random order."""
    rng = np.random.default_rng(seed)
    d = 300 + 4 * 1_500

    background = zipf(rng, d, np.arange(300))
    q = []
    for g in range(4):
        group = 300 + g * 1_500 + np.arange(1_500)
        shared = zipf(rng, d, group)
        q += [0.4 * background + 0.2 * shared + 0.4 * zipf(rng, d, group[b * 300:(b + 1) * 300])
              for b in range(2)]
    y = rng.integers(8, size=n)
    return sp.csr_array((rng.poisson(8.0 * np.array(q)[y]) > 0).astype(float)), y


def chapter_phenotypes(n: int, seed: int) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    """(X, y, prevalence): eight phenotypes on a vocabulary of chapters, the shape of
    ``bench/icd_phenotype_streams.py`` without its table: four chapters of 400–3,000 codes,
    two phenotypes a chapter, each a block of 20–120 of its chapter's codes; a patient draws
    Poisson(8 q_j) of every code, q_j = 0.5 background (300 codes) + 0.3 its chapter + 0.2 its
    block, each a Zipf(1) over its codes in random order (so code h is present with
    probability 1 − exp(−8 q_jh), the prevalence returned)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(400, 3_000, size=4)
    d = 300 + int(sizes.sum())

    background = zipf(rng, d, np.arange(300))
    q = []
    first = 300
    for size in sizes:
        chapter = first + np.arange(size)
        first += size
        shared = zipf(rng, d, chapter)
        for _ in range(2):
            block = rng.choice(chapter, size=int(rng.integers(20, 120)), replace=False)
            q.append(0.5 * background + 0.3 * shared + 0.2 * zipf(rng, d, block))
    prevalence = 1.0 - np.exp(-8.0 * np.array(q))
    y = rng.integers(8, size=n)
    return sp.csr_array((rng.random((n, d)) < prevalence[y]).astype(float)), y, prevalence
