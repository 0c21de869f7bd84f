"""Reports: Chrome-trace timelines (predicted vs measured) and a static HTML page."""

from partuner.report.html import gantt_svg, render_report
from partuner.report.trace import (
    Handoff,
    Slice,
    chrome_trace,
    measured_handoffs,
    measured_slices,
    predicted_handoffs,
    predicted_slices,
    write_trace,
)

__all__ = [
    "Handoff",
    "Slice",
    "chrome_trace",
    "gantt_svg",
    "measured_handoffs",
    "measured_slices",
    "predicted_handoffs",
    "predicted_slices",
    "render_report",
    "write_trace",
]
