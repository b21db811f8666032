"""Exact bucket (variable) elimination over compressed factors.

Every edge becomes a :class:`~solvers.factors.Factor` over groups of identical rows /
columns.  A shared conversion is encoded exactly in one of three ways:

* one factor over (src, distinct dsts), when that table is small;
* else, when its consumers can need at most ``MAX_CHAIN_CLASSES`` classes, a chain of
  *needed-set* variables: for the consumers sorted by node, ``U_k`` = the set of
  classes consumers k, k+1, ... need (a bitmask), with hard factors
  ``U_k = U_{k+1} | {class of consumer k}`` and one cost factor (src, U_1) paying
  ``table[class(src)][b]`` for every b in the set.  Chains are shared between
  conversions whose consumer lists end alike, so DenseNet's "every layer feeds every
  later concat" becomes one chain per dense block instead of a clique;
* else binary variables ``z_b`` ("some consumer needs class b"), one per class b a
  consumer can need: factor (src, z_b) costs ``z_b * table[class(src)][b]`` and factor
  (dst_k, z_b) is ``inf`` when consumer k needs b and ``z_b = 0``.  Minimising over z
  gives ``z_b = 1`` exactly for the needed classes (costs are non-negative, so
  switching an unneeded z_b on never helps), i.e. the conversion cost.

Variables are eliminated in a greedy min-table-size order
(:mod:`~solvers.elimination_order`).  Eliminating v joins its factors on a common
grouping of each neighbour's choices (a neighbour's choices that every joined factor
maps to the same entry stay one entry), adds v's unary cost minimised within v's own
groups, and takes ``min`` over v's axis with numpy broadcasting.  Choices are recovered
in reverse order from the kept factors.  Disconnected parts never meet in a table.

A table larger than ``max_table_entries`` raises :class:`TableTooLarge` (never a
silent fallback).

>>> from solvers import Problem
>>> p = Problem(); a = p.add_node([1., 0.]); b = p.add_node([0., 2.])
>>> p.add_edge(a, b, [[0., 9.], [9., 0.]])
>>> s = solve_dp(p); s.choice, s.cost, s.optimal
([0, 0], 1.0, True)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .elimination_order import elimination_order
from .factors import Factor, conversion_factor, conversion_roles, edge_factor, group
from .problem import Problem
from .solution import Infeasible, Solution, TableTooLarge

MAX_TABLE_ENTRIES = 1 << 24  # 128 MiB of float64 per table
DIRECT_CONVERSION_ENTRIES = 1 << 16
MAX_CHAIN_CLASSES = 7  # needed-set variables have 2**classes states


def _build(p: Problem, direct_conversion_entries: int):
    """Unary vectors and factors; returns (unary, factors, number of node vars)."""
    unary = [c.copy() for c in p.costs]
    factors: list[Factor] = []

    def add(f: Factor):
        if len(f.scope) == 1:  # fold into the unary cost
            unary[f.scope[0]] += f.table[f.idx[0]]
        elif f.table.ndim == 2 and 1 in f.table.shape:  # depends on one side only
            side = 0 if f.table.shape[1] == 1 else 1
            unary[f.scope[side]] += f.table.reshape(-1)[f.idx[side]]
        else:
            factors.append(f)

    chains: dict[tuple, tuple[int, np.ndarray]] = {}

    def needed_set(atoms):
        """Variable whose value is the set of classes ``atoms`` need (a bitmask over r): the
        first atom's classes joined with the variable of the rest's, built from the last atom
        back (a loop: a chain may have thousands of consumers)."""
        rest = None  # (variable, classes) of atoms[k + 1:]
        for k in range(len(atoms) - 1, -1, -1):
            key = tuple((d, c.tobytes()) for d, c in atoms[k:])
            if key not in chains:
                d, c = atoms[k]
                r = np.unique(np.concatenate([c for _, c in atoms[k:]]))
                u = len(unary)
                unary.append(np.zeros(1 << len(r)))
                states = np.arange(1 << len(r))
                vals, d_idx = np.unique(c, return_inverse=True)
                bit = 1 << np.searchsorted(r, vals)
                if rest is not None:
                    w, r_rest = rest
                    rstates = np.arange(1 << len(r_rest))
                    lifted = np.zeros(len(rstates), dtype=np.int64)
                    for n, pos in enumerate(np.searchsorted(r, r_rest)):
                        lifted |= ((rstates >> n) & 1) << pos
                    ok = states[:, None, None] == (lifted[None, :, None] | bit[None, None, :])
                    add(Factor((u, w, d), [states, rstates, d_idx.reshape(-1)], np.where(ok, 0.0, np.inf)))
                else:
                    ok = states[:, None] == bit[None, :]
                    add(Factor((u, d), [states, d_idx.reshape(-1)], np.where(ok, 0.0, np.inf)))
                chains[key] = (u, r)
            rest = chains[key]
        return rest

    for (i, j), m in p.edges.items():
        add(edge_factor(i, j, m))
    for conv in p.conversions:
        if not conv.dsts:
            continue
        scope, idx, roles = conversion_roles(conv)
        if math.prod(int(i.max()) + 1 for i in idx) <= direct_conversion_entries or len(scope) <= 2:
            add(conversion_factor(conv, (scope, idx, roles)))
            continue
        src_idx = idx[0]
        (_, _, src_cls), = [r for r in roles if r[1]]
        atoms = sorted({(d, c.tobytes()): (d, c) for d, c in zip(conv.dsts, conv.dst_classes)}.items())
        atoms = tuple(a for _, a in atoms)
        classes = np.unique(np.concatenate(conv.dst_classes))
        if len(classes) <= MAX_CHAIN_CLASSES:
            u, r = needed_set(atoms)
            states = np.arange(1 << len(r))
            bits = ((states[:, None] >> np.arange(len(r))) & 1).astype(bool)
            price = conv.table[np.ix_(src_cls, r)]
            pay = np.where(bits[None], price[:, None, :], 0.0).sum(axis=-1)
            add(Factor((conv.src, u), [src_idx, states], pay))
            continue
        for b in classes:
            z = len(unary)
            unary.append(np.zeros(2))
            pay = np.stack([np.zeros(len(src_cls)), conv.table[src_cls, b]], 1)
            add(Factor((conv.src, z), [src_idx, np.arange(2)], pay))
            for d, c in zip(conv.dsts, conv.dst_classes):
                needs = (c == b).astype(np.intp)
                if needs.all():  # needs b whatever it chooses: z is 1, no factor (its row 0 would be unused)
                    unary[z][0] = np.inf
                elif needs.any():
                    forbid = np.array([[0.0, 0.0], [np.inf, 0.0]])
                    add(Factor((d, z), [needs, np.arange(2)], forbid))
    return unary, factors


def solve_dp(
    p: Problem,
    *,
    max_table_entries: int = MAX_TABLE_ENTRIES,
    direct_conversion_entries: int = DIRECT_CONVERSION_ENTRIES,
) -> Solution:
    """Exact minimum by bucket elimination (see module docstring)."""
    t0 = time.perf_counter()
    unary, factors = _build(p, direct_conversion_entries)
    nvars = len(unary)
    by_var: list[set[int]] = [set() for _ in range(nvars)]
    for fid, f in enumerate(factors):
        for v in f.scope:
            by_var[v].add(fid)
    order = elimination_order(_distinct_entries(factors), {v: len(unary[v]) for v in range(nvars)})
    t1 = time.perf_counter()

    constant = 0.0
    trail = []  # (v, factors joined) for choice recovery
    width = largest = two_stage_joins = 0
    for v in order:
        fs = [factors[fid] for fid in by_var[v]]
        for fid in by_var[v]:
            for u in factors[fid].scope:
                if u != v:
                    by_var[u].discard(fid)
        trail.append((v, fs))
        if not fs:
            constant += float(unary[v].min())
            continue
        join = _Join.of(v, fs)
        entries = math.prod(join.shape)
        if entries > max_table_entries:
            raise TableTooLarge(
                f"dp needs a table of {entries:.3g} entries (over {len(join.scope)} variables) > "
                f"max_table_entries={max_table_entries}; use method='ilp' (or raise the cap)"
            )
        width, largest = max(width, len(join.scope)), max(largest, entries)
        reduced, two_stage = _eliminate(join, unary[v], entries)
        two_stage_joins += two_stage
        if len(join.scope) == 1:
            constant += float(reduced)
        else:
            fid = len(factors)
            factors.append(Factor(tuple(join.scope[:-1]), join.new_idx, reduced))
            for u in join.scope[:-1]:
                by_var[u].add(fid)
    t2 = time.perf_counter()
    if not np.isfinite(constant):
        raise Infeasible("every assignment has infinite cost")

    choice = _recover(trail, unary)[: p.num_nodes]
    cost = p.evaluate(choice)
    stats = {
        "width": width,
        "largest_table": largest,
        "two_stage_joins": two_stage_joins,
        "variables": nvars,
        "aux_variables": nvars - p.num_nodes,
        "dp_value": constant,
        "order_time": t1 - t0,
        "elimination_time": t2 - t1,
        "time": time.perf_counter() - t0,
    }
    # The bound is the DP's value, summed in another order than evaluate's fsum: equal to the
    # cost but for the last bits, which must not put the bound above it.
    return Solution(choice, cost, True, min(constant, cost), "dp", stats)


def _distinct_entries(factors: list[Factor]) -> dict[tuple[int, int], int]:
    """For the order heuristic: ``(u, v)`` -> the entries of u that the factors shared with
    v tell apart."""
    pair_keys: dict[tuple[int, int], list[np.ndarray]] = {}
    for f in factors:
        for a, u in enumerate(f.scope):
            for v in f.scope:
                if v != u:
                    pair_keys.setdefault((u, v), []).append(f.idx[a])
    return {key: keys[0].max() + 1 if len(keys) == 1 else int(group(*keys)[0].max()) + 1
            for key, keys in pair_keys.items()}


@dataclass
class _Join:
    """The factors of variable ``v`` on a common grouping of each variable's choices: a
    variable's choices that every joined factor maps to the same entry stay one entry."""

    v: int
    fs: list[Factor]
    scope: list[int]  # the other variables, sorted, then v
    where: dict[int, int]  # variable -> its axis in scope
    maps: dict[tuple[int, int], np.ndarray | None]  # (factor no, axis) -> new entry -> old entry (None: same)
    shape: list[int]  # entries per variable of scope
    new_idx: list[np.ndarray]  # choice -> entry, per variable of scope but v
    vgroups: np.ndarray  # v's choice -> entry

    @classmethod
    def of(cls, v: int, fs: list[Factor]) -> _Join:
        scope = sorted({u for f in fs for u in f.scope} - {v}) + [v]
        maps: dict[tuple[int, int], np.ndarray | None] = {}
        shape, new_idx = [], []
        vgroups = None
        for u in scope:
            holders = [(n, f.scope.index(u)) for n, f in enumerate(fs) if u in f.scope]
            if len(holders) == 1:
                n, ax = holders[0]
                inv = fs[n].idx[ax]
                maps[(n, ax)] = None
                count = fs[n].table.shape[ax]
            else:
                inv, rep = group(*(fs[n].idx[ax] for n, ax in holders),
                                 radices=[fs[n].table.shape[ax] for n, ax in holders])
                for n, ax in holders:
                    maps[(n, ax)] = fs[n].idx[ax][rep]
                count = len(rep)
            shape.append(count)
            if u == v:
                vgroups = inv
            else:
                new_idx.append(inv)
        return cls(v, fs, scope, {u: n for n, u in enumerate(scope)}, maps, shape, new_idx, vgroups)

    def placed(self, n: int, keep_v_axis: bool = False) -> np.ndarray:
        """Factor n's table broadcastable against the joined table (scope order)."""
        f = self.fs[n]
        t = f.table
        sel = [None if (keep_v_axis and u == self.v) else self.maps[(n, ax)]
               for ax, u in enumerate(f.scope)]
        if any(s is not None for s in sel):
            t = t[np.ix_(*[np.arange(t.shape[ax]) if s is None else s
                           for ax, s in enumerate(sel)])]
        pos = [self.where[u] for u in f.scope]
        perm = np.argsort(pos)
        t = t.transpose(perm)
        bshape = [1] * len(self.scope)
        for k, ax in enumerate(perm):
            bshape[pos[ax]] = t.shape[k]
        return t.reshape(bshape)


def _eliminate(join: _Join, unary_v: np.ndarray, entries: int) -> tuple[np.ndarray, bool]:
    """``min`` over v of v's unary cost plus its joined factors: the new factor's table over
    the other variables, and whether it took the two-stage join.

    Two-stage join: when one factor F dominates, first minimise v's unary and the other
    factors within each of F's entries for v (a segmented min), then join with F over F's
    (fewer) entries. Exact; avoids the full |scope| x |v| table."""
    fs, v, shape, where = join.fs, join.v, join.shape, join.where
    vcost = np.full(shape[-1], np.inf)
    np.minimum.at(vcost, join.vgroups, unary_v)
    big = max(range(len(fs)), key=lambda n: fs[n].table.size)
    big_v = fs[big].scope.index(v)
    rest_vars = {u for n, f in enumerate(fs) if n != big for u in f.scope} - {v}
    rest_entries = math.prod(shape[where[u]] for u in rest_vars) * shape[-1]
    big_entries = math.prod(shape[:-1]) * fs[big].table.shape[big_v]
    two_stage = len(fs) > 1 and join.maps[(big, big_v)] is not None and rest_entries + big_entries < entries // 2
    if two_stage:
        part = vcost.reshape([1] * (len(join.scope) - 1) + [-1])
        for n in range(len(fs)):
            if n != big:
                part = part + join.placed(n)
        key = join.maps[(big, big_v)]  # F's entry of each v group
        by_key = np.argsort(key, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(key[by_key]) != 0])
        # One min per entry of F's v axis that a v group maps to; an entry none maps to (an
        # unused row: a constant-class consumer's factor has one) stays out of the min.
        full = np.full(part.shape[:-1] + (fs[big].table.shape[big_v],), np.inf)
        full[..., key[by_key][starts]] = np.minimum.reduceat(part[..., by_key], starts, axis=-1)
        total = full + join.placed(big, keep_v_axis=True)
    else:
        total = vcost.reshape([1] * (len(join.scope) - 1) + [-1])
        for n in range(len(fs)):
            total = total + join.placed(n)
    return total.min(axis=-1), two_stage


def _recover(trail: list[tuple[int, list[Factor]]], unary: list[np.ndarray]) -> list[int]:
    """Every variable's choice, in reverse elimination order from the factors it was joined with."""
    assign = [0] * len(unary)
    for v, fs in reversed(trail):
        vec = unary[v].copy()
        for f in fs:
            key = tuple(f.idx[ax] if u == v else f.idx[ax][assign[u]]
                        for ax, u in enumerate(f.scope))
            vec += f.table[key]
        assign[v] = int(np.argmin(vec))
    return assign
