"""One set of estimator checks run on all three estimators (issue #13, item 7): parameters
round-trip, ``clone`` (scikit-learn's own), a compact repr, invalid values refused with the
parameter's name, deterministic fits, and snapshot → restore → byte-identical."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from streammom import HierarchicalMoM, SpectralMixture, StreamingHierarchy
from streammom.base import Estimator
from streammom.datasets import make_hierarchical_bernoulli
from streammom.model import HierarchyModel
from streammom.params import InvalidParameterError


@pytest.fixture(scope="module")
def data() -> sp.csr_array:
    X, _, _ = make_hierarchical_bernoulli(3_000, 60, 4, codes_per_event=8.0, random_state=3)
    return X


def _fit(est: Estimator, X: sp.csr_array) -> Estimator:
    if isinstance(est, StreamingHierarchy):
        for start in range(0, X.shape[0], 500):
            est.partial_fit(X[start:start + 500])
        est.refit()
        return est
    return est.fit(X)  # type: ignore[attr-defined, no-any-return]


def _state(est: Estimator) -> bytes:
    """What a fitted estimator learned, as bytes."""
    if isinstance(est, StreamingHierarchy):
        return est.snapshot()
    if isinstance(est, HierarchicalMoM):
        return est.model_.to_bytes()
    assert isinstance(est, SpectralMixture)
    return est.means_.tobytes() + est.weights_.tobytes()


CASES: dict[str, tuple[Callable[[], Estimator], dict[str, Any], dict[str, Any]]] = {
    # name: (factory, a valid non-default change, an invalid value)
    "StreamingHierarchy": (lambda: StreamingHierarchy(max_depth=2, refit_every=1_000,
                                                      min_split_weight=50.0),
                           {"basis_dim": 6}, {"prune_fraction": 0.7}),
    "HierarchicalMoM": (lambda: HierarchicalMoM(max_depth=2), {"em": True},
                        {"min_node_size": 1}),
    "SpectralMixture": (lambda: SpectralMixture(4), {"method": "svtd"}, {"tol": -1.0}),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[Callable[[], Estimator], dict[str, Any],
                                                  dict[str, Any]]:
    return CASES[request.param]


def test_params_round_trip_and_set(case: Any) -> None:
    make, change, _ = case
    est = make()
    params = est.get_params()
    assert type(est)(**params).get_params() == params
    assert est.set_params(**change) is est
    assert all(est.get_params()[k] == v for k, v in change.items())
    with pytest.raises(ValueError, match="unknown parameter"):
        est.set_params(no_such_parameter=1)


def test_clone_is_unfitted_and_equal(case: Any, data: sp.csr_array) -> None:
    make, _, _ = case
    est = _fit(make(), data)
    twin = clone(est)  # scikit-learn's clone: identity checks on every parameter
    assert type(twin) is type(est) and twin is not est
    assert twin.get_params().keys() == est.get_params().keys()
    assert repr(twin) == repr(est)
    fitted = [k for k in vars(twin) if k.endswith("_") and not k.startswith("_")
              and getattr(twin, k) is not None and k not in ("n_features_", "root_id_")]
    if isinstance(twin, StreamingHierarchy):
        assert twin.n_events_seen_ == 0 and twin.model_version_ == 0
    else:
        assert fitted == []
    assert _state(_fit(twin, data)) == _state(est)


def test_repr_names_only_what_differs(case: Any) -> None:
    make, change, _ = case
    est = make()
    text = repr(est)
    assert text.startswith(type(est).__name__ + "(")
    name, value = next(iter(change.items()))
    assert f"{name}=" not in text
    assert f"{name}={value!r}" in repr(est.set_params(**change))


def test_invalid_values_are_refused_by_name(case: Any, data: sp.csr_array) -> None:
    make, _, bad = case
    (name, value), = bad.items()
    with pytest.raises(InvalidParameterError, match=name):
        make().set_params(**bad)
    est = make()
    setattr(est, name, value)  # bypassing set_params: caught when work starts
    with pytest.raises(InvalidParameterError, match=name):
        if isinstance(est, StreamingHierarchy):
            type(est)(**est.get_params())
        else:
            _fit(est, data)


def test_fits_are_deterministic_and_snapshots_restore_exactly(case: Any,
                                                              data: sp.csr_array) -> None:
    make, _, _ = case
    a, b = _fit(make(), data), _fit(make(), data)
    assert _state(a) == _state(b)
    if isinstance(a, StreamingHierarchy):
        back = StreamingHierarchy.restore(a.snapshot())
        assert back.snapshot() == a.snapshot()
        more = data[:700]
        assert _state(back.partial_fit(more)) == _state(a.partial_fit(more))
    elif isinstance(a, HierarchicalMoM):
        model = HierarchyModel.from_bytes(a.model_.to_bytes())
        assert model.to_bytes() == a.model_.to_bytes()
        np.testing.assert_array_equal(model.predict(data), a.predict(data))
