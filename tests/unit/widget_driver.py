"""Drive a slider explorer as a learner would: set controls by their label, redraw, read the figure."""

from __future__ import annotations

import matplotlib.pyplot as plt


def redraw(box, **values) -> plt.Figure:
    """Set the controls named by their description, redraw, and return the figure drawn last."""
    plt.close("all")
    controls = {c.description: c for c in box.kwargs_widgets}
    for name, value in values.items():
        controls[name].value = value
    box.update()
    return plt.figure(plt.get_fignums()[-1])
