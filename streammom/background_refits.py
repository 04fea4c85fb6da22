"""Refits off the caller's loop, with the outputs of refits in it (design §6 "Refits off the
loop").

:class:`BackgroundRefits` learns batches with a :class:`~streammom.StreamingHierarchy` and,
when the refit policy asks for a refit, hands the state to a helper process
(:class:`~streammom.refit_process.RefitProcess`) instead of refitting on the spot. Until the
refitted state comes back, every new batch is **held**, as given (raw events: the refit may
recycle vocabulary columns, and the events must be counted and mapped by the vocabulary it
returns). When the refit is collected its state replaces the engine and the held batches are
learned into it, in order, with the same batch boundaries — a refit that falls due among them
starts the next round. Each batch's routing is given to ``on_learned`` when the batch is
learned, now or later. The sums, tree, vocabulary and counters, **and every batch's labels**,
are therefore exactly those of the same batches learned with refits inline (``engine.learn``
refitting when due), byte for byte: what moves is only *when* a held batch's labels are
given, after the refit, as they would be had the caller waited for it. Meanwhile the caller
goes on (reads, decodes, validates the next batches), and the refit's work is on another core.
With ``labels="current"`` a held batch is labelled at once by the model of before the refit
(lower latency: a service keeps answering while it refits; the rows are looked up without
changing the vocabulary, :meth:`~streammom.vocab.Vocabulary.transform` ``update=False``) and
learned later all the same: the state is unchanged, the labels of the window depend on how
long the refit took.

The catching up is spread over the next calls: each learns held batches worth twice its own
batch, and its own batch joins the queue until the queue is empty, so no call pays for the
whole window. At most ``max_held_events`` are held, with at most ``max_held_features``
features between them (codes, tokens, or the rows' non-zeros: long documents weigh more than
short encounters); past that :meth:`BackgroundRefits.learn` waits (bounded memory, counted
in ``learn_waits``; a caller that reads its input can pause it before that:
:attr:`BackgroundRefits.pending` and :meth:`BackgroundRefits.would_wait` tell when). A batch
labelled at once (``labels="current"``) is held without its ``token``: only ``on_learned`` reads the
token, and it has had the batch already — a service's events (ids, offsets, the decoded record)
weigh ~6 times their codes, so the default bound is then 5 times higher at less memory.
A helper that is not ready yet (it is starting) or that failed leaves the refit to the
caller's thread, so nothing is ever lost or skipped; a helper that failed is started again at
the next refit. A *light* refit (the refinement alone, while the cost budget cannot afford a
full one: :meth:`StreamingHierarchy.refit <streammom.engine.StreamingHierarchy.refit>`) runs
on the caller's thread too: it needs no moment sums, takes ~0.1 s, and the state's trip to the
helper and back would cost the caller more.

>>> from streammom import StreamingHierarchy, Vocabulary
>>> from streammom.datasets import make_hierarchical_bernoulli
>>> X, _, _ = make_hierarchical_bernoulli(4_000, 60, 4, codes_per_event=8.0, random_state=1)
>>> events = [[f"c{j}" for j in row.indices] for row in X]
>>> inline = StreamingHierarchy(vocabulary=Vocabulary(capacity=64), max_leaves=4)
>>> for a in range(0, 4_000, 500):
...     _ = inline.learn(events[a:a + 500])
>>> labels = []
>>> off = BackgroundRefits(StreamingHierarchy(vocabulary=Vocabulary(capacity=64),
...                                           max_leaves=4), RefitProcess(),
...                        on_learned=lambda batch, X, routing: labels.append(routing.leaf_ids))
>>> for a in range(0, 4_000, 500):
...     off.learn(events[a:a + 500], token=a)
>>> off.settle(); off.close()
>>> off.engine.snapshot() == inline.snapshot(), len(labels)
(True, 8)
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from streammom.engine import StreamingHierarchy
from streammom.model import Routing
from streammom.refit_process import RefitProcess, RefitProcessError

__all__ = ["HELD_EVENTS_BOUND", "HELD_FEATURES_BOUND", "BackgroundRefits"]

_log = logging.getLogger("streammom.refits")

#: Consecutive helper failures after which refits stay in the caller's thread.
MAX_HELPER_FAILURES = 3

#: The default ``max_held_events`` of each ``labels`` mode: about the same memory in both
#: (measured on validated ~10-code encounters, ``bench/daemon_defaults.py``'s stream: ~1.3 KB
#: an event with its record, ~0.2 KB its codes alone — ~65 and ~55 MB at these bounds). On a
#: backlog the higher bound lets the loop read on through the young refits, which run one after
#: the other in the helper (~25 s of its CPU over the first 16,000 events at the daemon's
#: defaults) instead of pausing its input (BENCHMARKS.md "Held events without their records").
HELD_EVENTS_BOUND: dict[str, int] = {"current": 250_000, "after_refit": 50_000}

#: The default ``max_held_features``: the features (codes, tokens, non-zeros) of the held events
#: together, so that long documents are bounded too (~20 B a held code of an encounter, up to
#: ~60 B a token of a document whose words the JSON parser does not share: ≤ ~50–150 MB);
#: 250,000 encounters of ~10 codes.
HELD_FEATURES_BOUND = 2_500_000


class BackgroundRefits:
    """An engine whose refits run in a helper process, with the state of inline refits.

    Parameters
    ----------
    engine : StreamingHierarchy
        The engine; replaced by the refitted one at every collected refit (``engine``).
    process : RefitProcess or None
        The helper; None refits in the caller's thread (``engine.learn`` as usual).
    binary : bool, default True
        How events become rows (:meth:`~streammom.vocab.Vocabulary.transform`): 0/1 or counts.
    max_held_events : int >= 1 or None, default None
        Events held at most while a refit runs; the next batch waits for the refit
        (``learn_waits`` counts those waits). None: :data:`HELD_EVENTS_BOUND` of ``labels``
        (250,000 with ``"current"``, whose held batches keep only their rows or codes;
        50,000 with ``"after_refit"``, whose held batches keep their tokens too).
    max_held_features : int >= 1, default HELD_FEATURES_BOUND
        Features (codes or tokens of raw events, non-zeros of rows) of the held events
        together, at most; past it the next batch waits as past ``max_held_events``.
    labels : {"after_refit", "current"}, default "after_refit"
        When a held batch gets its labels: ``"after_refit"`` when it is learned, from the
        model it is learned with (the labels of inline refits, byte for byte); ``"current"``
        at once, from the model of before the refit (lower latency; the labels of a window
        then depend on how long the refit took).
    on_learned : callable or None
        ``on_learned(token, X, routing)`` once for every batch, with the ``token`` given to
        :meth:`learn`, its rows and its routing: when it is learned, or when it is held with
        ``labels="current"``.
    on_refit : callable or None
        Called with the engine after every refit, done here or collected from the helper
        (before the held batches are learned into it): logs, metrics, reports.
    """

    def __init__(self, engine: StreamingHierarchy, process: RefitProcess | None = None, *,
                 binary: bool = True, max_held_events: int | None = None,
                 max_held_features: int = HELD_FEATURES_BOUND,
                 labels: Literal["after_refit", "current"] = "after_refit",
                 on_learned: Callable[[Any, sp.csr_array, Routing], None] | None = None,
                 on_refit: Callable[[StreamingHierarchy], None] | None = None) -> None:
        if labels not in ("after_refit", "current"):
            raise ValueError(f"labels must be 'after_refit' or 'current', got {labels!r}")
        if max_held_events is None:
            max_held_events = HELD_EVENTS_BOUND[labels]
        if max_held_events < 1:
            raise ValueError(f"max_held_events must be >= 1, got {max_held_events}")
        if max_held_features < 1:
            raise ValueError(f"max_held_features must be >= 1, got {max_held_features}")
        self.engine = engine
        self.process = process
        self.binary = binary
        self.max_held_events = int(max_held_events)
        self.max_held_features = int(max_held_features)
        self.labels = labels
        self.on_learned = on_learned
        self.on_refit = on_refit
        self.held_events = 0  # events held, waiting to be learned
        self.held_features = 0  # their features (codes, tokens, non-zeros) together
        self.helper_refits = 0  # refits collected from the helper
        self.helper_failures = 0  # every failure of the helper, counted (metrics)
        self.learn_waits = 0  # learn calls that waited for the helper (held events at bound)
        self._consecutive_failures = 0
        # (items, timestamps, token, labelled, features)
        self._held: deque[tuple[Any, np.ndarray | None, Any, bool, int]] = deque()
        self._pending = False
        self._room_made = False  # make_room ran since the last learn, poll or drain
        if process is not None:
            process.start()  # it imports the library while the caller starts up

    @property
    def pending(self) -> bool:
        """A refit is running in the helper."""
        return self._pending

    @property
    def holding(self) -> bool:
        """Batches wait to be learned (a refit runs, or its held batches are being caught up):
        the state does not cover every batch given to :meth:`learn` yet."""
        return self._pending or bool(self._held)

    def would_wait(self, n: int) -> bool:
        """Whether :meth:`learn` of a batch of ``n`` events would wait for the refit running in
        the helper: one runs, and holding the batch would take the held events past
        ``max_held_events``, or their features past ``max_held_features`` (the batch's counted
        at the held events' mean: it is not read yet) — a caller that reads its input pauses
        it instead."""
        if not self._pending:
            return False
        features = n * self.held_features // self.held_events if self.held_events else 0
        return self._over(n, features)

    def _over(self, n: int, features: int) -> bool:
        """Holding ``n`` more events with ``features`` features would pass a bound."""
        return (self.held_events + n > self.max_held_events
                or self.held_features + features > self.max_held_features)

    def make_room(self, n: int) -> bool:
        """What :meth:`learn` does first for a batch of ``n`` events, done now: collect a
        finished refit and learn held batches worth up to ``2 n`` (which may start the next
        refit). True if the batch then fits without waiting (:meth:`would_wait`). The next
        :meth:`learn` does not do it again, so a caller that holds a batch back when it does
        not fit (the daemon pauses its input instead) never waits for a refit that this
        catching up started."""
        self.poll()
        self.drain(2 * n)
        self._room_made = True
        return not self.would_wait(n)

    def learn(self, items: Any, timestamps: Any = None, *, token: Any = None) -> None:
        """Learn a batch (raw events with a vocabulary, else a matrix of rows) now, or hold it
        while batches are held (a refit runs, or the ones it held are being caught up); its
        rows and routing go to ``on_learned(token, X, routing)`` when it is learned. Each call
        first learns held batches worth up to twice its own size, in order (unless
        :meth:`make_room` just did)."""
        n = _size(items)
        if not self._room_made:
            self.make_room(n)
        self._room_made = False
        # counted only for a batch that may be held (nothing holds after make_room: it is not)
        features = _features(items) if self.holding else 0
        while self.holding and self._over(n, features):
            if self._pending:
                self.learn_waits += 1
                self.poll(timeout=None)
            else:
                self.drain(max(1, self.held_events + n - self.max_held_events))
        ts = None if timestamps is None else np.asarray(timestamps, dtype=np.float64)
        if self.holding:
            labelled = self.labels == "current"
            if labelled:
                self._label_now(items, token)
            # a labelled batch's token is not read again: held without it (memory)
            self._held.append((items, ts, None if labelled else token, labelled, features))
            self.held_events += n
            self.held_features += features
        else:
            self._learn_now(items, ts, token)

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Collect a finished refit (waiting up to ``timeout``; None: until it ends): its state
        becomes the engine's; True if a refit was collected. The held batches are learned
        into it by :meth:`drain`."""
        self._room_made = False
        if not self._pending:
            return False
        assert self.process is not None
        try:
            result = self.process.collect(timeout)
        except RefitProcessError as exc:
            self._helper_failed(exc)
            self.engine.refit()  # the state sent is still the engine's: refit it here
        else:
            if result is None:
                return False
            self._consecutive_failures = 0
            self.helper_refits += 1
            self.engine = result.engine
        self._pending = False
        self._refitted()
        return True

    def drain(self, max_events: int | None = None) -> None:
        """Learn held batches in order, whole, until about ``max_events`` events (at least one
        batch; None: all), stopping when one of them starts a refit in the helper."""
        self._room_made = False
        learned = 0
        while self._held and not self._pending and (max_events is None
                                                     or learned < max_events):
            items, ts, token, labelled, features = self._held.popleft()
            size = _size(items)
            self.held_events -= size
            self.held_features -= features
            learned += size
            self._learn_now(items, ts, token, labelled)

    def settle(self) -> None:
        """Wait until no refit is running and every held batch is learned (before a
        checkpoint or a snapshot: the state then covers every batch given to :meth:`learn`)."""
        while self.holding:
            self.poll(timeout=None)
            self.drain()

    def close(self) -> None:
        """Settle, then stop the helper."""
        self.settle()
        if self.process is not None:
            self.process.close()

    # ------------------------------------------------------------------ internals
    def _label_now(self, items: Any, token: Any) -> None:
        """``labels="current"``: a held batch's labels from the current model, now. Its rows
        are looked up without changing the vocabulary (tokens it does not know yet are left
        out); the batch is learned later like any held batch."""
        X = self._rows(items, update=False)
        if self.on_learned is not None:
            self.on_learned(token, X, self.engine.assign(X))

    def _learn_now(self, items: Any, ts: np.ndarray | None, token: Any,
                   labelled: bool = False) -> None:
        X = self._rows(items, update=True)
        label = self.on_learned is not None and not labelled  # else nothing reads the labels
        routing = self.engine._learn(X, None, ts, refit=False, label=label)
        if label:
            assert self.on_learned is not None and routing is not None
            self.on_learned(token, X, routing)
        if self.engine.refit_due():
            self._start_refit()

    def _rows(self, items: Any, *, update: bool) -> Any:
        """A batch's rows: raw events mapped by the engine's vocabulary (``update=False``: looked
        up only, :meth:`~streammom.vocab.Vocabulary.transform`), or the rows as given."""
        vocab = self.engine.vocabulary
        return items if vocab is None else vocab.transform(items, binary=self.binary,
                                                           update=update)

    def _start_refit(self) -> None:
        """A full refit goes to the helper when it is up; a light one
        (:meth:`~streammom.engine.StreamingHierarchy.next_refit_is_light`: the refinement
        alone, ~0.1 s at d = 2,000) runs here, now — shipping the whole state to the helper
        and back would cost this thread more than the refit and hold the batches meanwhile."""
        proc = self.process
        if proc is not None and self._consecutive_failures < MAX_HELPER_FAILURES \
                and proc.ready() and not self.engine.next_refit_is_light():
            try:
                proc.submit(self.engine)
            except RefitProcessError as exc:
                self._helper_failed(exc)
            else:
                self._pending = True
                return
        self.engine.refit(light=None)
        self._refitted()

    def _refitted(self) -> None:
        if self.on_refit is not None:
            self.on_refit(self.engine)

    def _helper_failed(self, exc: RefitProcessError) -> None:
        self.helper_failures += 1
        self._consecutive_failures += 1
        gives_up = self._consecutive_failures >= MAX_HELPER_FAILURES
        _log.error("refit process failed: refitting in this thread%s",
                   " from now on" if gives_up else " (the helper restarts for the next refit)",
                   extra={"error": str(exc), "failures": self._consecutive_failures})



def _size(items: Any) -> int:
    """Events in a batch: raw events or rows."""
    return items.shape[0] if sp.issparse(items) else len(items)


def _features(items: Any) -> int:
    """Features in a batch: the codes or tokens of raw events (each event's ``len``), or the
    non-zeros of rows."""
    return int(items.nnz) if sp.issparse(items) else sum(map(len, items))
