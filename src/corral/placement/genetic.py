"""Liquid's grouping genetic algorithm: pack a batch of waiting jobs at once.

When jobs arrive in a burst, placing them one by one (each at its best) can
leave the cluster fragmented for the next. Liquid packs the whole batch with a
grouping genetic algorithm, whose genes are nodes (groups) holding job
instances rather than single assignments:

* a plan gives each job of the batch its GPUs per node, or leaves it out
  (gangs are whole: all of a job's GPUs or none);
* fitness = -(sum of the placed jobs' scores) - (nodes used) - (jobs left out)
  x a large penalty, the score being Liquid's (:mod:`corral.placement.network`);
* crossover keeps the jobs one parent placed entirely on a random half of its
  nodes, drops the rest, and re-inserts them first fit in the other parent's
  order; mutation empties a random node and re-inserts its jobs first fit.

The search is seeded and bounded by a number of generations (so simulations
are reproducible) and by a wall-time budget (so a pass never stalls).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from corral.model.free_gpus import FreeGPUs
from corral.placement.network import link_costs, placement_score

LEFT_OUT = 1000.0
"""Fitness penalty per job of the batch the plan leaves out."""


@dataclass
class Plan:
    counts: np.ndarray
    """jobs x nodes: GPUs of each job on each node (a row of zeros: left out)."""
    fitness: float = 0.0


def first_fit(
    sizes: np.ndarray, order: list[int], counts: np.ndarray, left: np.ndarray, nodes: np.ndarray
) -> None:
    """Place the jobs of ``order`` whose row is empty, each on the first nodes
    (in ``nodes`` order) with room, whole or not at all (in place)."""
    for j in order:
        if counts[j].any() or sizes[j] > left.sum():
            continue
        need = int(sizes[j])
        for node in nodes.tolist():
            take = min(need, int(left[node]))
            if take:
                counts[j, node] += take
                left[node] -= take
                need -= take
                if not need:
                    break


class BatchPacker:
    """Packs a batch of gangs onto the free GPUs; see the module docstring."""

    def __init__(
        self,
        weight: float = 0.5,
        population: int = 10,
        generations: int = 20,
        budget_s: float = 0.05,
        seed: int = 0,
    ) -> None:
        self.weight = weight
        self.population = population
        self.generations = generations
        self.budget_s = budget_s
        self.rng = np.random.default_rng(seed)
        self._costs: tuple[int, np.ndarray] | None = None

    def pack(self, free: FreeGPUs, sizes: list[int]) -> list[dict[int, int]]:
        """For each job (in the given order), its GPUs per node; {} if left out."""
        cluster = free.cluster
        if self._costs is None or self._costs[0] != id(cluster):
            self._costs = (id(cluster), link_costs(cluster))
        costs = self._costs[1]
        size = np.asarray(sizes, dtype=np.int64)
        room = free.node_free.astype(np.int64)
        deadline = time.perf_counter() + self.budget_s
        jobs = list(range(len(sizes)))
        # the first plan is the jobs in order, tightest nodes first; the rest random
        pool = [self._decode(size, jobs, room, np.argsort(room, kind="stable"), free, costs)]
        while len(pool) < self.population:
            order = self.rng.permutation(len(sizes)).tolist()
            nodes = self.rng.permutation(len(room))
            pool.append(self._decode(size, order, room, nodes, free, costs))
        for _ in range(self.generations):
            if time.perf_counter() > deadline:
                break
            pool.sort(key=lambda p: -p.fitness)
            parents = pool[: max(2, self.population // 2)]
            children: list[Any] = []
            while len(parents) + len(children) < self.population:
                a, b = self.rng.choice(len(parents), 2, replace=False)
                child = self._cross(parents[a], parents[b], size, room, free, costs)
                if self.rng.random() < 0.3:
                    child = self._mutate(child, size, room, free, costs)
                children.append(child)
            pool = parents + children
        best = max(pool, key=lambda p: p.fitness)
        return [
            {int(n): int(best.counts[j, n]) for n in np.flatnonzero(best.counts[j])}
            for j in range(len(sizes))
        ]

    def _decode(
        self,
        size: np.ndarray,
        order: list[int],
        room: np.ndarray,
        nodes: np.ndarray,
        free: FreeGPUs,
        costs: np.ndarray,
    ) -> Plan:
        counts = np.zeros((len(size), len(room)), dtype=np.int64)
        first_fit(size, order, counts, room.copy(), nodes)
        return self._score(Plan(counts), free, costs)

    def _score(self, plan: Plan, free: FreeGPUs, costs: np.ndarray) -> Plan:
        placed = plan.counts.any(axis=1)
        score = sum(
            placement_score(free.cluster, free, plan.counts[j], costs, self.weight)
            for j in np.flatnonzero(placed).tolist()
        )
        nodes_used = int(plan.counts.any(axis=0).sum())
        plan.fitness = -score - nodes_used - LEFT_OUT * int((~placed).sum())
        return plan

    def _cross(
        self,
        a: Plan,
        b: Plan,
        size: np.ndarray,
        room: np.ndarray,
        free: FreeGPUs,
        costs: np.ndarray,
    ) -> Plan:
        used = np.flatnonzero(a.counts.any(axis=0))
        keep_nodes = (
            self.rng.choice(used, max(1, len(used) // 2), replace=False) if len(used) else used
        )
        inside = np.zeros(len(room), dtype=bool)
        inside[keep_nodes] = True
        counts = np.zeros_like(a.counts)
        for j in range(len(size)):
            row = a.counts[j]
            if row.any() and not (row[~inside] > 0).any():
                counts[j] = row
        left = room - counts.sum(axis=0)
        # the other jobs, in the order the other parent placed them (its nodes first)
        order = sorted(range(len(size)), key=lambda j: int(np.argmax(b.counts[j] > 0)))
        nodes = np.argsort(-counts.sum(axis=0) - b.counts.sum(axis=0), kind="stable")
        first_fit(size, order, counts, left, nodes)
        return self._score(Plan(counts), free, costs)

    def _mutate(
        self, plan: Plan, size: np.ndarray, room: np.ndarray, free: FreeGPUs, costs: np.ndarray
    ) -> Plan:
        used = np.flatnonzero(plan.counts.any(axis=0))
        if not len(used):
            return plan
        node = int(self.rng.choice(used))
        counts = plan.counts.copy()
        moved = np.flatnonzero(counts[:, node])
        counts[moved] = 0
        left = room - counts.sum(axis=0)
        nodes = np.argsort(left, kind="stable")
        first_fit(size, self.rng.permutation(moved).tolist(), counts, left, nodes)
        # jobs the emptied node freed room for, but left out before, get a chance too
        first_fit(size, list(range(len(size))), counts, left, nodes)
        return self._score(Plan(counts), free, costs)
