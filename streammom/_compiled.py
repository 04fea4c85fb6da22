"""Compiled inner loops of the hot path (numba): moment sums, routing, reservoir sampling.

The library reaches them through :mod:`streammom._kernels`, which imports this module (and
numba) on first use.

The row kernels walk the rows a:b of a CSR array (``indptr``, ``indices``, ``data``) once, in
row order and, inside a row, in index order, so results are deterministic and the same however
a batch is cut into chunks. No ``fastmath``: the floating-point operations are exactly the ones
written. The callers validate the CSR structure first (indices in range, sorted, no duplicates;
:func:`streammom._validation.check_csr_structure`): the kernels do not bounds-check.

Costs per row with k non-zeros: :func:`add_row_sums` O(k·m²/2) for a basis of m columns;
:func:`add_packed_gram` O(k²/2); :func:`route_rows` O(k) per tree level;
:func:`reservoir_offer` O(1), plus O(k) per kept row. :func:`unpack_packed` is O(d²) (refits);
:func:`em_pass` O(k·c) per row for c mixture components (refinement EM).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["EM_CUT", "add_packed_gram", "add_row_sums", "em_pass", "packed_slice_sums",
           "reservoir_offer", "route_rows", "unpack_packed"]

_JIT = {"cache": True, "nogil": True, "boundscheck": False}
# Rows of look-ahead for the prefetches of the C pair loop (measured: 2 is best, 1 and 4 close).
_PREFETCH_ROWS = 2


@intrinsic
def _prefetch_for_write(typingctx: Any, arr: Any, idx: Any) -> Any:
    """Ask the CPU to start loading the cache line of arr[idx] (``llvm.prefetch``: write,
    high locality, data cache). A hint only: it changes no value, so results are unaffected."""
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        array = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, array, [args[1]])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 1), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(**_JIT)
def add_row_sums(indptr, indices, data, w, a, b, P, T, s):  # type: ignore[no-untyped-def]
    """s += Σ_i w_i x_i and T_r += Σ_i w_i x_ir packed(z_i z_iᵀ), z_i = Pᵀ x_i (design §3).

    Rows a:b. ``P`` (d, m) is the node's tracked basis and row r of ``T`` (d, m(m+1)/2) the
    packed upper triangle of the slice T_r: this is T += Xᵀ F with F row i = w_i packed(z_i z_iᵀ)
    ("XᵀF with F the packed outer products of XP"), one row at a time, so F is never stored
    and the node's T (d·m²/2 doubles) stays in cache while the rows stream past. m = 0 (a
    (d, 0) P and T) updates s only.
    """
    m = P.shape[1]
    size = T.shape[1]
    z = np.empty(m)
    wz = np.empty(m)
    f = np.empty(size)
    # Packed order of the pairs (x ≤ y): F's entries as one flat gather, not a triangle loop.
    pair_x = np.empty(size, np.int64)
    pair_y = np.empty(size, np.int64)
    o = 0
    for x in range(m):
        for y in range(x, m):
            pair_x[o] = x
            pair_y[o] = y
            o += 1
    for i in range(a, b):
        p0 = indptr[i]
        p1 = indptr[i + 1]
        wi = w[i]
        for c in range(m):
            z[c] = 0.0
        for p in range(p0, p1):
            j = indices[p]
            v = data[p]
            s[j] += wi * v
            Pj = P[j]
            for c in range(m):
                z[c] += v * Pj[c]
        if size == 0 or p1 == p0:
            continue
        for c in range(m):
            wz[c] = wi * z[c]
        for q in range(size):
            f[q] = wz[pair_x[q]] * z[pair_y[q]]
        for p in range(p0, p1):
            row = T[indices[p]]
            v = data[p]
            for q in range(size):
                row[q] += v * f[q]


@njit(**_JIT)
def add_packed_gram(C, offsets, indptr, indices, data, w, a, b):  # type: ignore[no-untyped-def]
    """C += packed upper triangle of Σ_i w_i x_i x_iᵀ over the rows a:b (design §3).

    Packed row-major upper layout: (i, j), i ≤ j, at ``offsets[i] + j`` with
    offsets[i] = i(2d − i − 1)/2. Indices sorted within a row, so every pair p ≤ q of a row's
    non-zeros lands in the upper triangle: O(Σ_i k_i²/2), never a d×d temporary. The pairs land
    anywhere in a d(d+1)/2 array (16 MB at d = 2,000, one per leaf), so the loop is bound by
    cache misses: the pairs of the row ``_PREFETCH_ROWS`` ahead are prefetched, which halves
    its time when the leaves' C do not fit in cache.
    """
    for i in range(a, b):
        k = i + _PREFETCH_ROWS
        if k < b:
            pk1 = indptr[k + 1]
            for p in range(indptr[k], pk1):
                base = offsets[indices[p]]
                for q in range(p, pk1):
                    _prefetch_for_write(C, base + indices[q])
        p1 = indptr[i + 1]
        wi = w[i]
        for p in range(indptr[i], p1):
            wv = wi * data[p]
            base = offsets[indices[p]]
            for q in range(p, p1):
                C[base + indices[q]] += wv * data[q]


@njit(**_JIT)
def reservoir_offer(  # type: ignore[no-untyped-def]
    indptr, indices, data, w, start, u, weight_before, n_filled, K, res_indices, res_values,
    res_lengths,
):
    """Weighted reservoir sampling (Chao 1982) of rows start:start+len(w); returns n_filled.

    Event t (weight w_t > 0, node weight W_t including it) is kept while the reservoir is not
    full, else enters with probability p_t = min(1, K w_t / W_t), replacing slot
    ⌊K u_t / p_t⌋: given u_t < p_t, u_t / p_t is uniform on [0, 1), so one uniform draw per
    event decides both. Rows are written zero-padded to the reservoir's width (the caller
    makes it wide enough, with rows for every slot this call can fill: min(K, n_filled + n));
    a later event overwrites an earlier one in the same slot.
    """
    width = res_indices.shape[1]
    cum = weight_before
    for t in range(w.shape[0]):
        wt = w[t]
        if not wt > 0.0:
            continue
        cum += wt
        if n_filled < K:
            slot = n_filled
            n_filled += 1
        else:
            p = min(1.0, K * wt / max(cum, 1e-300))
            if not u[t] < p:
                continue
            slot = min(int(K * (u[t] / p)), K - 1)
        p0 = indptr[start + t]
        k = indptr[start + t + 1] - p0
        for c in range(k):
            res_indices[slot, c] = indices[p0 + c]
            res_values[slot, c] = data[p0 + c]
        for c in range(k, width):
            res_indices[slot, c] = 0
            res_values[slot, c] = 0.0
        res_lengths[slot] = k
    return n_filled


@njit(**_JIT)
def unpack_packed(packed, offsets, out):  # type: ignore[no-untyped-def]
    """out = the full symmetric d×d matrix of a packed upper triangle (any float dtype).

    Upper rows are copied contiguously, then the lower triangle is mirrored tile by tile
    (32 × 32), so both the reads and the writes stay within cache lines. Every entry of ``out``
    is written: a reused buffer needs no clearing.
    """
    d = out.shape[0]
    for i in range(d):
        o = offsets[i]
        row = out[i]
        for j in range(i, d):
            row[j] = packed[o + j]
    tile = 32
    for bi in range(0, d, tile):
        ie = min(bi + tile, d)
        for bj in range(0, bi + 1, tile):
            je = min(bj + tile, d)
            for i in range(bi, ie):
                row = out[i]
                for j in range(bj, min(je, i)):
                    row[j] = out[j, i]


@njit(**_JIT)
def route_rows(  # type: ignore[no-untyped-def]
    indptr, indices, data, weights, bias, absolute, children, router_of, root, leaf, paths,
    margins,
):
    """Walk every row root → leaf through 2-way linear routers (thesis eq. 6.11 / eq. 4.1).

    Router r scores s_j = ⟨weights[2r + j], x⟩ + bias[2r + j] (|s_j| when ``absolute[r]``);
    the row goes to ``children[r, 1]`` when s₁ > s₀, else ``children[r, 0]``, with margin
    |s₀ − s₁|. ``router_of[node]`` is the router index of an internal node, −1 for a leaf.
    Only the routers on the row's own path are scored: O(k) per level.
    """
    n = indptr.shape[0] - 1
    for i in range(n):
        node = root
        level = 0
        while router_of[node] >= 0:
            r = router_of[node]
            s0 = 0.0
            s1 = 0.0
            w0 = weights[2 * r]
            w1 = weights[2 * r + 1]
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                v = data[p]
                s0 += v * w0[j]
                s1 += v * w1[j]
            s0 += bias[2 * r]
            s1 += bias[2 * r + 1]
            if absolute[r]:
                s0 = abs(s0)
                s1 = abs(s1)
            diff = s1 - s0
            node = children[r, 1] if diff > 0 else children[r, 0]
            paths[i, level + 1] = node
            margins[i, level] = abs(diff)
            level += 1
        leaf[i] = node


#: A component whose joint log-probability is more than this below the row's best gets
#: responsibility 0 in :func:`em_pass`: e^-40 ≈ 4·10⁻¹⁸ of the row's weight, under half an ulp
#: of the row's normaliser (which is ≥ 1), so normaliser and log-likelihood are the full
#: sum's to the last bit or so, and the M-step loses nothing a float64 sum would keep.
EM_CUT = 40.0


@njit(**_JIT)
def em_pass(indptr, indices, data, w, AT, b, const, ST, nk):  # type: ignore[no-untyped-def]
    """One E-step and the M-step's sufficient statistics of a mixture, in one pass over the rows.

    With the log-linear form log p(x_i, j) = Σ_h x_ih AT[h, j] + b[j] + const[i]
    (:func:`streammom.mixture.log_linear_params`): r_ij = softmax_j (max-subtracted),
    nk[j] += w_i r_ij, ST[h, j] += w_i r_ij x_ih (ST and nk are added to, not overwritten).
    Returns Σ_i w_i log p(x_i) = Σ_i w_i (logsumexp_j(…) + const[i]). O(nnz · c) for c
    components, no (n, c) temporaries. Responsibilities are sparse: a component more than
    :data:`EM_CUT` below the row's best costs no exp and no M-step adds (on separated
    mixtures most rows keep one or two components: 3.1 against 4.6 ms a pass on 11,600
    rows × 16 components at d = 1,024).
    """
    n = indptr.shape[0] - 1
    c = b.shape[0]
    L = np.empty(c)
    active = np.empty(c, dtype=np.int64)
    ll = 0.0
    for i in range(n):
        for j in range(c):
            L[j] = b[j]
        for p in range(indptr[i], indptr[i + 1]):
            h = indices[p]
            x = data[p]
            for j in range(c):
                L[j] += x * AT[h, j]
        m = L[0]
        for j in range(1, c):
            m = max(m, L[j])
        na = 0
        for j in range(c):  # the active components, without a branch per component
            active[na] = j
            na += L[j] - m > -EM_CUT
        s = 0.0
        for q in range(na):
            j = active[q]
            e = np.exp(L[j] - m)
            L[j] = e
            s += e
        ll += w[i] * (m + np.log(s) + const[i])
        f = w[i] / s
        for q in range(na):
            j = active[q]
            L[j] *= f
            nk[j] += L[j]
        for p in range(indptr[i], indptr[i + 1]):
            h = indices[p]
            x = data[p]
            for q in range(na):
                j = active[q]
                ST[h, j] += L[j] * x
    return ll


@njit(**_JIT)
def packed_slice_sums(indptr, indices, data, w, Z, Wt, single_topic, out):  # type: ignore[no-untyped-def]
    """The data term of every whitened third-order slice, upper triangles packed, one pass.

    For each row i, F_i = Z_i Z_iᵀ (minus Σ_f x_if Wt_f Wt_fᵀ when ``single_topic``), and
    out[r] += w_i x_ir packed(F_i) for every non-zero x_ir: Xᵀ diag(w) F as
    :meth:`streammom.estimators.ImplicitMoments.whitened_slices` needs it (Z = X E†ᵀ,
    Wt = E†ᵀ), the pairs p ≤ q row by row. O(nnz · k(k+1)/2), twice that with the
    single-topic term, no (n, k²) temporaries; rows in order, so the sums are the same however
    the rows are cut.
    """
    n = indptr.shape[0] - 1
    k = Z.shape[1]
    F = np.empty(out.shape[1])
    for i in range(n):
        a, b = indptr[i], indptr[i + 1]
        if a == b:
            continue
        t = 0
        for p in range(k):
            zp = Z[i, p]
            for q in range(p, k):
                F[t] = zp * Z[i, q]
                t += 1
        if single_topic:
            for e in range(a, b):
                f = indices[e]
                x = data[e]
                t = 0
                for p in range(k):
                    xp = x * Wt[f, p]
                    for q in range(p, k):
                        F[t] -= xp * Wt[f, q]
                        t += 1
        for e in range(a, b):
            r = indices[e]
            c = w[i] * data[e]
            for t in range(F.shape[0]):
                out[r, t] += c * F[t]
