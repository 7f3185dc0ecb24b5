"""A coarse crowd renderer of our own: exact per-pixel ray casting of analytic shapes.

A pinhole camera, interpolated between keyframes, looks at a ground rectangle (z = 0),
axis-aligned boxes (buildings, obstacles) and pedestrians (a vertical cylinder for the body and
a sphere for the head). Each pixel's ray is intersected with every shape at once in NumPy, which
gives per frame: RGB, z-depth (metres along the view axis), a label map (sky, ground, box,
person) and the id of the person seen at each pixel (the silhouettes).

Two looks share the geometry: ``flat`` colours (the coarse control of C2R) and ``textured``
(procedural cobblestones, facades with windows, clothes, skin, soft light and sensor noise),
which stands in for real footage offline. Textures are functions of the world point hit, so
they stay put from frame to frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.io.crowd import CameraKeyframe, Scene

SKY, GROUND, BOX, PERSON = 0, 1, 2, 3
BODY_RADIUS_M = 0.25
BODY_HEIGHT_M = 1.45
HEAD_RADIUS_M = 0.14
HEAD_CENTRE_M = 1.62
PERSON_TOP_M = HEAD_CENTRE_M + HEAD_RADIUS_M
CULL_SLACK_M = 0.05  # covers float32 rounding in the rays' culling of people
LIGHT = np.array([0.4, -0.3, 0.85]) / np.linalg.norm([0.4, -0.3, 0.85])
SKY_RGB = np.array([0.72, 0.8, 0.93])
FAR = np.inf


@dataclass(frozen=True)
class Camera:
    position: np.ndarray  # (3,)
    look_at: np.ndarray  # (3,)
    fov_deg: float  # vertical field of view
    width: int
    height: int

    @property
    def focal_px(self) -> float:
        return (self.height / 2) / math.tan(math.radians(self.fov_deg) / 2)

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(forward, right, up) unit vectors; z is up in the world."""
        forward = np.asarray(self.look_at, float) - np.asarray(self.position, float)
        forward /= np.linalg.norm(forward)
        world_up = np.array([0.0, 0.0, 1.0]) if abs(forward[2]) < 0.999 else np.array(
            [0.0, 1.0, 0.0])
        right = np.cross(forward, world_up)
        right /= np.linalg.norm(right)
        return forward, right, np.cross(right, forward)

    def rays(self) -> np.ndarray:
        """(H*W, 3) directions scaled so that their forward component is 1 (t = z-depth)."""
        forward, right, up = self.basis()
        cols = (np.arange(self.width) + 0.5 - self.width / 2) / self.focal_px
        rows = (np.arange(self.height) + 0.5 - self.height / 2) / self.focal_px
        grid_r, grid_c = np.meshgrid(rows, cols, indexing="ij")
        return (forward + grid_c[..., None] * right - grid_r[..., None] * up).reshape(-1, 3)

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(column, row, depth) in pixels and metres of world points (N, 3)."""
        forward, right, up = self.basis()
        rel = np.asarray(points, float) - self.position
        depth = rel @ forward
        col = self.width / 2 + self.focal_px * (rel @ right) / depth
        row = self.height / 2 - self.focal_px * (rel @ up) / depth
        return col, row, depth


def camera_at(keyframes: list[CameraKeyframe], t_s: float, width: int, height: int) -> Camera:
    """The camera at time ``t_s``, linearly interpolated between keyframes (held at the ends)."""
    times = [k.t_s for k in keyframes]
    index = int(np.searchsorted(times, t_s, side="right"))
    if index == 0 or index == len(keyframes):
        key = keyframes[max(0, index - 1)]
        return Camera(np.array(key.position), np.array(key.look_at), key.fov_deg, width, height)
    a, b = keyframes[index - 1], keyframes[index]
    w = (t_s - a.t_s) / (b.t_s - a.t_s)
    mix = lambda p, q: (1 - w) * np.asarray(p, float) + w * np.asarray(q, float)  # noqa: E731
    return Camera(mix(a.position, b.position), mix(a.look_at, b.look_at),
                  (1 - w) * a.fov_deg + w * b.fov_deg, width, height)


@dataclass
class Geometry:
    """What a frame shows: ground half-extents, boxes (K, 6: x0 y0 0 x1 y1 h) and their colours,
    people's ground positions (N, 2) and colours, and which of them are present."""

    ground_half: tuple[float, float]
    ground_rgb: np.ndarray
    boxes: np.ndarray
    box_rgb: np.ndarray
    people: np.ndarray
    people_rgb: np.ndarray
    present: np.ndarray


def scene_geometry(scene: Scene, people: np.ndarray, people_rgb: np.ndarray,
                   present: np.ndarray | None = None) -> Geometry:
    solids = scene.buildings + scene.obstacles
    boxes = np.array([(*b.bounds()[:2], 0.0, *b.bounds()[2:], b.height) for b in solids],
                     float).reshape(-1, 6)
    return Geometry((scene.ground.size[0] / 2, scene.ground.size[1] / 2),
                    np.array(scene.ground.color), boxes,
                    np.array([b.color for b in solids], float).reshape(-1, 3),
                    np.asarray(people, float).reshape(-1, 2),
                    np.asarray(people_rgb, float).reshape(-1, 3),
                    np.ones(len(people), bool) if present is None else np.asarray(present))


@dataclass
class Frame:
    rgb: np.ndarray  # (H, W, 3) float in [0, 1]
    depth: np.ndarray  # (H, W) float32 metres along the view axis, inf for sky
    label: np.ndarray  # (H, W) uint8: SKY, GROUND, BOX, PERSON
    person: np.ndarray  # (H, W) int32: index of the person seen, -1 elsewhere
    point: np.ndarray  # (H, W, 3) world point hit
    normal: np.ndarray  # (H, W, 3)

    @property
    def silhouette(self) -> np.ndarray:
        return self.label == PERSON


def _hit_ground(origin, rays, half) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -origin[2] / rays[:, 2]
    point = origin + t[:, None] * rays
    on = (t > 0) & (np.abs(point[:, 0]) <= half[0]) & (np.abs(point[:, 1]) <= half[1])
    return np.where(on, t, FAR)


def _hit_boxes(origin, rays, boxes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, box index, normal axis * sign) of the nearest box per ray (slab test), one box at
    a time: a scene has a few boxes and a frame tens of thousands of rays."""
    count = len(rays)
    best = np.full(count, FAR)
    which = np.full(count, -1)
    axis = np.zeros(count, int)
    inverse = 1.0 / np.where(np.abs(rays) < 1e-12, 1e-12, rays)
    for index, box in enumerate(boxes):
        t1 = (box[:3] - origin) * inverse  # (P, 3)
        t2 = (box[3:] - origin) * inverse
        near, far = np.minimum(t1, t2), np.maximum(t1, t2)
        x, y, z = near.T
        t_near = np.maximum(np.maximum(x, y), z)
        t_far = np.minimum(np.minimum(far[:, 0], far[:, 1]), far[:, 2])
        closer = (t_near <= t_far) & (t_near > 0) & (t_near < best)
        best = np.where(closer, t_near, best)
        which = np.where(closer, index, which)
        entry = np.where(z > np.maximum(x, y), 2, np.where(y > x, 1, 0))  # the face crossed
        axis = np.where(closer, entry, axis)
    rows = np.arange(count)
    normal = np.zeros((count, 3))
    normal[rows, axis] = -np.sign(rays[rows, axis])
    return best, which, normal


def _hit_people(origin, rays, people) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, person index, normal) of the nearest body (cylinder with a top cap) or head.

    Each person fits in a sphere; one matrix product (float32) tells which rays pass within
    it, and the exact intersections (float64) are computed only for those (ray, person)
    pairs: a person covers a few hundred pixels of a frame, so this skips almost all the
    work of testing every pair."""
    count = len(rays)
    best = np.full(count, FAR)
    who = np.full(count, -1)
    normal = np.zeros((count, 3))
    if not len(people):
        return best, who, normal
    centres = np.c_[people, np.full(len(people), PERSON_TOP_M / 2)]
    reach = np.hypot(max(BODY_RADIUS_M, HEAD_RADIUS_M), PERSON_TOP_M / 2) + CULL_SLACK_M
    q = (centres - origin).astype(np.float32)  # (N, 3) from the camera to each person
    unit = (rays / np.linalg.norm(rays, axis=1, keepdims=True)).astype(np.float32)
    along = unit @ q.T  # (P, N) distance along each ray to the point nearest the centre
    gap = (q * q).sum(1)[None] - along * along  # squared distance of the centre from the ray
    ray, person = np.nonzero((gap <= np.float32(reach * reach)) & (along > -reach))
    if not len(ray):
        return best, who, normal
    ox, oy, oz = origin
    dx, dy, dz = rays[ray, 0], rays[ray, 1], rays[ray, 2]
    qx, qy = ox - people[person, 0], oy - people[person, 1]
    a = dx * dx + dy * dy
    b = 2 * (qx * dx + qy * dy)
    c = qx * qx + qy * qy - BODY_RADIUS_M ** 2
    disc = b * b - 4 * a * c
    with np.errstate(invalid="ignore", divide="ignore"):
        t_side = (-b - np.sqrt(disc)) / (2 * a)
        z_side = oz + t_side * dz
        side = (disc >= 0) & (t_side > 0) & (z_side >= 0) & (z_side <= BODY_HEIGHT_M)
        t_cap = (BODY_HEIGHT_M - oz) / dz
        cap_x, cap_y = qx + t_cap * dx, qy + t_cap * dy
        cap = (t_cap > 0) & (cap_x ** 2 + cap_y ** 2 <= BODY_RADIUS_M ** 2)
        hz = oz - HEAD_CENTRE_M
        b_head = 2 * (qx * dx + qy * dy + hz * dz)
        a_head = a + dz * dz
        c_head = qx * qx + qy * qy + hz * hz - HEAD_RADIUS_M ** 2
        disc_head = b_head ** 2 - 4 * a_head * c_head
        t_head = (-b_head - np.sqrt(disc_head)) / (2 * a_head)
        head = (disc_head >= 0) & (t_head > 0)
    candidates = np.stack([np.where(side, t_side, FAR), np.where(cap, t_cap, FAR),
                           np.where(head, t_head, FAR)])  # (3, M)
    part = candidates.argmin(0)
    t = candidates.min(0)
    order = np.lexsort((t, ray))  # per ray, nearest first (ties: the lower person index)
    first = order[np.r_[True, ray[order][1:] != ray[order][:-1]]]
    first = first[np.isfinite(t[first])]
    rows, kind = ray[first], part[first]
    best[rows], who[rows] = t[first], person[first]
    point = origin + best[rows, None] * rays[rows]
    normal[rows, :2] = point[:, :2] - people[who[rows]]
    normal[rows[kind == 1]] = (0.0, 0.0, 1.0)
    heads = rows[kind == 2]
    normal[heads, 2] = point[kind == 2, 2] - HEAD_CENTRE_M
    normal[rows] /= np.linalg.norm(normal[rows], axis=1, keepdims=True) + 1e-9
    return best, who, normal


def render(camera: Camera, geometry: Geometry) -> Frame:
    """Ray-cast one frame with flat shading (the coarse look)."""
    origin = np.asarray(camera.position, float)
    rays = camera.rays()
    present = np.flatnonzero(geometry.present)
    t_ground = _hit_ground(origin, rays, geometry.ground_half)
    t_box, box_index, box_normal = _hit_boxes(origin, rays, geometry.boxes)
    t_person, person_local, person_normal = _hit_people(origin, rays,
                                                        geometry.people[present])
    t_all = np.stack([np.full(len(rays), FAR), t_ground, t_box, t_person])
    label = np.where(np.isfinite(t_all[1:]).any(0), t_all[1:].argmin(0) + 1, SKY)
    depth = np.choose(label, t_all)
    normal = np.zeros((len(rays), 3))
    normal[label == GROUND] = (0.0, 0.0, 1.0)
    normal[label == BOX] = box_normal[label == BOX]
    normal[label == PERSON] = person_normal[label == PERSON]
    base = np.tile(SKY_RGB, (len(rays), 1))
    base[label == GROUND] = geometry.ground_rgb
    if len(geometry.box_rgb):
        base[label == BOX] = geometry.box_rgb[box_index[label == BOX]]
    person = np.where(label == PERSON, present[np.maximum(person_local, 0)], -1)
    if len(present):
        base[label == PERSON] = geometry.people_rgb[person[label == PERSON]]
    light = 0.45 + 0.55 * np.clip(normal @ LIGHT, 0, 1)
    rgb = np.where((label == SKY)[:, None], base, base * light[:, None])
    with np.errstate(invalid="ignore"):
        point = origin + np.where(np.isfinite(depth), depth, 0)[:, None] * rays
    shape = (camera.height, camera.width)
    return Frame(np.clip(rgb, 0, 1).reshape(*shape, 3), depth.astype(np.float32).reshape(shape),
                 label.astype(np.uint8).reshape(shape), person.astype(np.int32).reshape(shape),
                 point.reshape(*shape, 3), normal.reshape(*shape, 3))


# -- the textured ("real") look ------------------------------------------------------------------

def _hash(*values: np.ndarray) -> np.ndarray:
    """A deterministic pseudo-random number in [0, 1) per integer cell."""
    h = np.zeros(np.broadcast(*values).shape, np.uint64)
    for k, v in enumerate(values):
        h ^= (np.asarray(v).astype(np.int64).astype(np.uint64) + np.uint64(0x9E3779B9 + k))
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return (h % np.uint64(1 << 20)).astype(np.float64) / (1 << 20)


def textured(frame: Frame, people_rgb: np.ndarray, noise_seed: int = 0) -> np.ndarray:
    """(H, W, 3) float: the same geometry as ``frame`` with procedural textures and lighting."""
    p, n = frame.point, frame.normal
    rgb = np.tile(SKY_RGB * np.linspace(0.85, 1.05, frame.label.shape[0])[:, None, None],
                  (1, frame.label.shape[1], 1))
    ground = frame.label == GROUND
    tile_x, tile_y = np.floor(p[..., 0] / 0.6), np.floor(p[..., 1] / 0.6)
    stone = 0.45 + 0.25 * _hash(tile_x, tile_y)
    mortar = (np.abs(p[..., 0] / 0.6 - tile_x - 0.5) > 0.42) | (
        np.abs(p[..., 1] / 0.6 - tile_y - 0.5) > 0.42)
    ground_rgb = np.stack([stone * 1.05, stone * 0.95, stone * 0.85], -1)
    ground_rgb[mortar] *= 0.55
    rgb[ground] = ground_rgb[ground]
    box = frame.label == BOX
    along = np.where(np.abs(n[..., 0]) > 0.5, p[..., 1], p[..., 0])
    window = ((along / 1.5) % 1 > 0.35) & ((p[..., 2] / 2.2) % 1 > 0.4) & (n[..., 2] < 0.5)
    wall = 0.55 + 0.15 * _hash(np.floor(along / 1.5), np.floor(p[..., 2] / 2.2))[..., None]
    facade = np.stack([wall[..., 0] * 1.0, wall[..., 0] * 0.85, wall[..., 0] * 0.7], -1)
    facade[window] = (0.18, 0.24, 0.32)
    rgb[box] = facade[box]
    person = frame.person >= 0
    if person.any():
        who = np.maximum(frame.person, 0)
        shirt = people_rgb[who]
        trousers = 0.25 + 0.2 * _hash(who)[..., None] * np.array([0.6, 0.7, 1.0])
        stripes = 0.8 + 0.2 * (np.sin(p[..., 2] * 40) > 0)[..., None]
        clothes = np.where((p[..., 2] < 0.8)[..., None], trousers, shirt * stripes)
        skin = np.array([0.85, 0.66, 0.52]) * (0.8 + 0.2 * _hash(who + 7))[..., None]
        look = np.where((p[..., 2] > BODY_HEIGHT_M + 0.02)[..., None], skin, clothes)
        rgb[person] = look[person]
    lit = 0.35 + 0.75 * np.clip(n @ LIGHT, 0, 1)
    rgb = np.where((frame.label == SKY)[..., None], rgb, rgb * lit[..., None])
    rng = np.random.default_rng(noise_seed)
    rgb = rgb + rng.normal(0, 0.02, rgb.shape)
    return np.clip(rgb, 0, 1)


def flat_colors(count: int, seed: int = 0) -> np.ndarray:
    """Distinct clothing colours for ``count`` people."""
    rng = np.random.default_rng(seed)
    hues = rng.uniform(0, 1, count)
    return np.stack([0.5 + 0.4 * np.cos(2 * np.pi * (hues + k / 3)) for k in range(3)], -1)


def render_clip(scene: Scene, positions: np.ndarray, alive: np.ndarray, people_rgb: np.ndarray,
                width: int, height: int, frames: int | None = None) -> list[Frame]:
    """One frame per simulation step along the scene's camera path."""
    frames = len(positions) if frames is None else min(frames, len(positions))
    out = []
    for t in range(frames):
        camera = camera_at(scene.camera, t / scene.fps, width, height)
        out.append(render(camera, scene_geometry(scene, positions[t], people_rgb, alive[t])))
    return out


def to_uint8(rgb: np.ndarray) -> np.ndarray:
    return (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)
