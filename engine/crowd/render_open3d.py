"""The coarse crowd render rasterised by open3d's offscreen renderer (Filament, no display).

The same scene as ``engine.crowd.render`` (ground rectangle, boxes, people as a body cylinder
with a head sphere, the radii and heights of that module) seen by the same camera (its
``Camera`` and keyframe interpolation), returned as the same ``Frame``: RGB, z-depth in metres,
label map, person ids, world points and normals.

open3d draws two passes per frame: an id pass, where every object is unlit in a colour that
encodes its id, and a depth pass (view-space z). Anti-aliasing and post-processing are off, so
each pixel shows exactly one object; Filament still maps a material's colour to a different
byte (sRGB to linear, with a gain), so the id colours are calibrated once per renderer and
decoded by the nearest calibrated level. The flat look is then shaded from the ids, the
points (depth) and the shapes' normals with the ray caster's formula, so the neural renderer
sees the coarse look it was trained on whichever backend drew the geometry.

The meshes are built once per renderer; per frame the people are moved
(``set_geometry_transform``) and shown or hidden, and the ground and boxes are rebuilt only
when the scene changes. open3d is imported when a renderer is made, never on import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.crowd import render as R

LEVELS = 16  # per colour channel: ids up to LEVELS**3 - 1
PERSON_CODE = 1024  # id codes: 0 sky, 1 ground, 2.. boxes, PERSON_CODE + i person i
GROUND_CODE, BOX_CODE = 1, 2
NEAR_M, FAR_M = 0.05, 2000.0
CYLINDER_SEGMENTS = 32  # the body's facets: a 32-gon's area is within 1% of the circle's
SPHERE_RESOLUTION = 16


_CURRENT: list[Open3DRenderer] = []  # at most one renderer lives at a time, see ``renderer``


class Open3DUnavailable(RuntimeError):
    """open3d is missing, cannot start (no Vulkan/EGL device) or does not keep id colours."""


def _level_inputs() -> np.ndarray:
    """Material channel values whose linear light is evenly spaced: the widest byte gaps."""
    linear = np.arange(LEVELS) / (LEVELS - 1)
    return np.where(linear <= 0.0031308, 12.92 * linear,
                    1.055 * linear ** (1 / 2.4) - 0.055)


def code_color(code: int) -> tuple[float, float, float, float]:
    """The material colour (RGBA in [0, 1]) that encodes an id code, base LEVELS per channel."""
    inputs = _level_inputs()
    digits = (code % LEVELS, code // LEVELS % LEVELS, code // LEVELS ** 2)
    if digits[2] >= LEVELS:
        raise ValueError(f"id code {code} needs more than {LEVELS ** 3} colours")
    return (*(float(inputs[d]) for d in digits), 1.0)


def person_mesh() -> Any:
    """A pedestrian standing at the origin: body cylinder (0 to BODY_HEIGHT_M) and head."""
    import open3d as o3d

    body = o3d.geometry.TriangleMesh.create_cylinder(R.BODY_RADIUS_M, R.BODY_HEIGHT_M,
                                                     CYLINDER_SEGMENTS)
    body.translate((0.0, 0.0, R.BODY_HEIGHT_M / 2))
    head = o3d.geometry.TriangleMesh.create_sphere(R.HEAD_RADIUS_M, SPHERE_RESOLUTION)
    head.translate((0.0, 0.0, R.HEAD_CENTRE_M))
    return body + head


def ground_mesh(half: tuple[float, float]) -> Any:
    import open3d as o3d

    hx, hy = half
    vertices = [(-hx, -hy, 0.0), (hx, -hy, 0.0), (hx, hy, 0.0), (-hx, hy, 0.0)]
    return o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(vertices),
                                     o3d.utility.Vector3iVector([(0, 1, 2), (0, 2, 3)]))


def box_mesh(box: np.ndarray) -> Any:
    import open3d as o3d

    x0, y0, z0, x1, y1, z1 = (float(v) for v in box)
    mesh = o3d.geometry.TriangleMesh.create_box(x1 - x0, y1 - y0, z1 - z0)
    return mesh.translate((x0, y0, z0))


class Open3DRenderer:
    """One offscreen renderer of a fixed size; ``render`` has ``engine.crowd.render.render``'s
    signature and result. Get it from ``renderer(width, height)``, which keeps one alive."""

    def __init__(self, width: int, height: int):
        try:
            import open3d as o3d

            self._rendering = o3d.visualization.rendering
            self._renderer = self._rendering.OffscreenRenderer(width, height)
        except Exception as error:  # ImportError, or Filament finding no device
            raise Open3DUnavailable(f"{type(error).__name__}: {error}") from error
        self.width, self.height = width, height
        self._scene = self._renderer.scene
        self._scene.set_background([0.0, 0.0, 0.0, 1.0])
        self._scene.view.set_antialiasing(False)
        self._scene.view.set_post_processing(False)
        self._static_key: bytes | None = None
        self._static_names: list[str] = []
        self._people = 0
        self._decode = self._calibrate()

    def _material(self, code: int) -> Any:
        material = self._rendering.MaterialRecord()
        material.shader = "defaultUnlit"
        material.base_color = code_color(code)
        return material

    def _look(self, camera: R.Camera) -> None:
        _, _, up = camera.basis()
        self._scene.camera.set_projection(camera.fov_deg, camera.width / camera.height, NEAR_M,
                                          FAR_M, self._rendering.Camera.FovType.Vertical)
        self._scene.camera.look_at(np.asarray(camera.look_at, float),
                                   np.asarray(camera.position, float), up)

    def _calibrate(self) -> np.ndarray:
        """(256, 3) channel byte -> level. The levels are drawn once, as grey squares tiling
        the view of a camera looking straight down (image columns along x, rows along -y),
        and read back at the squares' centre pixels."""
        camera = R.Camera(np.array([0.0, 0.0, 10.0]), np.zeros(3), 60.0, self.width,
                          self.height)
        side = int(np.ceil(np.sqrt(LEVELS)))
        cols = np.linspace(0, self.width, side + 1)
        rows = np.linspace(0, self.height, side + 1)
        metres = 10.0 / camera.focal_px  # per pixel on the ground
        centres = []
        for level in range(LEVELS):
            i, j = divmod(level, side)
            x0, x1 = (cols[j:j + 2] - self.width / 2) * metres
            y0, y1 = (self.height / 2 - rows[i:i + 2][::-1]) * metres
            square = box_mesh(np.array([x0, y0, 0.0, x1, y1, 0.01]))
            grey = level * (1 + LEVELS + LEVELS ** 2)
            self._scene.add_geometry(f"level{level}", square, self._material(grey))
            centres.append((int(cols[j:j + 2].mean()), int(rows[i:i + 2].mean())))
        self._look(camera)
        image = np.asarray(self._renderer.render_to_image())
        self._scene.clear_geometry()
        col, row = np.array(centres).T
        seen = image[row, col].astype(float)  # (LEVELS, 3)
        if (np.diff(seen, axis=0) <= 0).any():
            raise Open3DUnavailable(f"id colours do not survive rendering: levels {seen[:, 0]}")
        return np.abs(np.arange(256)[:, None, None] - seen[None]).argmin(1)  # (256, 3)

    def _set_static(self, geometry: R.Geometry) -> None:
        key = np.r_[geometry.ground_half, geometry.boxes.ravel()].tobytes()
        if key == self._static_key:
            return
        for name in self._static_names:
            self._scene.remove_geometry(name)
        self._static_names = ["ground"]
        self._scene.add_geometry("ground", ground_mesh(geometry.ground_half),
                                 self._material(GROUND_CODE))
        for index, box in enumerate(geometry.boxes):
            self._static_names.append(f"box{index}")
            self._scene.add_geometry(f"box{index}", box_mesh(box),
                                     self._material(BOX_CODE + index))
        self._static_key = key

    def _place_people(self, geometry: R.Geometry) -> None:
        if len(geometry.people) > LEVELS ** 3 - PERSON_CODE:
            raise ValueError(f"{len(geometry.people)} people: the open3d renderer draws at "
                             f"most {LEVELS ** 3 - PERSON_CODE}")
        if self._people < len(geometry.people):
            mesh = person_mesh()
            for index in range(self._people, len(geometry.people)):
                self._scene.add_geometry(f"person{index}", mesh,
                                         self._material(PERSON_CODE + index))
            self._people = len(geometry.people)
        transform = np.eye(4)
        for index in range(self._people):
            shown = index < len(geometry.people) and bool(geometry.present[index])
            self._scene.show_geometry(f"person{index}", shown)
            if shown:
                transform[:2, 3] = geometry.people[index]
                self._scene.set_geometry_transform(f"person{index}", transform)

    def render(self, camera: R.Camera, geometry: R.Geometry) -> R.Frame:
        if (camera.width, camera.height) != (self.width, self.height):
            raise ValueError(f"camera is {camera.width}x{camera.height}; this renderer draws "
                             f"{self.width}x{self.height}")
        self._set_static(geometry)
        self._place_people(geometry)
        self._look(camera)
        image = np.asarray(self._renderer.render_to_image())
        depth = np.asarray(self._renderer.render_to_depth_image(z_in_view_space=True))
        levels = self._decode[image, np.arange(3)]  # (H, W, 3)
        code = levels[..., 0] + LEVELS * levels[..., 1] + LEVELS ** 2 * levels[..., 2]
        return shade(camera, geometry, code, depth)


def shade(camera: R.Camera, geometry: R.Geometry, code: np.ndarray, depth: np.ndarray
          ) -> R.Frame:
    """The flat-look frame from the id codes and z-depth: labels, person ids, points, the
    shapes' normals and the ray caster's flat shading."""
    label = np.select([code >= PERSON_CODE, code >= BOX_CODE, code == GROUND_CODE],
                      [R.PERSON, R.BOX, R.GROUND], R.SKY).astype(np.uint8)
    depth = np.where(label == R.SKY, np.inf, depth).astype(np.float32)
    rays = camera.rays().reshape(camera.height, camera.width, 3)
    point = camera.position + np.where(np.isfinite(depth), depth, 0)[..., None] * rays
    person = np.where(label == R.PERSON, code - PERSON_CODE, -1).astype(np.int32)
    box = np.clip(code - BOX_CODE, 0, max(len(geometry.boxes) - 1, 0))
    normal = np.zeros_like(point)
    normal[label == R.GROUND] = (0.0, 0.0, 1.0)
    base = np.broadcast_to(R.SKY_RGB, point.shape).copy()
    base[label == R.GROUND] = geometry.ground_rgb
    on_box = label == R.BOX
    if on_box.any():
        normal[on_box] = _box_normals(point[on_box], geometry.boxes[box[on_box]])
        base[on_box] = geometry.box_rgb[box[on_box]]
    on_person = label == R.PERSON
    if on_person.any():
        who = person[on_person]
        normal[on_person] = _person_normals(point[on_person], geometry.people[who])
        base[on_person] = geometry.people_rgb[who]
    light = 0.45 + 0.55 * np.clip(normal @ R.LIGHT, 0, 1)
    rgb = np.where((label == R.SKY)[..., None], base, base * light[..., None])
    return R.Frame(np.clip(rgb, 0, 1), depth, label, person, point, normal)


def _box_normals(point: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Outward normal of the face of each box (K, 6) nearest each point on it (K, 3)."""
    gaps = np.abs(np.c_[point - boxes[:, :3], boxes[:, 3:] - point])  # (K, 6)
    face = gaps.argmin(1)
    normal = np.zeros_like(point)
    normal[np.arange(len(point)), face % 3] = np.where(face < 3, -1.0, 1.0)
    return normal


def _person_normals(point: np.ndarray, feet: np.ndarray) -> np.ndarray:
    """Normals of a body cylinder (side, flat top) and head sphere at points on them."""
    head = point - np.c_[feet, np.full(len(feet), R.HEAD_CENTRE_M)]
    radial = np.c_[point[:, :2] - feet, np.zeros(len(feet))]
    on_head = np.abs(np.linalg.norm(head, axis=1) - R.HEAD_RADIUS_M) < 0.02
    on_top = ~on_head & (point[:, 2] > R.BODY_HEIGHT_M - 0.02)
    normal = np.where(on_head[:, None], head, radial)
    normal[on_top] = (0.0, 0.0, 1.0)
    return normal / (np.linalg.norm(normal, axis=1, keepdims=True) + 1e-9)


def renderer(width: int, height: int) -> Open3DRenderer:
    """The renderer of this image size, kept until another size is asked for (Filament's start
    and the id colours' calibration take a second or more).

    Only one lives at a time: open3d 0.20 shares material instances between offscreen
    renderers, and Filament aborts the process when one is destroyed (even at exit) while
    another still draws with them. Hold no reference to it across calls (call ``render``):
    a replaced renderer must be gone before the next one starts."""
    if _CURRENT and (_CURRENT[0].width, _CURRENT[0].height) == (width, height):
        return _CURRENT[0]
    _CURRENT.clear()  # the old one goes before the new one starts
    _CURRENT.append(Open3DRenderer(width, height))
    return _CURRENT[0]


def render(camera: R.Camera, geometry: R.Geometry) -> R.Frame:
    """``engine.crowd.render.render`` drawn by open3d (raises Open3DUnavailable)."""
    return renderer(camera.width, camera.height).render(camera, geometry)
