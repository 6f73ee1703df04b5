"""Materials and the pairwise contact parameters derived from them.

A material gives a density and the contact law parameters of the linear spring-dashpot model with
a Cundall-Strack tangential spring (see :mod:`parsim.contacts`), in one of two forms:

* ``stiffness`` kn [N/m] and ``damping`` gamma_n [1/s]: normal force ``kn*delta - m_eff*gamma_n*v_n``
  (the LAMMPS ``gran/hooke/history`` convention; gamma_n is per unit effective mass);
* ``restitution`` e in (0, 1] and ``collision_time`` t_c [s] (the mesa_pd convention): for every
  contact kn = m_eff (pi^2 + ln^2 e) / t_c^2 and gamma_n = -2 ln(e) / t_c, so that every collision
  lasts t_c and rebounds with normal restitution e exactly, whatever the masses.

The tangential spring is ``kt = tangential_stiffness_ratio * kn`` (default 2/7) and the tangential
damping ``gamma_t = tangential_damping_ratio * gamma_n`` (default 1/2, as LAMMPS with gamma_t NULL);
``friction`` is the Coulomb coefficient mu; ``rolling_friction`` the coefficient mu_r of the
rolling-resistance torque (default 0: off).

``model = "hertz"`` (with stiffness and damping) makes the contact Hertz-Mindlin as LAMMPS's
``gran/hertz/history``: kn, gamma_n, kt and gamma_t are multiplied by sqrt(delta R_eff)
(R_eff = r_a r_b / (r_a + r_b), against a plane r_a; bounding radii for boxes and capsules).

Mixing rules for two different materials (override any pair with
:meth:`parsim.Simulation.set_interaction`):

==========================  ==========================================
parameter                   mixed value
==========================  ==========================================
stiffness                   harmonic mean 2 k1 k2 / (k1 + k2)
damping, collision_time     arithmetic mean
restitution                 geometric mean sqrt(e1 e2)
friction, rolling_friction  geometric mean sqrt(mu1 mu2)
ratios                      arithmetic mean
==========================  ==========================================

Two materials of different forms (one with stiffness, one with restitution) have no mixed value:
give their pair explicitly with ``set_interaction``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# columns of the pair table (float64[n_materials, n_materials, N_PARAMS])
P_MODE, P_KN, P_GN, P_KT_RATIO, P_GT_RATIO, P_MU, P_MU_ROLL, P_HERTZ = range(8)
N_PARAMS = 8
MODE_STIFFNESS, MODE_RESTITUTION = 0.0, 1.0


@dataclass(frozen=True)
class Material:
    """A named material. ``index`` is its row in the pair table (what bodies store)."""

    name: str
    index: int
    density: float
    friction: float = 0.5
    rolling_friction: float = 0.0
    stiffness: float | None = None
    damping: float | None = None
    restitution: float | None = None
    collision_time: float | None = None
    tangential_stiffness_ratio: float = 2.0 / 7.0
    tangential_damping_ratio: float = 0.5
    model: str = "hooke"

    @property
    def mode(self) -> float:
        return MODE_STIFFNESS if self.stiffness is not None else MODE_RESTITUTION


def _check(name: str, field: str, value, low: float, high: float = math.inf,
           low_open: bool = False, high_open: bool = False) -> float:
    import numbers

    # a bool or a string is not a number here (float(True) and float("2500") would pass)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"material {name!r}: {field} must be a number, got {value!r}")
    v = float(value)
    ok_low = v > low if low_open else v >= low
    ok_high = v < high if high_open else v <= high
    if not (math.isfinite(v) and ok_low and ok_high):
        lo_b = "(" if low_open else "["
        hi_b = ")" if high_open or high == math.inf else "]"
        raise ValueError(f"material {name!r}: {field} = {value!r} is outside the allowed range "
                         f"{lo_b}{low}, {high}{hi_b}")
    return v


def make_material(name: str, index: int, density, restitution=None, collision_time=None,
                  stiffness=None, damping=None, friction=0.5, rolling_friction=0.0,
                  tangential_stiffness_ratio=2.0 / 7.0, tangential_damping_ratio=0.5,
                  model="hooke") -> Material:
    """Validate the parameters of a material (errors name the material and the field)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a material needs a non-empty name, got {name!r}")
    by_stiffness = stiffness is not None or damping is not None
    by_restitution = restitution is not None or collision_time is not None
    if by_stiffness and by_restitution:
        raise ValueError(f"material {name!r}: give either stiffness and damping, or restitution "
                         "and collision_time, not both")
    if not by_stiffness and not by_restitution:
        raise ValueError(f"material {name!r}: give stiffness and damping, or restitution and "
                         "collision_time")
    if model not in ("hooke", "hertz"):
        raise ValueError(f"material {name!r}: model must be 'hooke' or 'hertz', got {model!r}")
    if model == "hertz" and by_restitution:
        raise ValueError(f"material {name!r}: the hertz model takes stiffness and damping "
                         "(restitution and collision_time define a linear contact)")
    kw = dict(
        model=model,
        name=name, index=index, density=_check(name, "density", density, 0.0, low_open=True),
        friction=_check(name, "friction", friction, 0.0),
        rolling_friction=_check(name, "rolling_friction", rolling_friction, 0.0),
        tangential_stiffness_ratio=_check(name, "tangential_stiffness_ratio",
                                          tangential_stiffness_ratio, 0.0),
        tangential_damping_ratio=_check(name, "tangential_damping_ratio",
                                        tangential_damping_ratio, 0.0),
    )
    if by_stiffness:
        if stiffness is None or damping is None:
            raise ValueError(f"material {name!r}: stiffness and damping go together; give both")
        kw["stiffness"] = _check(name, "stiffness", stiffness, 0.0, low_open=True)
        kw["damping"] = _check(name, "damping", damping, 0.0)
    else:
        if restitution is None or collision_time is None:
            raise ValueError(f"material {name!r}: restitution and collision_time go together; "
                             "give both")
        kw["restitution"] = _check(name, "restitution", restitution, 0.0, 1.0, low_open=True)
        # (its square divides: 1e-300 raised ZeroDivisionError, 1e300 OverflowError; 2026-11-29)
        kw["collision_time"] = _check(name, "collision_time", collision_time, 1e-150, 1e150)
    return Material(**kw)


def _row(m: Material) -> np.ndarray:
    row = np.zeros(N_PARAMS)
    row[P_MODE] = m.mode
    if m.mode == MODE_STIFFNESS:
        row[P_KN], row[P_GN] = m.stiffness, m.damping
    else:
        ln_e = math.log(m.restitution)
        row[P_KN] = (math.pi**2 + ln_e**2) / m.collision_time**2   # times m_eff per contact
        row[P_GN] = -2.0 * ln_e / m.collision_time
    row[P_KT_RATIO] = m.tangential_stiffness_ratio
    row[P_GT_RATIO] = m.tangential_damping_ratio
    row[P_MU] = m.friction
    row[P_MU_ROLL] = m.rolling_friction
    row[P_HERTZ] = 1.0 if m.model == "hertz" else 0.0
    return row


def mixed(a: Material, b: Material, overrides: dict) -> np.ndarray:
    """Pair-table row of materials a and b (mixing rules of the module docstring)."""
    key = (min(a.index, b.index), max(a.index, b.index))
    if key in overrides:
        return overrides[key]
    return _row(_mixed_material(a, b))


def mix_problem(a: Material, b: Material) -> str | None:
    """Why materials a and b do not mix (the mixing rules need the same model and the same
    parameter form), or None."""
    if a.model != b.model:
        return f"different contact models ({a.model} and {b.model})"
    if a.mode != b.mode:
        return ("different parameter forms (one stiffness and damping, the other restitution "
                "and collision_time)")
    return None


def _mixed_material(a: Material, b: Material) -> Material:
    """The pair a, b as one material (mixing rules); a ValueError when they do not mix."""
    if a.index == b.index:
        return a
    why = mix_problem(a, b)
    if why is not None:
        raise ValueError(f"materials {a.name!r} and {b.name!r} have {why}; set their pair with "
                         "set_interaction(a, b, ...)")
    if a.mode == MODE_STIFFNESS:
        m = Material(a.name + "+" + b.name, -1, 1.0,
                     stiffness=2 * a.stiffness * b.stiffness / (a.stiffness + b.stiffness),
                     damping=0.5 * (a.damping + b.damping), **_common(a, b))
    else:
        m = Material(a.name + "+" + b.name, -1, 1.0,
                     restitution=math.sqrt(a.restitution * b.restitution),
                     collision_time=0.5 * (a.collision_time + b.collision_time), **_common(a, b))
    return m


def _common(a: Material, b: Material) -> dict:
    return dict(model=a.model, friction=math.sqrt(a.friction * b.friction),
                rolling_friction=math.sqrt(a.rolling_friction * b.rolling_friction),
                tangential_stiffness_ratio=0.5 * (a.tangential_stiffness_ratio
                                                  + b.tangential_stiffness_ratio),
                tangential_damping_ratio=0.5 * (a.tangential_damping_ratio
                                                + b.tangential_damping_ratio))


def pair_table(materials: list[Material], overrides: dict) -> np.ndarray:
    n = len(materials)
    table = np.zeros((max(n, 1), max(n, 1), N_PARAMS))
    for a in materials:
        for b in materials:
            table[a.index, b.index] = mixed(a, b, overrides)
    return table


#: what a material takes besides its name and density
PARAMETERS = ("restitution", "collision_time", "stiffness", "damping", "friction",
              "rolling_friction", "tangential_stiffness_ratio", "tangential_damping_ratio",
              "model")
_NORMAL = ("restitution", "collision_time", "stiffness", "damping")


def unknown_parameters(name: str, params: dict) -> None:
    """A ValueError naming the first parameter a material does not take, if any."""
    bad = [k for k in params if k not in PARAMETERS]
    if bad:
        raise ValueError(f"material {name!r}: unknown parameter {bad[0]!r}; a material takes "
                         f"density and {', '.join(PARAMETERS)}")


def override_row(a: Material, b: Material, params: dict) -> np.ndarray:
    """Row for ``set_interaction``: the pair's own parameters, validated like a material's.
    What ``params`` leaves out keeps the pair's mixed value (the normal law as a whole: the
    stiffness and damping, or the restitution and collision time); when the two materials do
    not mix, the normal law must be given."""
    name = f"{a.name}+{b.name}"
    unknown_parameters(name, params)
    try:
        base = _mixed_material(a, b)
    except ValueError:
        base = None
    kw = {}
    if base is not None:
        kw = {k: getattr(base, k) for k in PARAMETERS if k not in _NORMAL}
        if not any(k in params for k in _NORMAL):
            kw.update({k: getattr(base, k) for k in _NORMAL if getattr(base, k) is not None})
    kw.update(params)
    return _row(make_material(name, -1, 1.0, **kw))


def collision_time(row: np.ndarray, m_eff: float) -> float:
    """Duration of a normal collision of effective mass ``m_eff`` under the pair row (inf if
    the contact is overdamped)."""
    kn = row[P_KN] * (m_eff if row[P_MODE] == MODE_RESTITUTION else 1.0)
    gn = row[P_GN]
    w2 = kn / m_eff - 0.25 * gn * gn
    return math.pi / math.sqrt(w2) if w2 > 0 else math.inf
