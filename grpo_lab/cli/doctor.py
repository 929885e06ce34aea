"""``python -m grpo_lab doctor``: is this machine ready for the course? About a minute.

Each line is one check: ``ok``, ``warn`` (works, but read the advice) or ``FAIL`` (fix this first;
the line says how). The exit status is 1 when any check fails, so a script can test it.

Run it first on a new machine, and send its output when asking for help. Where torch itself is
missing, ``python -m grpo_lab.cli.doctor`` still runs (the command line needs torch to start).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..io import first_line
from ..lab.memory import peak_rss_mb

# The tested ranges, as requirements.txt pins them (a test checks the two agree).
TESTED = {"torch": ">=2.4,<2.15", "transformers": ">=5.24,<6", "ipywidgets": ">=8.1,<9", "jupyterlab": ">=4.2,<5"}
# Below this much free memory a notebook kernel (torch, transformers, the model, a training run)
# next to JupyterLab and a browser starts to swap; below twice that, it is tight.
MIN_FREE_BYTES = 1 << 30
WIDGET_EXTENSION = "@jupyter-widgets/jupyterlab-manager"
REINSTALL = "make lab (or pip install -r requirements.txt in this environment)"


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn" or "FAIL"
    message: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<13} {self.message}"


def _import(name: str):
    """Import a module by name (tests replace this to make a module look missing)."""
    return importlib.import_module(name)


def _import_or_fail(name: str) -> tuple[Any, Check | None]:
    """``(module, None)``, or ``(None, a FAIL line)`` where it cannot be imported."""
    try:
        return _import(name), None
    except ImportError as err:
        return None, Check(name, "FAIL", f"not importable ({err}): {REINSTALL}")


def _version(dist: str) -> str | None:
    """The installed version of a distribution, or None (tests replace this to fake versions)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _in_range(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(spec).contains(version, prereleases=True)


def check_python(
    version_info: tuple = tuple(sys.version_info[:3]),
    executable: str = sys.executable,
    in_venv: bool = sys.prefix != sys.base_prefix,
) -> Check:
    v = ".".join(str(x) for x in version_info)
    if tuple(version_info[:2]) < (3, 10):
        return Check(
            "python",
            "FAIL",
            f"{v} at {executable}: the lab needs Python 3.10 or newer: "
            "make lab PYTHON=/path/to/python3.10+ (or install one from python.org)",
        )
    where = "a virtual environment" if in_venv else "no virtual environment"
    return Check("python", "ok", f"{v} at {executable} ({where})")


def check_torch() -> Check:
    torch, failed = _import_or_fail("torch")
    if failed:
        return failed
    version = torch.__version__.split("+")[0]
    if not _in_range(version, TESTED["torch"]):
        return Check("torch", "FAIL", f"{torch.__version__} is outside the tested range {TESTED['torch']}: {REINSTALL}")
    from ..lab.models import pick_device, set_threads

    set_threads()  # what the lab does before it trains
    cores, threads = os.cpu_count() or 1, torch.get_num_threads()
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    if getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip} build"
    device = pick_device()
    where = f"cuda ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else "cpu"
    msg = f"{torch.__version__}, {build}, device {where}, {threads} threads on {cores} cores"
    if torch.version.cuda and device.type != "cuda":
        return Check(
            "torch",
            "warn",
            msg + ": this CUDA build finds no GPU and runs on the CPU; the CPU build is "
            "a fraction of its size: rm -r .venv && make lab "
            "TORCH_INDEX=https://download.pytorch.org/whl/cpu",
        )
    if threads < cores and os.environ.get("OMP_NUM_THREADS"):
        return Check(
            "torch",
            "warn",
            msg + f": OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} leaves cores idle; unset it for speed",
        )
    return Check("torch", "ok", msg)


def check_transformers() -> Check:
    transformers, failed = _import_or_fail("transformers")
    if failed:
        return failed
    v = transformers.__version__
    if not _in_range(v, TESTED["transformers"]):
        return Check(
            "transformers",
            "FAIL",
            f"{v} is outside the tested range {TESTED['transformers']}: "
            f"pip install 'transformers{TESTED['transformers']}'",
        )
    return Check("transformers", "ok", v)


N_PROMPTS = 32


def check_model() -> Check:
    """The shipped model loads and answers held-out sums (greedy)."""
    from ..lab.metrics import evaluate
    from ..lab.models import count_parameters, load_policy
    from ..lab.tasks import get_task

    try:
        model, tokenizer = load_policy("tiny-sum3")
    except (OSError, ValueError) as err:
        return Check(
            "model",
            "FAIL",
            f"tiny-sum3 does not load ({first_line(err)}): restore it with "
            "`git checkout assets/tiny-sum3`, or rebuild it with `python -m grpo_lab pretrain`",
        )
    result = evaluate(model, tokenizer, get_task("sum3"), n_prompts=N_PROMPTS, greedy=True)
    right = round(result["accuracy"] * result["n_prompts"])
    size = f"{count_parameters(model) / 1e6:.1f}M parameters"
    msg = f"tiny-sum3 ({size}) loads; {right} of {result['n_prompts']} held-out sums right (greedy)"
    if right == 0:
        return Check(
            "model",
            "FAIL",
            msg + ": the shipped model gets none right, so its files are damaged: `git checkout assets/tiny-sum3`",
        )
    return Check("model", "ok", msg)


def check_training() -> Check:
    """One GRPO step on the shipped model: a finite loss and gradient, and weights that moved.

    (On-policy, GRPO's loss is about 0 by construction, its normalised advantages summing to 0 per
    group: the gradient norm is the number that says the step learned something.)
    """
    import torch

    from ..train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(algo="grpo", steps=1, prompts_per_step=4, group_size=4, seed=0)
    trainer = Trainer(cfg)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    t0 = time.perf_counter()
    m = trainer.train_step()
    seconds = time.perf_counter() - t0
    moved = any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))
    loss, grad = m.get("loss", float("nan")), m.get("grad_norm", float("nan"))
    shape = f"{cfg.prompts_per_step} prompts x {cfg.group_size} samples"
    if m.get("skipped"):
        return Check(
            "training",
            "warn",
            f"one GRPO step ({shape}) ran but skipped its update ({m['skipped']}): "
            "rerun the doctor; a second skip means a damaged model",
        )
    if not (math.isfinite(loss) and math.isfinite(grad)) or not moved:
        return Check(
            "training",
            "FAIL",
            f"one GRPO step ({shape}) gave loss {loss}, gradient norm {grad} and "
            f"{'moved' if moved else 'left'} the weights: {REINSTALL}; "
            "if it persists, send this output to whoever runs the course",
        )
    return Check(
        "training", "ok", f"one GRPO step ({shape}) in {seconds:.1f} s: gradient norm {grad:.3f}, weights updated"
    )


def _extension_dir(name: str = WIDGET_EXTENSION) -> Path | None:
    """The first copy of a JupyterLab extension that JupyterLab would load, or None."""
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        d = Path(base) / name
        if (d / "package.json").is_file():
            return d
    return None


def check_widgets() -> Check:
    """ipywidgets in the kernel, its JupyterLab extension, and versions that fit together."""
    from packaging.requirements import Requirement

    found = {d: _version(d) for d in ("ipywidgets", "jupyterlab_widgets", "jupyterlab")}
    for dist in ("ipywidgets", "jupyterlab"):
        if found[dist] is None:
            return Check("widgets", "FAIL", f"{dist} is not installed: pip install '{dist}{TESTED[dist]}'")
        if not _in_range(found[dist], TESTED[dist]):
            return Check(
                "widgets",
                "FAIL",
                f"{dist} {found[dist]} is outside the tested range {TESTED[dist]}: pip install '{dist}{TESTED[dist]}'",
            )
    wanted = next(
        (
            Requirement(r)
            for r in (metadata.requires("ipywidgets") or [])
            if Requirement(r).name.replace("-", "_") == "jupyterlab_widgets"
        ),
        None,
    )
    have = found["jupyterlab_widgets"]
    if have is None or (wanted is not None and not wanted.specifier.contains(have, prereleases=True)):
        want = f"jupyterlab_widgets{wanted.specifier}" if wanted is not None else "jupyterlab_widgets"
        return Check(
            "widgets",
            "FAIL",
            f"ipywidgets {found['ipywidgets']} needs {want}, found {have}: sliders will "
            f"not draw: pip install --force-reinstall '{want}'",
        )
    ext = _extension_dir()
    if ext is None:
        return Check(
            "widgets",
            "FAIL",
            f"JupyterLab has no {WIDGET_EXTENSION} extension, so widgets show as text: "
            "pip install --force-reinstall jupyterlab_widgets, then restart JupyterLab",
        )
    msg = (
        f"ipywidgets {found['ipywidgets']}, jupyterlab_widgets {have} (fits), "
        f"JupyterLab {found['jupyterlab']} with the widget extension"
    )
    if not ext.resolve().is_relative_to(Path(sys.prefix).resolve()):
        return Check(
            "widgets",
            "warn",
            msg + f", but JupyterLab loads its copy from {ext}, outside this environment: "
            f"remove that folder if widgets do not draw",
        )
    return Check("widgets", "ok", msg)


def check_jupyter_on_path(which: Callable[[str], str | None] | None = None) -> Check:
    """`jupyter lab` typed in a terminal runs the first jupyter-lab on PATH: it should be this one."""
    import shutil
    import sysconfig

    found = (which or shutil.which)("jupyter-lab")
    here = Path(sysconfig.get_path("scripts")).resolve()
    start = f"{Path(sys.executable).name} -m jupyterlab" if found is None else "jupyter lab"
    if found is not None and Path(found).resolve().parent != here and Path(found).parent.resolve() != here:
        return Check(
            "jupyter",
            "warn",
            f"`jupyter lab` on PATH is {found}, another Python's, whose kernel may not "
            f"see this environment's packages: start the course with `make lab` or "
            f"`{sys.executable} -m jupyterlab notebooks/`",
        )
    return Check("jupyter", "ok", f"start the course with `make lab` or `{start} notebooks/`")


def check_matplotlib() -> Check:
    """Plots render to PNG (what a notebook shows) and notebooks can draw inline."""
    matplotlib, failed = _import_or_fail("matplotlib")
    if failed:
        return failed
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    png = io.BytesIO()
    FigureCanvasAgg(fig).print_png(png)
    if not png.getvalue().startswith(b"\x89PNG"):
        return Check("matplotlib", "FAIL", f"{matplotlib.__version__} drew no PNG: {REINSTALL}")
    try:
        _import("matplotlib_inline")
    except ImportError:
        return Check(
            "matplotlib",
            "FAIL",
            "matplotlib-inline is missing, so notebooks cannot draw inline: pip install matplotlib-inline ipykernel",
        )
    env = os.environ.get("MPLBACKEND")
    msg = f"{matplotlib.__version__}, backend here {matplotlib.get_backend()}; notebooks draw inline"
    if env and "inline" not in env.lower():
        return Check(
            "matplotlib",
            "warn",
            f"{matplotlib.__version__}: MPLBACKEND={env} sends notebook plots "
            "to that backend instead of the page: unset MPLBACKEND",
        )
    return Check("matplotlib", "ok", msg)


def _free_bytes() -> int | None:
    """Memory available to a new program, or None where it cannot be read."""
    try:
        import psutil  # comes with ipykernel

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for row in Path("/proc/meminfo").read_text().splitlines():
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_bytes() -> int | None:
    """This process's peak resident memory (after the model and the training step)."""
    peak = peak_rss_mb()
    return None if peak is None else int(peak * 2**20)


def check_memory(free: int | None = None, peak: int | None = None) -> Check:
    free = _free_bytes() if free is None else free
    peak = _peak_bytes() if peak is None else peak
    used = f"; this check used {peak / 2**30:.1f} GiB at its peak" if peak else ""
    if free is None:
        return Check("memory", "warn", "free memory unknown here (no psutil, no /proc/meminfo): pip install psutil")
    gib = free / 2**30
    if free < MIN_FREE_BYTES:
        return Check(
            "memory",
            "FAIL",
            f"{gib:.1f} GiB free{used}: close other programs (browser tabs first) before starting the notebooks",
        )
    if free < 2 * MIN_FREE_BYTES:
        return Check(
            "memory",
            "warn",
            f"{gib:.1f} GiB free{used}: tight; close other programs, or run the notebooks with GRPO_LAB_PROFILE=fast",
        )
    return Check("memory", "ok", f"{gib:.1f} GiB free{used}")


CHECKS = (
    check_python,
    check_torch,
    check_transformers,
    check_model,
    check_training,
    check_widgets,
    check_jupyter_on_path,
    check_matplotlib,
    check_memory,
)
# Checks that need torch and transformers: skipped when either fails, with a line that says so.
NEEDS_TORCH = {"check_model", "check_training"}


def run(checks: Iterable[Callable[[], Check]] = CHECKS, out: Callable[[str], object] = print) -> int:
    """Run every check, print one line each, return 1 if any failed (else 0)."""
    failed: list[str] = []
    for check in checks:
        name = check.__name__
        if name in NEEDS_TORCH and {"torch", "transformers"} & set(failed):
            result = Check(name.removeprefix("check_"), "FAIL", "not run: fix torch and transformers first")
        else:
            try:
                result = check()
            except Exception as err:  # a check that breaks is a failed check, not a traceback at a learner
                result = Check(
                    name.removeprefix("check_"),
                    "FAIL",
                    f"{first_line(err)}: {REINSTALL}; if it persists, send this output to whoever runs the course",
                )
        out(result.line())
        if result.status == "FAIL":
            failed.append(result.name)
    out(f"{len(failed)} failed: {', '.join(failed)}" if failed else "ready: every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run())
