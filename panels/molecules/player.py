"""The trajectory player: a frame slider, play/pause at a chosen frame rate, the frame's
description (time, atom count or length, RMSD), and the trajectory's curve (RMSD to frame 0,
atom count or sequence length) with the current frame marked.

One player serves every kind of trajectory: the panel listens to ``frame_changed`` and draws
the frame in the 3-D view (MD, generation) or the sequence strip (sequences).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.plots import plot, series
from panels.molecules.trajectory import Trajectory
from studio.widgets.plot_view import PlotSpecView

DEFAULT_FPS = 10
CURRENT = "current frame"


class TrajectoryPlayer(QWidget):
    frame_changed = Signal(int)
    source_chosen = Signal(str)  # another trajectory file of the same run

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trajectory: Trajectory | None = None
        self.play_button = QPushButton("Play")
        self.play_button.setCheckable(True)
        self.play_button.toggled.connect(self._toggled)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(self._moved)
        self.fps_box = QSpinBox()
        self.fps_box.setRange(1, 60)
        self.fps_box.setValue(DEFAULT_FPS)
        self.fps_box.setSuffix(" fps")
        self.fps_box.valueChanged.connect(self._set_rate)
        self.source_box = QComboBox()
        self.source_box.setToolTip("the run's other trajectories")
        self.source_box.textActivated.connect(self.source_chosen)
        self.source_box.hide()
        self.label = QLabel("")
        self.curve = PlotSpecView()
        self.curve.setMinimumHeight(150)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.step)
        self._set_rate(DEFAULT_FPS)
        row = QHBoxLayout()
        for widget in (self.play_button, self.slider, self.fps_box, self.source_box):
            row.addWidget(widget, 1 if widget is self.slider else 0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.label)
        layout.addWidget(self.curve)
        self.hide()

    @property
    def frame(self) -> int:
        return self.slider.value()

    def set_trajectory(self, trajectory: Trajectory | None, sources: list[str] = ()) -> None:
        """Show this trajectory at frame 0 (``None``: hide the player)."""
        self.pause()
        self.trajectory = trajectory
        self.source_box.clear()
        self.source_box.addItems(list(sources))
        self.source_box.setVisible(len(sources) > 1)
        if trajectory is None:
            self.hide()
            return
        ylabel, values = trajectory.curve
        timed = None not in trajectory.times
        xs = trajectory.times if timed else list(range(1, len(trajectory) + 1))
        self._xs = xs
        self.curve.set_spec(plot(f"{trajectory.name}: {ylabel}", [series(ylabel, xs, values)],
                                 xlabel=trajectory.time_label if timed else "frame",
                                 ylabel=ylabel))
        self.slider.blockSignals(True)
        self.slider.setRange(0, len(trajectory) - 1)
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        self.show()
        self._moved(0)

    def set_frame(self, index: int) -> None:
        self.slider.setValue(index)

    def step(self) -> None:
        """The next frame; after the last, back to the first (playback loops)."""
        if self.trajectory is not None:
            self.slider.setValue((self.frame + 1) % len(self.trajectory))

    def play(self) -> None:
        self.play_button.setChecked(True)

    def pause(self) -> None:
        self.play_button.setChecked(False)

    @property
    def playing(self) -> bool:
        return self.timer.isActive()

    def _toggled(self, playing: bool) -> None:
        self.play_button.setText("Pause" if playing else "Play")
        if playing and self.trajectory is not None:
            self.timer.start()
        else:
            self.timer.stop()

    def _set_rate(self, fps: int) -> None:
        self.timer.setInterval(max(1, round(1000 / fps)))

    def _moved(self, index: int) -> None:
        if self.trajectory is None:
            return
        self.label.setText(self.trajectory.describe(index))
        self.curve.set_series(CURRENT, [self._xs[index]], [self.trajectory.curve[1][index]],
                              "scatter")
        self.frame_changed.emit(index)
