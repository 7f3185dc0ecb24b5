"""The social-force parameters a scene is walked with, apart from the simulation.

Both the crowd-scene reader (``engine.io.crowd``, which reports the parameters a scene file
holds) and the simulation (``engine.crowd.social_force``) need them; kept here, the reader
imports neither the simulation nor SciPy, and the simulation imports the reader's ``Scene``
without a cycle (issue 37: readers do not depend on simulations).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.io.crowd import Scene


@dataclass(frozen=True)
class SocialForceParams:
    desired_speed_mps: float = 1.34  # Helbing's defaults for an uncongested walk
    desired_speed_std_mps: float = 0.26
    relaxation_s: float = 0.5
    agent_strength: float = 5.0  # A, m/s^2 (Moussaïd 2.1, raised: no look-ahead here)
    agent_range_m: float = 0.3  # B
    radius_m: float = 0.25
    obstacle_strength: float = 10.0
    obstacle_range_m: float = 0.2
    anisotropy: float = 0.5  # weight of a push from straight behind (1 = isotropic)
    max_speed_factor: float = 1.3

    def to_dict(self) -> dict:
        return asdict(self)


def scene_params(scene: Scene) -> SocialForceParams:
    """The parameters stored in the scene, else the defaults."""
    if scene.social_force is None:
        return SocialForceParams()
    return SocialForceParams(**scene.social_force.model_dump(exclude={"fitted_to"}))
