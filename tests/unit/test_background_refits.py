"""Refits in a helper process (streammom.background_refits, streammom.refit_process,
streammom.state_pipe): the state and every batch's labels are those of inline refits, byte for
byte, whatever the timing; held batches leave the engine and the vocabulary alone until they
are learned; a helper that dies costs nothing but a refit on the caller's thread."""

from __future__ import annotations

import fcntl
import io
import itertools
import json
import os
import struct

import numpy as np
import pytest

from streammom import StreamingHierarchy, Vocabulary
from streammom.background_refits import BackgroundRefits
from streammom.datasets import make_hierarchical_bernoulli
from streammom.refit_process import (
    PIPE_BYTES,
    RefitProcess,
    RefitProcessError,
    RefitResult,
    widen_pipe,
)
from streammom.state_pipe import StatePipeError, read_state, write_state

N_EVENTS, BATCH = 12_000, 400


@pytest.fixture(scope="module")
def events() -> list[list[str]]:
    """Code sets over 120 codes, 8 clusters; a vocabulary of 96 columns fills up, so the refits
    also recycle columns (the vocabulary changes inside the refit)."""
    X, _, _ = make_hierarchical_bernoulli(N_EVENTS, 120, 8, codes_per_event=8.0,
                                          random_state=3)
    return [[f"c{j}" for j in row.indices] for row in X]


def _engine() -> StreamingHierarchy:
    return StreamingHierarchy(vocabulary=Vocabulary(capacity=96), max_leaves=8,
                              reservoir_size=256)


@pytest.fixture(scope="module")
def inline_run(events: list[list[str]]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The snapshot and every batch's labels (model version, leaf ids) with inline refits."""
    eng = _engine()
    labels = []
    for a in range(0, N_EVENTS, BATCH):
        routing = eng.learn(events[a:a + BATCH])
        labels.append((routing.model_version, routing.leaf_ids.tobytes()))
    assert eng.vocabulary.recycled_count > 0  # the refits did change the vocabulary
    assert len({v for v, _ in labels}) > 3  # labels of several model versions
    return eng.snapshot(), labels


class Labels:
    """``on_learned``: every batch's token and labels, in the order they were learned."""

    def __init__(self) -> None:
        self.got: list[tuple[int, int, bytes]] = []

    def __call__(self, token: int, X: object, routing: object) -> None:
        self.got.append((token, routing.model_version, routing.leaf_ids.tobytes()))

    def by_batch(self) -> list[tuple[int, bytes]]:
        assert [t for t, _, _ in self.got] == list(range(len(self.got)))  # in order, once
        return [(v, ids) for _, v, ids in self.got]


@pytest.fixture
def helper() -> RefitProcess:
    proc = RefitProcess()
    assert proc.wait_ready(120.0), "the refit process did not start"
    yield proc
    proc.close()


def test_refits_in_the_helper_leave_the_state_and_labels_of_inline_refits(
        events: list[list[str]], inline_run: tuple[bytes, list], helper: RefitProcess) -> None:
    labels = Labels()
    off = BackgroundRefits(_engine(), helper, on_learned=labels)
    most_held = 0
    for i, a in enumerate(range(0, N_EVENTS, BATCH)):
        seen = off.engine.n_events_seen_
        off.learn(events[a:a + BATCH], token=i)
        most_held = max(most_held, off.held_events)
        # the catching up is spread: a call learns its batch and at most two held ones
        assert off.engine.n_events_seen_ - seen <= 3 * BATCH
        assert off.engine.n_events_seen_ + off.held_events == min(a + BATCH, N_EVENTS)
    off.settle()
    assert off.helper_refits >= 3 and off.helper_failures == 0
    assert most_held > 0  # batches were held while refits ran
    assert off.engine.n_events_seen_ == N_EVENTS
    assert off.engine.snapshot() == inline_run[0]
    assert labels.by_batch() == inline_run[1]


def test_light_refits_stay_on_the_callers_thread_with_the_same_result(
        events: list[list[str]], helper: RefitProcess) -> None:
    """A budget that affords light refits early: the full refits go to the helper, the light
    ones (the refinement alone) run on the caller's thread, and state and labels are still
    those of inline refits, byte for byte."""
    def engine() -> StreamingHierarchy:
        return StreamingHierarchy(vocabulary=Vocabulary(capacity=96), max_leaves=8,
                                  reservoir_size=256, refit_budget=0.9)

    inline, inline_labels = engine(), []
    for a in range(0, N_EVENTS, BATCH):
        routing = inline.learn(events[a:a + BATCH])
        inline_labels.append((routing.model_version, routing.leaf_ids.tobytes()))
    assert inline.n_light_refits_ >= 2
    labels = Labels()
    off = BackgroundRefits(engine(), helper, on_learned=labels)
    for i, a in enumerate(range(0, N_EVENTS, BATCH)):
        off.learn(events[a:a + BATCH], token=i)
    off.settle()
    assert off.engine.snapshot() == inline.snapshot()
    assert labels.by_batch() == inline_labels
    full = off.engine.n_refits_ - off.engine.n_light_refits_
    assert off.engine.n_light_refits_ == inline.n_light_refits_
    assert off.helper_refits == full and off.helper_failures == 0


def test_current_labels_come_at_once_and_leave_the_state_alone(
        events: list[list[str]], inline_run: tuple[bytes, list], helper: RefitProcess) -> None:
    """``labels="current"``: every batch is labelled during its own call (held ones by the
    model of before the refit, their unknown codes left out, the vocabulary untouched);
    the state is the one of inline refits all the same."""
    labels = Labels()
    off = BackgroundRefits(_engine(), helper, labels="current", on_learned=labels)
    held_calls = 0
    for i, a in enumerate(range(0, N_EVENTS, BATCH)):
        vocab = off.engine.vocabulary
        before = (len(vocab), vocab.oov_count, off.engine.model_version_)
        was_holding = off.holding
        off.learn(events[a:a + BATCH], token=i)
        assert len(labels.got) == i + 1  # labelled in its own call
        if was_holding and off.held_events and off.engine.vocabulary is vocab:
            held_calls += 1  # nothing collected in this call: the model and vocabulary
            assert (len(vocab), vocab.oov_count) == before[:2]  # are those of before
            assert labels.got[-1][1] == before[2]
    off.settle()
    assert held_calls > 0
    assert off.engine.snapshot() == inline_run[0]
    got, want = labels.by_batch(), inline_run[1]
    assert all(g[0] <= w[0] for g, w in zip(got, want, strict=True))
    assert got != want  # some batches were labelled by an older model


def test_held_batches_leave_the_engine_and_the_vocabulary_alone(
        events: list[list[str]], helper: RefitProcess) -> None:
    labels = Labels()
    off = BackgroundRefits(_engine(), helper, on_learned=labels)
    a = i = 0
    while not off.pending:
        off.learn(events[a:a + BATCH], token=i)
        a, i = a + BATCH, i + 1
    eng = off.engine
    vocab = eng.vocabulary
    before = (vocab.tokens, vocab.counts.copy(), vocab.oov_count, eng.n_events_seen_)
    batch = [*events[a:a + BATCH], ["never-seen-code"]]
    off.learn(batch, token=i)
    # the refit (state in, refit, state out) takes far longer than the step between two calls
    assert off.pending and off.held_events == len(batch)
    assert len(labels.got) == i  # no labels for the held batch yet
    assert (vocab.tokens, vocab.oov_count, eng.n_events_seen_) == (
        before[0], before[2], before[3])
    assert np.array_equal(vocab.counts, before[1])
    off.settle()
    assert off.held_events == 0 and not off.holding
    assert off.engine.n_events_seen_ == a + len(batch)
    assert len(labels.by_batch()) == i + 1


def test_a_helper_that_dies_leaves_the_refit_to_the_caller(
        events: list[list[str]], inline_run: tuple[bytes, list], helper: RefitProcess) -> None:
    labels = Labels()
    off = BackgroundRefits(_engine(), helper, on_learned=labels)
    killed = restarted = False
    for i, a in enumerate(range(0, N_EVENTS, BATCH)):
        off.learn(events[a:a + BATCH], token=i)
        if off.pending and not killed:
            helper._proc.kill()  # type: ignore[union-attr]  # the helper dies mid-refit
            helper._proc.wait()  # type: ignore[union-attr]
            killed = True
        elif killed and not restarted and off.helper_failures:
            assert helper.wait_ready(120.0)  # started again by the next refit's request
            restarted = True
    off.settle()
    assert killed and off.helper_failures == 1
    assert off.helper_refits >= 1  # the helper was started again for the next refits
    assert off.engine.snapshot() == inline_run[0]
    assert labels.by_batch() == inline_run[1]


def test_held_events_never_pass_the_bound(events: list[list[str]],
                                          inline_run: tuple[bytes, list],
                                          helper: RefitProcess) -> None:
    off = BackgroundRefits(_engine(), helper, max_held_events=2 * BATCH)
    for a in range(0, N_EVENTS, BATCH):
        off.learn(events[a:a + BATCH])
        assert off.held_events <= 2 * BATCH
    off.settle()
    assert off.engine.snapshot() == inline_run[0]


def test_held_features_never_pass_their_bound(events: list[list[str]],
                                              inline_run: tuple[bytes, list],
                                              helper: RefitProcess) -> None:
    """Long documents weigh more than short encounters: the held events' features (codes,
    tokens) are bounded as well as their count; the state is that of inline refits."""
    bound = 2 * sum(map(len, events[:BATCH]))  # about two batches' codes
    off = BackgroundRefits(_engine(), helper, max_held_events=10**9, max_held_features=bound)
    most = 0
    for a in range(0, N_EVENTS, BATCH):
        off.learn(events[a:a + BATCH])
        assert off.held_features <= bound
        assert off.held_features == sum(map(len, (e for b in off._held for e in b[0])))
        most = max(most, off.held_events)
    off.settle()
    assert off.held_features == 0 and most > 0  # batches were held, within the bound
    assert off.engine.snapshot() == inline_run[0]


class _GatedHelper(RefitProcess):
    """A real helper whose finished refits are collected only once the gate is open: the
    timing of a slow refit, made deterministic (a waiting collect still waits for it)."""

    gate_open = False

    def collect(self, timeout: float | None = 0.0) -> RefitResult | None:
        if not self.gate_open and timeout is not None:
            return None
        return super().collect(None)


def test_make_room_catches_up_first_so_a_refit_it_starts_is_not_waited_for(
        events: list[list[str]]) -> None:
    """Held batches [500, 100 × 4] (bound 1,000, a refit every 500 events): catching up before
    a batch of 700 learns the 500 and starts the next refit with 400 still held, so 700 more
    do not fit. ``learn`` alone then waits for that refit inside the call; ``make_room`` says
    so first, and a caller that waits for the refit outside (the daemon: input paused, polling
    on) and makes room again learns the batch without any wait. Same state either way."""

    def engine() -> StreamingHierarchy:
        return StreamingHierarchy(vocabulary=Vocabulary(capacity=96), max_leaves=8,
                                  reservoir_size=256, refit_every=500)

    sizes = [500, 500, 100, 100, 100, 100, 700]
    bounds = np.cumsum([0, *sizes])
    batches = [events[a:b] for a, b in itertools.pairwise(bounds)]
    inline = engine()
    for batch in batches:
        inline.learn(batch)

    def run(*, make_room: bool) -> BackgroundRefits:
        helper = _GatedHelper()
        assert helper.wait_ready(120.0), "the refit process did not start"
        off = BackgroundRefits(engine(), helper, max_held_events=1_000)
        off.learn(batches[0])
        assert off.pending  # the first refit, in the helper
        for batch in batches[1:-1]:
            off.learn(batch)
        assert off.held_events == 900 and off.pending
        helper.gate_open = True
        last = batches[-1]
        if make_room:
            assert not off.make_room(len(last))  # the catching up started the next refit
            assert off.pending and off.held_events == 400
            off.poll(timeout=None)  # the caller's own wait, outside learn
            assert off.make_room(len(last))
        off.learn(last)
        off.settle()
        helper.close()
        return off

    control = run(make_room=False)
    assert control.learn_waits == 1  # the case: learn waited for the refit it started
    off = run(make_room=True)
    assert off.learn_waits == 0 and off.helper_refits == control.helper_refits == 3
    assert off.engine.snapshot() == control.engine.snapshot() == inline.snapshot()


class _Token:
    """A batch's token the test can watch being released (``weakref``)."""


@pytest.mark.parametrize("labels", ["current", "after_refit"])
def test_a_held_batch_labelled_at_once_is_held_without_its_token(
        events: list[list[str]], labels: str) -> None:
    """With ``labels="current"`` a held batch has had its labels when it is held: its token
    (a service's decoded events, ~6 times the codes' memory) is released then, not kept until
    the batch is learned; with ``"after_refit"`` the token is held with the batch and given to
    ``on_learned`` once it is learned. The default bound of held events follows
    (``HELD_EVENTS_BOUND``). Same state either way."""
    import gc
    import weakref

    from streammom.background_refits import HELD_EVENTS_BOUND

    def engine() -> StreamingHierarchy:
        return StreamingHierarchy(vocabulary=Vocabulary(capacity=96), max_leaves=8,
                                  reservoir_size=256, refit_every=500)

    inline = engine()
    inline.learn(events[:500])
    inline.learn(events[500:900])
    tokens_seen: list[object] = []
    helper = _GatedHelper()
    assert helper.wait_ready(120.0), "the refit process did not start"
    off = BackgroundRefits(engine(), helper, labels=labels,  # type: ignore[arg-type]
                           on_learned=lambda token, X, routing: tokens_seen.append(token))
    assert off.max_held_events == HELD_EVENTS_BOUND[labels]
    assert HELD_EVENTS_BOUND["current"] > HELD_EVENTS_BOUND["after_refit"]
    off.learn(events[:500], token=_Token())
    assert off.pending  # the first refit, in the helper (collected once the gate opens)
    token = _Token()
    watch = weakref.ref(token)
    off.learn(events[500:900], token=token)
    assert off.held_events == 400
    del token
    tokens_seen.clear()
    gc.collect()
    assert (watch() is None) == (labels == "current")
    helper.gate_open = True
    off.settle()
    helper.close()
    assert off.engine.snapshot() == inline.snapshot()
    # after_refit: the held token reaches on_learned when its batch is learned
    assert [t is not None and t is watch() for t in tokens_seen] == (
        [] if labels == "current" else [True])


def test_without_a_helper_refits_run_inline(events: list[list[str]],
                                            inline_run: tuple[bytes, list]) -> None:
    labels = Labels()
    off = BackgroundRefits(_engine(), None, on_learned=labels)
    for i, a in enumerate(range(0, N_EVENTS, BATCH)):
        off.learn(events[a:a + BATCH], token=i)
        assert not off.holding
    assert off.engine.snapshot() == inline_run[0]
    assert labels.by_batch() == inline_run[1]


def test_a_refit_the_helper_cannot_do_is_an_error_not_a_result() -> None:
    proc = RefitProcess(timeout_s=60.0)
    try:
        assert proc.wait_ready(120.0)
        eng = _engine()
        eng.learn([["a", "b"], ["b", "c"]] * 50)
        proc.submit(eng)
        with pytest.raises(RefitProcessError):
            proc.submit(eng)  # busy: one refit at a time
        result = proc.collect(None)
        assert result is not None and result.engine.n_events_seen_ == 100
        with pytest.raises(RefitProcessError, match="no refit was submitted"):
            proc.collect(0.0)
    finally:
        proc.close()


def test_a_nice_helper_runs_below_the_callers_priority_and_refits_the_same(
        events: list[list[str]]) -> None:
    """``nice=5``: the helper's niceness is the caller's + 5 (capped at 19), and its refit is
    the caller's own, byte for byte (priority changes when a refit ends, not what it is)."""
    eng = _engine()
    eng.learn(events[:3_000], refit=False)
    inline = StreamingHierarchy.from_archive(*eng.to_archive())
    inline.refit()
    proc = RefitProcess(nice=5)
    try:
        assert proc.wait_ready(120.0)
        assert proc.pid is not None
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(own + 5, 19)
        proc.submit(eng)
        result = proc.collect(None)
        assert result is not None
        assert result.engine.snapshot() == inline.snapshot()
    finally:
        proc.close()
    with pytest.raises(ValueError, match="nice"):
        RefitProcess(nice=20)
    with pytest.raises(ValueError, match="nice"):
        RefitProcess(nice=-1)


def test_a_refit_past_its_timeout_is_abandoned(events: list[list[str]]) -> None:
    proc = RefitProcess(timeout_s=0.001)  # no helper reads, refits and sends a state that fast
    try:
        assert proc.wait_ready(120.0)
        eng = _engine()
        eng.learn(events[:2_000], refit=False)
        proc.submit(eng)
        with pytest.raises(RefitProcessError, match="took more than"):
            proc.collect(None)
        assert not proc.busy and proc._proc is None  # stopped; started again when asked
    finally:
        proc.close()


# ---------------------------------------------------------------------- the pipe format
def test_state_pipe_round_trips_every_plain_dtype() -> None:
    arrays = {"f": np.linspace(0, 1, 7), "f32": np.ones((2, 3), np.float32),
              "i": np.arange(5, dtype=np.int64), "u": np.arange(3, dtype=np.uint8),
              "b": np.array([True, False]), "empty": np.zeros((0, 4)),
              "strided": np.arange(12.0).reshape(3, 4)[:, ::2]}
    buf = io.BytesIO()
    write_state(buf, {"k": [1, 2.5, None]}, arrays, info={"ok": True})
    buf.seek(0)
    info, manifest, back = read_state(buf)
    assert info == {"ok": True} and manifest == {"k": [1, 2.5, None]}
    assert list(back) == list(arrays)
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype and np.array_equal(back[name], arr)
    with pytest.raises(EOFError):
        read_state(buf)  # at the end: no message


def _message(header: dict, payload: bytes = b"") -> io.BytesIO:
    text = json.dumps(header).encode()
    return io.BytesIO(struct.pack("<Q", len(text)) + text + payload)


@pytest.mark.parametrize("header, payload, match", [
    ({"info": {}, "manifest": {}, "arrays": [["x", "|O", [1]]]}, b"", "plain number"),
    ({"info": {}, "manifest": {}, "arrays": [["x", "<f8", [-1]]]}, b"", "negative"),
    ({"info": {}, "manifest": {}, "arrays": [["x", "<f8", [4]]]}, b"\0" * 8, "middle"),
    ({"info": {}, "manifest": {}}, b"", "malformed"),
    ({"info": [], "manifest": {}, "arrays": []}, b"", "malformed"),
])
def test_state_pipe_refuses_what_is_not_a_state(header: dict, payload: bytes, match: str) -> None:
    with pytest.raises(StatePipeError, match=match):
        read_state(_message(header, payload))


def test_state_pipe_refuses_a_huge_header() -> None:
    with pytest.raises(StatePipeError, match="header"):
        read_state(io.BytesIO(struct.pack("<Q", 1 << 40)))


def _pipe_max_bytes() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size") as f:
            return int(f.read())
    except OSError:
        return 0


@pytest.mark.skipif(not hasattr(fcntl, "F_GETPIPE_SZ") or _pipe_max_bytes() < PIPE_BYTES,
                    reason="no Linux pipe sizes of 1 MiB here")
def test_the_state_pipes_are_widened_so_a_state_crosses_in_few_turns(
        helper: RefitProcess) -> None:
    """A 20 MB state crosses a 64 KiB pipe in ~320 turns of the two processes; the helper's
    pipes buffer PIPE_BYTES each way, and a state still round-trips through them."""
    proc = helper._proc
    assert proc is not None and proc.stdin is not None and proc.stdout is not None
    for stream in (proc.stdin, proc.stdout):
        assert fcntl.fcntl(stream.fileno(), fcntl.F_GETPIPE_SZ) == PIPE_BYTES
    eng = _engine()
    eng.learn([["a", "b"], ["b", "c"]] * 50)
    helper.submit(eng)
    result = helper.collect(None)
    assert result is not None and result.engine.n_events_seen_ == 100


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="no Linux pipe sizes here")
def test_widen_pipe_keeps_the_old_size_when_the_kernel_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r, w = os.pipe()
    try:
        before = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        real = fcntl.fcntl

        def refuse(fd: int, cmd: int, *arg: int) -> int:
            if cmd == fcntl.F_SETPIPE_SZ:
                raise PermissionError(1, "Operation not permitted")  # the user's pipe quota
            return real(fd, cmd, *arg)

        monkeypatch.setattr(fcntl, "fcntl", refuse)
        assert widen_pipe(w, PIPE_BYTES) == before
        with pytest.raises(ValueError, match="pipe size"):
            widen_pipe(w, 1 << 40)  # would wrap around in the C int fcntl passes
    finally:
        os.close(r)
        os.close(w)
