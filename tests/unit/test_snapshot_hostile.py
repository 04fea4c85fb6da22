"""Crafted snapshot files (issue #12, item 10): the offline tools stay bounded and answer
``error: …`` with exit status 2, never a traceback, a hang or gigabytes of memory.

Every hostile file is built here, byte by byte where zipfile would refuse to write it: deflate
bombs (a member declaring a small size that inflates hugely, one honestly declaring more than
the limit), lying sizes and names in the central directory, ``.npy`` headers with absurd shapes
or dtypes, deep or oversized manifests, trees with cycles, corrupt and truncated files.

Library-level checks run in-process under :mod:`tracemalloc` (numpy reports its buffers to it);
everything that could hang or exhaust memory on a broken reader (tree cycles, the CLI) runs in a
child process with an address-space limit and a timeout.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sample_models import small_tree

from streammom.model import HierarchyModel, TreeNode
from streammom.serialization import SnapshotFormatError, archive_bytes, read_archive

MIB = 1 << 20
PEAK_LIMIT = 32 * MIB  # what reading any hostile archive may allocate (tracemalloc peak)
RSS_SLACK = 96 * MIB  # a CLI run on a hostile file vs. the same command on a valid file
CHILD_ADDRESS_SPACE = 3 << 30  # a broken reader hits MemoryError here, not the machine's RAM
CHILD_TIMEOUT = 60.0


# --------------------------------------------------------------------------- zip crafting
@dataclass
class _Member:
    """One ZIP entry, written verbatim: the headers say whatever the test wants."""

    name: str
    stream: bytes  # the bytes stored in the archive (raw deflate for method 8)
    size: int  # uncompressed size declared in both headers
    crc: int  # CRC-32 declared in both headers
    method: int = zipfile.ZIP_DEFLATED
    flags: int = 0
    local_name: str | None = None  # a different name in the local header


def _deflate(data: bytes) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    return co.compress(data) + co.flush()


def _member(name: str, data: bytes, **kw: Any) -> _Member:
    """An honest member (sizes and CRC of ``data``) unless ``kw`` overrides them."""
    fields: dict[str, Any] = {"stream": _deflate(data), "size": len(data),
                              "crc": zlib.crc32(data)}
    fields.update(kw)
    return _Member(name, **fields)


def _zip(members: list[_Member]) -> bytes:
    out, central = bytearray(), bytearray()
    for m in members:
        name, local = m.name.encode(), (m.local_name or m.name).encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, m.flags, m.method, 0, 0x21, m.crc,
                           len(m.stream), m.size, len(local), 0) + local + m.stream
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, m.flags, m.method, 0,
                               0x21, m.crc, len(m.stream), m.size, len(name), 0, 0, 0, 0,
                               0o644 << 16, offset) + name
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                       cd_offset, 0)
    return bytes(out)


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npy_header(descr: Any, shape: tuple[int, ...], *, version: tuple[int, int] = (1, 0)) -> bytes:
    """A ``.npy`` header (magic + dict) that says anything, e.g. a shape of 10**12 floats."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode("latin1")
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    if version == (1, 0):
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
    return b"\x93NUMPY" + bytes(version) + struct.pack("<I", len(header)) + header


def _archive_members(raw: bytes) -> list[_Member]:
    """The members of a valid archive as honest :class:`_Member` objects (to tamper with)."""
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return [_member(i.filename, zf.read(i)) for i in zf.infolist()]


def _replace(raw: bytes, name: str, member: _Member) -> bytes:
    return _zip([member if m.name == name else m for m in _archive_members(raw)])


# --------------------------------------------------------------------------- valid sources
def _model_archive(edit: Callable[[dict[str, Any], dict[str, np.ndarray]], None]) -> bytes:
    manifest, arrays = small_tree().to_archive()
    edit(manifest, arrays)
    return archive_bytes(manifest, arrays)


def _nodes_by_id(manifest: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {n["id"]: n for n in manifest["nodes"]}


@pytest.fixture(scope="module")
def engine_archive() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A small fitted engine (root + 2 leaves) as manifest + arrays."""
    from streammom import StreamingHierarchy
    from streammom.datasets import make_hierarchical_bernoulli

    X, *_ = make_hierarchical_bernoulli(4000, 120, 4, codes_per_event=12, random_state=3)
    eng = StreamingHierarchy(120, max_depth=1, refit_every=4000, min_split_weight=500,
                             reservoir_size=64)
    eng.learn(X)
    eng.refit()
    assert len(eng.nodes_) == 3
    return eng.to_archive()


def _engine_variant(base: tuple[dict[str, Any], dict[str, np.ndarray]],
                    edit: Callable[[dict[str, Any], dict[str, np.ndarray]], None]) -> bytes:
    manifest, arrays = json.loads(json.dumps(base[0])), dict(base[1])
    edit(manifest, arrays)
    return archive_bytes(manifest, arrays)


def _root_is_its_own_child(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    root = _nodes_by_id(manifest)[0]
    root["children"] = [0, root["children"][1]]


def _two_cycle_engine(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Beside the valid tree: 7 and 8 are each other's parent and child (leaves 9, 10 hang
    off them), every link consistent both ways, none reachable from the root."""
    nodes = _nodes_by_id(manifest)
    for nid, parent, children, like in ((7, 8, [8, 9], 0), (8, 7, [7, 10], 0),
                                        (9, 7, [], 1), (10, 8, [], 1)):
        node = json.loads(json.dumps(nodes[like]))
        node.update(id=nid, parent=parent, depth=1, children=children)
        manifest["nodes"].append(node)
        for key, arr in list(arrays.items()):
            if key.startswith(f"n{like}_"):
                arrays[f"n{nid}_{key[len(f'n{like}_'):]}"] = arr


def _checkpoint(engine_bytes: bytes) -> bytes:
    """A daemon checkpoint wrapping an (edited) engine archive."""
    manifest, arrays = read_archive(engine_bytes)
    return archive_bytes(
        {"format": "streammom", "kind": "daemon-checkpoint", "schema_version": 1,
         "service_version": "test", "created": 0.0, "offsets": {}, "counters": {},
         "engine": manifest},
        {f"engine__{k}": v for k, v in arrays.items()},
    )


# --------------------------------------------------------------------------- bombs
@pytest.fixture(scope="module")
def zero_stream() -> tuple[bytes, int]:
    """256 MiB of zeros behind a ``.npy`` header claiming 2**27 float64 (1 GiB), deflated
    (~256 KiB): ``(stream, crc32 of everything)``."""
    co = zlib.compressobj(1, zlib.DEFLATED, -15)
    header = _npy_header("<f8", (1 << 27,))
    parts, crc = [co.compress(header)], zlib.crc32(header)
    chunk = bytes(MIB)
    for _ in range(256):
        parts.append(co.compress(chunk))
        crc = zlib.crc32(chunk, crc)
    parts.append(co.flush())
    return b"".join(parts), crc


def _bomb_lying_small(stream: tuple[bytes, int], *, crc_of: str) -> bytes:
    """A valid model archive whose ``means`` member declares 128 B of data but inflates to
    256 MiB; ``crc_of`` is "declared" (CRC of the declared prefix) or "all" (of the stream)."""
    data, crc_all = stream
    header = _npy_header("<f8", (1 << 27,))
    size = len(header) + 128
    crc = zlib.crc32(bytes(128), zlib.crc32(header)) if crc_of == "declared" else crc_all
    return _replace(small_tree().to_bytes(), "means.npy", _Member("means.npy", data, size, crc))


def _bounded(action: Callable[[], Any], *, seconds: float = 10.0) -> SnapshotFormatError:
    """Run ``action``: it must raise SnapshotFormatError (one line) fast and allocate little."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(SnapshotFormatError) as info:
            action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < seconds
    assert peak < PEAK_LIMIT, f"peak {peak / MIB:.0f} MiB reading a hostile archive"
    assert "\n" not in str(info.value)
    return info.value


# =========================================================================== read_archive
def test_deflate_bomb_lying_about_its_size_is_refused_without_inflating(
    zero_stream: tuple[bytes, int],
) -> None:
    for crc_of in ("declared", "all"):
        raw = _bomb_lying_small(zero_stream, crc_of=crc_of)
        _bounded(lambda raw=raw: read_archive(raw))
        _bounded(lambda raw=raw: HierarchyModel.from_bytes(raw))


def test_honest_sizes_beyond_the_limits_are_refused_before_inflating(
    zero_stream: tuple[bytes, int],
) -> None:
    data, crc = zero_stream
    header = _npy_header("<f8", (1 << 27,))
    honest = _replace(small_tree().to_bytes(), "means.npy",
                      _Member("means.npy", data, len(header) + (1 << 30), crc))
    err = _bounded(lambda: read_archive(honest, max_bytes=64 * MIB))
    assert "limit" in str(err)
    # a manifest of 256 MiB (whitespace around {}): refused before reading it
    co = zlib.compressobj(1, zlib.DEFLATED, -15)
    blank = b" " * MIB
    parts, crc2 = [co.compress(b"{")], zlib.crc32(b"{")
    for _ in range(256):
        parts.append(co.compress(blank))
        crc2 = zlib.crc32(blank, crc2)
    parts += [co.compress(b"}"), co.flush()]
    crc2 = zlib.crc32(b"}", crc2)
    big = _zip([_Member("manifest.json", b"".join(parts), 256 * MIB + 2, crc2)])
    assert "manifest" in str(_bounded(lambda: read_archive(big)))


def test_lying_central_directory_is_a_format_error() -> None:
    good = small_tree().to_bytes()
    means = _npy(small_tree().to_archive()[1]["means"])
    cases = {
        # declares more bytes than the stream holds (header consistent with the claim)
        "longer": _member("means.npy", means, size=len(means) + 8 * 1000),
        # declares fewer bytes than the stream holds, CRC of the whole stream
        "shorter": _member("means.npy", means, size=len(means) - 8),
        # a local header naming another file than the central directory
        "renamed": _member("means.npy", means, local_name="other.npy"),
        # an unsupported compression method, an encrypted entry
        "method": _member("means.npy", means, method=99),
        "encrypted": _member("means.npy", means, flags=0x1),
        # stored (no compression) but compressed and uncompressed sizes differ
        "stored": _Member("means.npy", means, len(means) * 2, zlib.crc32(means), method=0),
    }
    for what, member in cases.items():
        raw = _replace(good, "means.npy", member)
        err = _bounded(lambda raw=raw: read_archive(raw))
        assert "means" in str(err), (what, err)
    dup = _zip([*_archive_members(good), _member("means.npy", means)])
    assert "duplicate" in str(_bounded(lambda: read_archive(dup)))


def test_npy_headers_are_checked_before_allocating() -> None:
    manifest = _member("manifest.json", b'{"kind": "x"}')
    small = bytes(128)
    cases: dict[str, bytes] = {
        "huge shape": _npy_header("<f8", (10**12,)) + small,
        "huge 2-d shape": _npy_header("<f8", (1 << 20, 1 << 20)) + small,
        "negative shape": _npy_header("<f8", (-16,)) + small,
        "object dtype": _npy_header("|O", (16,)) + small,
        "structured dtype": _npy_header([("a", "<f8")], (16,)) + small,
        "string dtype": _npy_header("<U4", (8,)) + small,
        "trailing bytes": _npy_header("<f8", (8,)) + small + b"\0" * 64,
        "short data": _npy_header("<f8", (32,)) + small,
        "bad magic": b"\x93NUMPZ\x01\x00" + _npy_header("<f8", (16,))[8:] + small,
        "version 3": _npy_header("<f8", (16,), version=(3, 0)) + small,
        "header length": b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + small,
        "bad header": b"\x93NUMPY\x01\x00" + struct.pack("<H", 16) + b"{'descr': ((((((" + small,
    }
    for what, data in cases.items():
        raw = _zip([manifest, _member("x.npy", data)])
        err = _bounded(lambda raw=raw: read_archive(raw))
        assert "'x.npy'" in str(err), (what, err)
    # an honest Fortran-order member is read correctly
    arr = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    _, out = read_archive(_zip([manifest, _member("f.npy", _npy(arr))]))
    np.testing.assert_array_equal(out["f"], arr)


def test_manifest_json_is_bounded_in_depth_and_values() -> None:
    cases = {
        "deep array": b"[" * 100_000 + b"]" * 100_000,
        "deep object": b'{"a":' * 200 + b"{}" + b"}" * 200,
        "huge integer": b'{"kind": ' + b"9" * 5000 + b"}",
        "NaN": b'{"kind": NaN}',
        "infinite": b'{"kind": 1e999}',
        "not utf-8": b'{"kind": "\xff"}',
    }
    for what, data in cases.items():
        raw = _zip([_member("manifest.json", data)])
        err = _bounded(lambda raw=raw: read_archive(raw))
        assert "manifest" in str(err), (what, err)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    manifest = {"kind": "demo", "text": "[" * 1000}
    assert read_archive(archive_bytes(manifest, {}))[0] == manifest


def test_corrupt_and_truncated_files_are_format_errors() -> None:
    good = small_tree().to_bytes()
    with zipfile.ZipFile(io.BytesIO(good)) as zf:
        info = zf.getinfo("means.npy")
    start = info.header_offset + 30 + len(info.filename)  # first byte of the deflate stream
    cases: dict[str, bytes] = {}
    for offset in (0, info.compress_size // 2, info.compress_size - 1):  # deflate / CRC errors
        flipped = bytearray(good)
        flipped[start + offset] ^= 0xFF
        cases[f"flip@{offset}"] = bytes(flipped)
    cases["middle cut"] = good[: start + 4] + good[start + 40 :]
    cases["truncated"] = good[: len(good) * 2 // 3]
    cases["empty"] = b""
    for raw in cases.values():
        _bounded(lambda raw=raw: read_archive(raw))
        _bounded(lambda raw=raw: HierarchyModel.from_bytes(raw))


def test_mostly_zero_arrays_compressing_1000_to_1_still_load() -> None:
    """Guard: legitimate moment sums can be nearly all zeros; no ratio-based refusal."""
    arrays = {"C": np.zeros(4_000_000), "s": np.arange(10.0)}
    raw = archive_bytes({"kind": "x"}, arrays)
    assert len(raw) * 500 < 32_000_000
    manifest, out = read_archive(raw, max_bytes=32_001_000)
    assert manifest == {"kind": "x"} and not out["C"].any() and out["C"].shape == (4_000_000,)
    out["s"][0] = 1.0  # arrays are ordinary writable arrays


# =========================================================================== tree validation
def _model_cases() -> dict[str, Callable[[dict[str, Any], dict[str, np.ndarray]], None]]:
    def root_child(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        _nodes_by_id(m)[0]["children"] = [0, 2]

    def self_parent(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        _nodes_by_id(m)[1]["parent"] = 1

    def two_cycle(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        # 7 <-> 8 (leaves 9, 10): consistent links, unreachable from the root
        leaf, internal = _nodes_by_id(m)[1], _nodes_by_id(m)[0]
        for nid, parent, children in ((7, 8, [8, 9]), (8, 7, [7, 10]), (9, 7, []), (10, 8, [])):
            node = json.loads(json.dumps(internal if children else leaf))
            node.update(id=nid, parent=parent, depth=1, children=children)
            m["nodes"].append(node)
        a["means"] = np.vstack([a["means"], a["means"][:4]])
        a["router_weights"] = np.concatenate([a["router_weights"], a["router_weights"]])
        a["router_bias"] = np.concatenate([a["router_bias"], a["router_bias"]])

    def detached(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        # the root lists its first child twice; the second child hangs off the first
        nodes = _nodes_by_id(m)
        first, second = nodes[0]["children"]
        nodes[0]["children"] = [first, first]
        nodes[second]["parent"] = first

    def depth_lie(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        for n in m["nodes"]:
            n["depth"] = 0

    def huge_id(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        nodes = _nodes_by_id(m)
        nodes[4]["id"] = 1 << 40
        nodes[2]["children"] = [3, 1 << 40]

    def extra_rows(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        a["means"] = np.vstack([a["means"], a["means"]])

    def nodes_not_list(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["nodes"] = {"0": m["nodes"][0]}

    def names_wrong(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["feature_names"] = [1, 2, 3, 4]

    def quality_list(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["nodes"][0]["quality"] = [1, 2]

    return {"root is its own child": root_child, "self parent": self_parent,
            "2-cycle": two_cycle, "detached subtree": detached, "depths lie": depth_lie,
            "huge node id": huge_id,
            "more rows than nodes": extra_rows, "nodes not a list": nodes_not_list,
            "feature names not strings": names_wrong, "quality not an object": quality_list}


def test_model_archive_trees_are_validated() -> None:
    for what, edit in _model_cases().items():
        raw = _model_archive(edit)
        err = _bounded(lambda raw=raw: HierarchyModel.from_bytes(raw))
        assert str(err), what


def test_model_constructor_refuses_cycles_and_inconsistent_depths() -> None:
    nodes = dict(small_tree().nodes)
    router = nodes[2].router
    cycle = [*nodes.values(), TreeNode(7, 8, 1, 1.0, np.zeros(4), (8, 9), router),
             TreeNode(8, 7, 1, 1.0, np.zeros(4), (7, 10), router),
             TreeNode(9, 7, 2, 1.0, np.zeros(4)), TreeNode(10, 8, 2, 1.0, np.zeros(4))]
    with pytest.raises(ValueError, match=r"cycle|reach"):
        HierarchyModel(cycle, n_features=4)
    flat = [TreeNode(n.node_id, n.parent, 0, n.weight, n.mean, n.children, n.router)
            for n in nodes.values()]
    with pytest.raises(ValueError, match="depth"):
        HierarchyModel(flat, n_features=4)


def _limit_child() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))


def _run_child(args: list[str], *, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT, preexec_fn=_limit_child,
                              cwd=Path(__file__).resolve().parents[2],
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{args[-1]!r} still running after {CHILD_TIMEOUT}s (a hang): {exc}")


@pytest.fixture(scope="module")
def hostile_engines(engine_archive: tuple[dict[str, Any], dict[str, np.ndarray]],
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Engine snapshots and checkpoints with broken trees or absurd declared sizes."""
    base = engine_archive

    def reservoir_huge(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["config"]["reservoir_size"] = 10**10
        for n in m["nodes"]:
            n["reservoir"]["capacity"] = 10**10

    def vocabulary_huge(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["vocabulary"] = {"format": "streammom", "kind": "vocabulary", "schema_version": 1,
                           "tokens": [], "capacity": 10**6, "growing": True, "oov_count": 0}

    def wrong_root(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["state"]["root_id"] = 1

    def n_features_huge(m: dict[str, Any], a: dict[str, np.ndarray]) -> None:
        m["n_features"] = 10**6
        for n in m["nodes"]:
            n["acc"]["n_features"] = 10**6

    edits = {"root-own-child": _root_is_its_own_child, "two-cycle": _two_cycle_engine,
             "reservoir-huge": reservoir_huge, "vocabulary-huge": vocabulary_huge,
             "wrong-root": wrong_root, "n-features-huge": n_features_huge}
    out = tmp_path_factory.mktemp("hostile-engines")
    files = {}
    for name, edit in edits.items():
        files[f"engine-{name}"] = out / f"engine-{name}.smm"
        files[f"engine-{name}"].write_bytes(_engine_variant(base, edit))
    files["checkpoint-root-own-child"] = out / "checkpoint-root-own-child.smm"
    files["checkpoint-root-own-child"].write_bytes(
        _checkpoint(_engine_variant(base, _root_is_its_own_child)))
    return files


def test_engine_and_checkpoint_trees_are_validated(hostile_engines: dict[str, Path]) -> None:
    """``load_snapshot`` (and the engine's restore) refuse each file fast, within bounded
    memory; run in a child because a broken walk of a cyclic tree never ends."""
    script = textwrap.dedent("""
        import json, sys, time
        from pathlib import Path
        from service.snapshots import load_snapshot
        from streammom import StreamingHierarchy
        from streammom.serialization import SnapshotFormatError
        def outcome(action):
            try:
                action()
            except SnapshotFormatError as exc:
                return "SnapshotFormatError: " + str(exc)
            except BaseException as exc:
                return type(exc).__name__ + ": " + str(exc)[:300]
            return "loaded"
        for path in sys.argv[1:]:
            t0 = time.perf_counter()
            found = [outcome(lambda: load_snapshot(path))]
            if Path(path).name.startswith("engine-"):
                data = Path(path).read_bytes()
                found.append(outcome(lambda: StreamingHierarchy.restore(data)))
            print(json.dumps([Path(path).name, found, time.perf_counter() - t0]), flush=True)
    """)
    done = _run_child(["-c", script, *map(str, hostile_engines.values())])
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(hostile_engines), (done.stdout, done.stderr[-2000:])
    for name, outcomes, seconds in results:
        for outcome in outcomes:
            assert outcome.startswith("SnapshotFormatError: "), (name, outcome)
            assert "\n" not in outcome, (name, outcome)
        assert seconds < 10, (name, seconds)


# =========================================================================== the CLI
_CLI = textwrap.dedent("""
    import os, sys
    from service.cli import main
    try:
        main()
    finally:
        with open("/proc/self/status") as fh:
            hwm = [line.split()[1] for line in fh if line.startswith("VmHWM")]
        with open(os.environ["HOSTILE_PEAK_FILE"], "w") as out:
            out.write(hwm[0])
""")


def _cli(args: list[str], tmp_path: Path) -> tuple[int, str, str, int]:
    """``streammom ARGS`` in a child: (exit status, stdout, stderr, peak RSS in bytes)."""
    peak_file = tmp_path / f"peak-{time.monotonic_ns()}"
    done = _run_child(["-c", _CLI, *args], env={"HOSTILE_PEAK_FILE": str(peak_file)})
    peak = int(peak_file.read_text()) * 1024 if peak_file.exists() else 1 << 62
    return done.returncode, done.stdout, done.stderr, peak


@pytest.fixture(scope="module")
def hostile_files(hostile_engines: dict[str, Path], zero_stream: tuple[bytes, int],
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("hostile")
    good = small_tree().to_bytes()
    means = _npy(small_tree().to_archive()[1]["means"])
    with zipfile.ZipFile(io.BytesIO(good)) as zf:
        info = zf.getinfo("means.npy")
    start = info.header_offset + 30 + len(info.filename)
    flipped = bytearray(good)
    flipped[start + info.compress_size // 2] ^= 0xFF
    model_cases = _model_cases()
    raw: dict[str, bytes] = {
        "bomb-lying-size": _bomb_lying_small(zero_stream, crc_of="all"),
        "npy-huge-shape": _replace(good, "means.npy", _member(
            "means.npy", _npy_header("<f8", (10**12,)) + bytes(160))),
        "manifest-deep": _zip([_member("manifest.json", b"[" * 100_000 + b"]" * 100_000)]),
        "crc-flipped": bytes(flipped),
        "compression-99": _replace(good, "means.npy", _member("means.npy", means, method=99)),
        "duplicate-member": _zip([*_archive_members(good), _member("means.npy", means)]),
        "model-two-cycle": _model_archive(model_cases["2-cycle"]),
        "model-depths-lie": _model_archive(model_cases["depths lie"]),
        "model-huge-node-id": _model_archive(model_cases["huge node id"]),
        "model-more-rows": _model_archive(model_cases["more rows than nodes"]),
    }
    files = {}
    for name, data in raw.items():
        files[name] = out / f"{name}.smm"
        files[name].write_bytes(data)
    files.update(hostile_engines)
    files["directory"] = out / "a-directory.smm"
    files["directory"].mkdir()
    return files


@pytest.fixture(scope="module")
def baseline_peak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Peak RSS of ``inspect`` / ``report`` on a valid model archive."""
    tmp = tmp_path_factory.mktemp("baseline")
    path = tmp / "model.smm"
    path.write_bytes(small_tree().to_bytes())
    peaks = {}
    for command in ("inspect", "report"):
        extra = ["-o", str(tmp / "out.html")] if command == "report" else []
        code, _, err, peak = _cli([command, str(path), *extra], tmp)
        assert code == 0, err
        peaks[command] = peak
    return peaks


_INSPECT = ["bomb-lying-size", "npy-huge-shape", "manifest-deep", "crc-flipped",
            "compression-99", "duplicate-member", "model-two-cycle",
            "model-depths-lie", "model-huge-node-id", "model-more-rows",
            "engine-root-own-child", "engine-two-cycle", "engine-reservoir-huge",
            "engine-vocabulary-huge", "engine-n-features-huge", "checkpoint-root-own-child",
            "directory"]
_REPORT = ["bomb-lying-size", "npy-huge-shape", "crc-flipped", "model-two-cycle",
           "engine-root-own-child", "checkpoint-root-own-child"]


def _assert_one_error_line(code: int, out: str, err: str) -> None:
    assert code == 2, (code, out[-2000:], err[-3000:])
    assert "Traceback" not in out + err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]


@pytest.mark.parametrize("name", _INSPECT)
def test_inspect_answers_one_error_line(name: str, hostile_files: dict[str, Path],
                                        baseline_peak: dict[str, int], tmp_path: Path) -> None:
    code, out, err, peak = _cli(["inspect", str(hostile_files[name])], tmp_path)
    _assert_one_error_line(code, out, err)
    assert peak < baseline_peak["inspect"] + RSS_SLACK, (peak / MIB, err)


@pytest.mark.parametrize("name", _REPORT)
def test_report_answers_one_error_line(name: str, hostile_files: dict[str, Path],
                                       baseline_peak: dict[str, int], tmp_path: Path) -> None:
    html = tmp_path / "out.html"
    code, out, err, peak = _cli(["report", str(hostile_files[name]), "-o", str(html)], tmp_path)
    _assert_one_error_line(code, out, err)
    assert peak < baseline_peak["report"] + RSS_SLACK, (peak / MIB, err)
    assert not html.exists()


def test_cli_limit_option_refuses_a_large_snapshot(tmp_path: Path) -> None:
    """``--max-bytes`` lowers the expansion limit (e.g. for files from elsewhere)."""
    path = tmp_path / "model.smm"
    path.write_bytes(archive_bytes({"kind": "x"}, {"big": np.zeros(1_000_000)}))
    for args in (["inspect", str(path)], ["report", str(path), "-o", str(tmp_path / "o.html")]):
        code, out, err, _ = _cli([*args, "--max-bytes", "1000000"], tmp_path)
        _assert_one_error_line(code, out, err)
        assert "limit" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "model.smm"
    path.write_bytes(small_tree().to_bytes())
    path.chmod(0)
    code, out, err, _ = _cli(["inspect", str(path)], tmp_path)
    _assert_one_error_line(code, out, err)
