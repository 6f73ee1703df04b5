"""Stateful property tests: random add / update / remove / add_infinite / remove sequences.

One hypothesis ``RuleBasedStateMachine`` per structure configuration
(:data:`broadphase_configs.CONFIGS`). After every step the structure is compared with the
pure-numpy oracle: ``pairs()`` as a set (and exactly once, ``a < b``), ``len``, and freshly drawn
box, radius and ray queries; HHG configurations also check their activation state and grid
hierarchy against the thesis rules. The boxes mix every distribution of
:mod:`broadphase_strategies` (polydisperse, clustered, elongated, far away, negative, touching,
points, duplicates) and ids mix fresh, re-used and huge values.
"""

from __future__ import annotations

import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import broadphase_oracle as orc
import broadphase_strategies as bs
from broadphase_configs import CONFIGS, check_hhg_invariants, hyp_settings, make

MAX_EXAMPLES = 30
STEPS = 20
HUGE_IDS = (2**31 - 1, 2**31, 2**32 + 7, 2**53 + 1, 2**62 + 3, 2**63 - 2, 2**63 - 1)


@st.composite
def id_candidates(draw, n: int, retired: tuple, next_id: int) -> list[int]:
    """Fresh ids (with gaps), re-used ids of removed bodies, and huge ids near int64 limits."""
    out = []
    for _ in range(n):
        how = draw(st.integers(0, 9))
        if how < 2 and retired:
            out.append(retired[draw(st.integers(0, len(retired) - 1))])
        elif how == 9:
            out.append(draw(st.sampled_from(HUGE_IDS)))
        else:
            out.append(next_id + draw(st.integers(0, 3)))
    return out


class BroadPhaseMachine(RuleBasedStateMachine):
    cfg = None  # set per subclass

    def __init__(self):
        super().__init__()
        self.bp = None
        self.model = orc.Model()
        self.next_id = 0
        self.retired: list[int] = []  # removed ids, candidates for re-use
        self.max_finite = 0
        self.max_total = 0
        self.steps = 0

    @initialize()
    def build(self):
        # Resolved here, not at import: a missing class fails its own tests only.
        self.bp = make(self.cfg)

    # ---- helpers --------------------------------------------------------------------------
    @staticmethod
    def log(call: str, *arrays) -> None:
        """Print the exact call in the failure report (a copy-pasteable reproduction)."""
        note(f"bp.{call}(" + ", ".join(repr(np.asarray(a).tolist()) for a in arrays) + ")")

    def refs(self) -> list:
        return list(self.model.boxes.values())

    def new_ids(self, data, n: int) -> np.ndarray:
        cands = data.draw(id_candidates(n, tuple(self.retired), self.next_id), label="ids")
        out: list[int] = []
        for cand in cands:
            if self.model.present(cand) or cand in out:
                cand = self.next_id
                while self.model.present(cand) or cand in out:
                    cand += 1
            if cand < 2**31:
                self.next_id = max(self.next_id, cand + 1)
            out.append(cand)
        return np.array(out, dtype=np.int64)

    def draw_boxes(self, data, n: int):
        kind, lo, hi = data.draw(bs.box_batch(self.refs(), n), label="boxes")
        return lo, hi

    def after(self, data):
        n_fin = len(self.model.boxes)
        self.max_finite = max(self.max_finite, n_fin)
        self.max_total = max(self.max_total, len(self.model))
        self.check_all(data)

    def check_all(self, data):
        bp, model = self.bp, self.model
        assert len(bp) == len(model), f"len {len(bp)}, expected {len(model)}"
        orc.assert_pairs_equal(bp.pairs(), model.pairs(), model)
        refs = self.refs()
        (qlo, qhi), (p, r), (o, d, t_max) = data.draw(bs.queries(refs), label="queries")
        self.check_queries(qlo, qhi, p, r, o, d, t_max)
        if refs:
            # plus queries needing no draws: the whole world, and a probe at one body's centre
            k = self.steps % len(refs)
            self.steps += 1
            c = (refs[k][0] + refs[k][1]) / 2
            self.check_queries(np.full(3, -1e7), np.full(3, 1e7), c, 0.0, c, np.array([1.0, 0.0, 0.0]), np.inf)
        if self.cfg.is_hhg:
            _, lo, hi = model.arrays()
            check_hhg_invariants(bp, self.cfg, lo, hi, self.max_finite, self.max_total)

    def check_queries(self, qlo, qhi, p, r, o, d, t_max):
        bp, model = self.bp, self.model
        note(f"queries: box {qlo.tolist()} {qhi.tolist()}; radius {p.tolist()} {r}; "
             f"ray {o.tolist()} {d.tolist()} {t_max}")
        orc.assert_ids_equal(bp.query_box(qlo, qhi), model.query_box(qlo, qhi), model=model,
                             label=f"query_box({qlo.tolist()}, {qhi.tolist()})")
        exp, amb = model.query_radius(p, r)
        orc.assert_ids_equal(bp.query_radius(p, r), exp, amb, model=model,
                             label=f"query_radius({p.tolist()}, {r})")
        exp, amb = model.raycast(o, d, t_max)
        orc.assert_ray_equal(bp.raycast(o, d, t_max), exp, amb, model=model,
                             label=f"raycast({o.tolist()}, {d.tolist()}, {t_max})")

    # ---- rules ----------------------------------------------------------------------------
    @rule(data=st.data(), n=st.integers(1, 6))
    def add(self, data, n):
        ids = self.new_ids(data, n)
        lo, hi = self.draw_boxes(data, n)
        self.log("add", ids, lo, hi)
        self.bp.add(ids, lo, hi)
        self.model.add(ids, lo, hi)
        self.after(data)

    @precondition(lambda self: len(self.model.boxes) < 80)
    @rule(data=st.data(), n=st.integers(10, 36))
    def add_many(self, data, n):
        # big batches cross the activation threshold of the HHG in one call
        ids = self.new_ids(data, n)
        lo, hi = self.draw_boxes(data, n)
        self.log("add", ids, lo, hi)
        self.bp.add(ids, lo, hi)
        self.model.add(ids, lo, hi)
        self.after(data)

    @precondition(lambda self: len(self.model.boxes) > 0)
    @rule(data=st.data())
    def update_some(self, data):
        present = list(self.model.boxes)
        ids = data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=len(present), unique=True))
        lo, hi = data.draw(bs.mutation_batch([self.model.boxes[i] for i in ids], self.refs()),
                           label="new boxes")
        self.log("update", ids, lo, hi)
        self.bp.update(np.array(ids, dtype=np.int64), np.array(lo), np.array(hi))
        self.model.update(ids, lo, hi)
        self.after(data)

    @precondition(lambda self: len(self.model.boxes) > 0)
    @rule(data=st.data(), order=st.sampled_from(["insertion", "sorted", "reversed"]))
    def update_all(self, data, order):
        # every body at once, in insertion order (the stored order until a removal), id order
        # or reversed: one time step of the engine
        ids = list(self.model.boxes)
        if order == "sorted":
            ids.sort()
        elif order == "reversed":
            ids.reverse()
        lo, hi = data.draw(bs.mutation_batch([self.model.boxes[i] for i in ids], self.refs()),
                           label="new boxes")
        self.log("update", ids, lo, hi)
        self.bp.update(np.array(ids, dtype=np.int64), np.array(lo), np.array(hi))
        self.model.update(ids, lo, hi)
        self.after(data)

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def remove_some(self, data):
        present = list(self.model.boxes) + sorted(self.model.infinite)
        ids = data.draw(st.lists(st.sampled_from(present), min_size=1, max_size=len(present), unique=True))
        self.log("remove", ids)
        self.bp.remove(np.array(ids, dtype=np.int64))
        self.model.remove(ids)
        self.retired.extend(ids)
        self.after(data)

    @rule(data=st.data(), n=st.integers(1, 2))
    def add_infinite(self, data, n):
        ids = self.new_ids(data, n)
        self.log("add_infinite", ids)
        self.bp.add_infinite(ids)
        self.model.add_infinite(ids)
        self.after(data)

    @precondition(lambda self: len(self.model.infinite) > 0)
    @rule(data=st.data())
    def remove_infinite(self, data):
        ids = data.draw(st.lists(st.sampled_from(sorted(self.model.infinite)), min_size=1, unique=True))
        self.log("remove", ids)
        self.bp.remove(np.array(ids, dtype=np.int64))
        self.model.remove(ids)
        self.retired.extend(ids)
        self.after(data)

    @invariant()
    def length(self):
        if self.bp is not None:
            assert len(self.bp) == len(self.model)


def _machine_test(cfg):
    machine = type(f"Machine_{cfg.name}", (BroadPhaseMachine,), {"cfg": cfg})
    case = machine.TestCase
    case.settings = hyp_settings(MAX_EXAMPLES, stateful_step_count=STEPS)
    return case


# One unittest-style test class per configuration; the class name carries the structure name
# so that `-k BruteForce` / `-k HierarchicalHashGrid` select it.
for _cfg in CONFIGS:
    _name = "TestStateful_" + _cfg.name.replace("-", "_").replace(".", "_")
    globals()[_name] = _machine_test(_cfg)
    globals()[_name].__name__ = _name
    globals()[_name].__qualname__ = _name
del _cfg, _name
