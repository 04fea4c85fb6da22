"""The engine's event clock and lazy exponential forgetting (design §3 "decay").

Exact exponential forgetting with a lazy global scale: an event at time τ is stored with weight
w·2^((τ − τ_ref)/H), so nothing is rescaled per batch; the true (decayed) sums are the stored
ones times 2^(−(now − τ_ref)/H). Moments are ratios of sums, so the scale cancels; only
absolute thresholds (``min_split_weight``) use it. The stored sums are renormalised
(τ_ref ← now) when the exponent grows past :data:`RENORM_EXPONENT` — exact up to rounding.

Time is event time, never wall-clock (runs are reproducible): the event's ``timestamps`` in
seconds, or its position in the stream when the half-life is counted in events.

>>> clock = DecayClock()
>>> w, rescale = clock.stored_weights(np.ones(3), np.array([0.0, 1.0, 2.0]), half_life=1.0)
>>> w.tolist(), rescale, clock.scale(1.0)
([1.0, 2.0, 4.0], None, 0.25)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RENORM_EXPONENT", "DecayClock"]

RENORM_EXPONENT = 64.0


@dataclass
class DecayClock:
    """Event-time state of one engine.

    ``time_ref`` is τ_ref of the stored sums (None until decay starts), ``now`` the latest
    event time seen, ``refit_at`` the event time of the last refit (the time trigger's origin).
    The half-life is passed in by the engine (its parameter may change between calls).
    """

    time_ref: float | None = None
    now: float | None = None
    refit_at: float | None = None

    def scale(self, half_life: float | None) -> float:
        """Factor turning stored sums into true (decayed) sums now."""
        if half_life is None or self.time_ref is None or self.now is None:
            return 1.0
        return float(np.exp2(-(self.now - self.time_ref) / half_life))

    def stored_weights(self, w: np.ndarray, tau: np.ndarray | None, half_life: float | None
                       ) -> tuple[np.ndarray, float | None]:
        """Event weights in the lazily scaled units of the sums; advances the clock.

        ``tau`` are the events' times (None: no event time, hence no decay). Returns the
        stored weights and, when the exponent would have passed :data:`RENORM_EXPONENT` (τ_ref
        then moves to the batch's latest time), the factor by which the caller must rescale
        every stored sum first; else None.
        """
        if tau is None:
            return w, None
        top = float(tau.max())
        self.now = top if self.now is None else max(self.now, top)
        if self.refit_at is None:
            self.refit_at = float(tau.min())
        if half_life is None:
            return w, None
        if self.time_ref is None:
            self.time_ref = float(tau[0])
        expo = (tau - self.time_ref) / half_life
        rescale = None
        if float(expo.max()) > RENORM_EXPONENT:
            rescale = float(np.exp2(-(top - self.time_ref) / half_life))
            self.time_ref = top
            expo = (tau - self.time_ref) / half_life
        return w * np.exp2(expo), rescale

    def since_refit(self) -> float | None:
        """Event time passed since the last refit (None without event time)."""
        if self.now is None or self.refit_at is None:
            return None
        return self.now - self.refit_at

    def merge(self, other: DecayClock, half_life: float | None) -> float:
        """Take in another engine's clock; the factor that brings its stored sums to this
        clock's τ_ref (2^((τ_ref,other − τ_ref)/H); 1 without decay)."""
        factor = 1.0
        if half_life is not None and other.time_ref is not None:
            if self.time_ref is None:
                self.time_ref = other.time_ref
            factor = float(np.exp2((other.time_ref - self.time_ref) / half_life))
        a, b = self.now, other.now
        self.now = b if a is None else a if b is None else max(a, b)
        return factor
