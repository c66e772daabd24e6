"""Reading a run's TensorBoard events back."""

from __future__ import annotations

import glob

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read_events(log_dir: str) -> EventAccumulator:
    """Every event of the run's TensorBoard file (no sampling)."""
    (path,) = glob.glob(f"{log_dir}/events*")
    events = EventAccumulator(path, size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    events.Reload()
    return events
