"""The `--plot FILE.png` commands' one way to draw: matplotlib on the Agg backend (no display),
from the `plot` extra, and one way to write the PNG (an unwritable path is a one-line error)."""

from __future__ import annotations

from typing import Any

from slurmguard.errors import SlurmguardError


class PlotUnavailable(SlurmguardError):
    """matplotlib is not installed."""


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; PlotUnavailable without the `plot` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'slurmguard[plot]'") from None
    return plt


def save_png(fig: Any, path: str, *, dates: bool = False, dpi: int | None = None) -> None:
    """Lay out ``fig`` (dates on the x axis slanted with ``dates``), write it to ``path`` as
    PNG and close it, also on failure."""
    plt = pyplot()
    if dates:
        fig.autofmt_xdate()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=dpi)
    except OSError as exc:
        raise SlurmguardError(f"--plot: cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
