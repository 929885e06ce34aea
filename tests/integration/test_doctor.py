"""`python -m grpo_lab doctor`: it passes on a working install, and each failure says what to do.

Failures are injected by replacing one probe (an import, a version lookup, the model loader, the
training step) with one that breaks the way a learner's machine does.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import torch

from grpo_lab.cli import doctor
from grpo_lab.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _missing(*names):
    """An _import that fails for ``names`` like a module that is not installed."""
    real = doctor.importlib.import_module

    def fake(name):
        if name in names:
            raise ModuleNotFoundError(f"No module named '{name}'")
        return real(name)

    return fake


def _fake_import(name, module):
    real = doctor.importlib.import_module
    return lambda n: module if n == name else real(n)


def _fake_torch(version="2.13.0+cpu", cuda=None, threads=2):
    return types.SimpleNamespace(
        __version__=version, version=types.SimpleNamespace(cuda=cuda, hip=None), get_num_threads=lambda: threads
    )


# --- the whole run ---------------------------------------------------------------------------


def test_doctor_passes_on_this_install():
    lines = []
    rc = doctor.run(out=lines.append)
    report = "\n".join(lines)
    assert rc == 0, report
    names = [line.split()[1] for line in lines[:-1]]
    assert names == [
        "python",
        "torch",
        "transformers",
        "model",
        "training",
        "widgets",
        "jupyter",
        "matplotlib",
        "memory",
    ], report
    assert not any(line.startswith("FAIL") for line in lines), report
    assert lines[-1] == "ready: every check passed"


def test_command_line_runs_the_doctor_and_returns_its_status(monkeypatch):
    monkeypatch.setattr(doctor, "run", lambda: 1)
    assert main(["doctor"]) == 1
    monkeypatch.setattr(doctor, "run", lambda: 0)
    assert main(["doctor"]) == 0


def test_a_failed_check_makes_the_status_non_zero_and_names_it():
    def check_ok():
        return doctor.Check("ok_one", "ok", "fine")

    def check_broken():
        raise RuntimeError("the probe itself broke\nsecond line")

    lines = []
    assert doctor.run((check_ok, check_broken), out=lines.append) == 1
    assert lines[1].startswith("FAIL") and "RuntimeError: the probe itself broke" in lines[1]
    assert "second line" not in lines[1] and "make lab" in lines[1]
    assert lines[-1] == "1 failed: broken"


def test_warnings_do_not_fail_the_run():
    lines = []
    assert doctor.run((lambda: doctor.Check("w", "warn", "advice"),), out=lines.append) == 0


def test_without_torch_the_model_and_training_checks_are_not_run(monkeypatch):
    monkeypatch.setattr(doctor, "_import", _missing("torch"))
    ran = []

    def check_model():
        ran.append("model")

    def check_training():
        ran.append("training")

    checks = (doctor.check_torch, check_model, check_training)
    lines = []
    assert doctor.run(checks, out=lines.append) == 1
    assert ran == []
    assert lines[1].startswith("FAIL") and "fix torch and transformers first" in lines[1]
    assert lines[-1] == "3 failed: torch, model, training"


# --- each check's failure line -----------------------------------------------------------------


def test_python_too_old_says_which_python_to_use():
    c = doctor.check_python((3, 9, 18), "/usr/bin/python3.9", False)
    assert c.status == "FAIL"
    assert "3.9.18" in c.message and "3.10 or newer" in c.message and "PYTHON=" in c.message
    ok = doctor.check_python((3, 10, 0), "/x/.venv/bin/python", True)
    assert ok.status == "ok" and "a virtual environment" in ok.message


def test_torch_missing(monkeypatch):
    monkeypatch.setattr(doctor, "_import", _missing("torch"))
    c = doctor.check_torch()
    assert c.status == "FAIL" and "No module named 'torch'" in c.message and "make lab" in c.message


def test_torch_outside_the_tested_range(monkeypatch):
    monkeypatch.setattr(doctor, "_import", _fake_import("torch", _fake_torch("2.3.1")))
    c = doctor.check_torch()
    assert c.status == "FAIL" and "2.3.1" in c.message and "make lab" in c.message


def test_cuda_build_without_a_gpu_points_to_the_cpu_build(monkeypatch):
    import grpo_lab.lab.models

    monkeypatch.setattr(doctor, "_import", _fake_import("torch", _fake_torch("2.13.0+cu128", cuda="12.8")))
    monkeypatch.setattr(grpo_lab.lab.models, "pick_device", lambda device=None: torch.device("cpu"))
    c = doctor.check_torch()
    assert c.status == "warn" and "CUDA 12.8 build" in c.message
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in c.message


def test_omp_num_threads_that_idles_cores_is_named(monkeypatch):
    import grpo_lab.lab.models

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(doctor, "_import", _fake_import("torch", _fake_torch(threads=1)))
    monkeypatch.setattr(grpo_lab.lab.models, "pick_device", lambda device=None: torch.device("cpu"))
    c = doctor.check_torch()
    assert c.status == "warn" and "1 threads on 8 cores" in c.message and "unset it" in c.message


def test_transformers_missing_or_too_old(monkeypatch):
    monkeypatch.setattr(doctor, "_import", _missing("transformers"))
    c = doctor.check_transformers()
    assert c.status == "FAIL" and "make lab" in c.message
    monkeypatch.setattr(doctor, "_import", _fake_import("transformers", types.SimpleNamespace(__version__="4.57.1")))
    c = doctor.check_transformers()
    assert c.status == "FAIL" and "4.57.1" in c.message and "pip install 'transformers>=5.24,<6'" in c.message


def test_model_that_does_not_load(monkeypatch):
    import grpo_lab.lab.models

    def gone(*a, **k):
        raise OSError("assets/tiny-sum3 does not appear to have a file named model.safetensors\nmore detail")

    monkeypatch.setattr(grpo_lab.lab.models, "load_policy", gone)
    c = doctor.check_model()
    assert c.status == "FAIL" and "OSError: assets/tiny-sum3" in c.message and "more detail" not in c.message
    assert "git checkout assets/tiny-sum3" in c.message


def test_damaged_model_that_answers_nothing_right(monkeypatch):
    import grpo_lab.lab.models

    real = grpo_lab.lab.models.load_policy

    def zeroed(*a, **k):  # weights wiped: every logit equal, so no sum comes out right
        model, tok = real(*a, **k)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        return model, tok

    monkeypatch.setattr(grpo_lab.lab.models, "load_policy", zeroed)
    c = doctor.check_model()
    assert c.status == "FAIL" and f"0 of {doctor.N_PROMPTS}" in c.message and "damaged" in c.message


def test_shipped_model_answers():
    c = doctor.check_model()
    right = int(re.search(r"(\d+) of 32", c.message).group(1))
    # The shipped model was pretrained to >= 35% held-out greedy accuracy (README); 0 of 32 at 35%
    # has probability 0.65**32 < 1e-5.
    assert c.status == "ok" and right > 0, c.message


def test_training_step_with_a_nan_loss_fails(monkeypatch):
    from grpo_lab.train.trainer import Trainer

    monkeypatch.setattr(
        Trainer, "train_step", lambda self, batch=None: {"loss": float("nan"), "grad_norm": float("nan")}
    )
    c = doctor.check_training()
    assert (
        c.status == "FAIL" and "loss nan" in c.message and "left the weights" in c.message and "make lab" in c.message
    )


def test_training_step_that_skips_its_update_warns(monkeypatch):
    from grpo_lab.train.trainer import Trainer

    monkeypatch.setattr(Trainer, "train_step", lambda self, batch=None: {"skipped": "no reward spread in any group"})
    c = doctor.check_training()
    assert c.status == "warn" and "no reward spread" in c.message and "rerun" in c.message


def test_ipywidgets_missing_or_extension_version_mismatch(monkeypatch):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda d: None if d == "ipywidgets" else real(d))
    c = doctor.check_widgets()
    assert c.status == "FAIL" and "pip install 'ipywidgets>=8.1,<9'" in c.message

    # ipywidgets 8 with the JupyterLab side of ipywidgets 7: sliders show as text in JupyterLab.
    monkeypatch.setattr(doctor, "_version", lambda d: "1.1.7" if d == "jupyterlab_widgets" else real(d))
    c = doctor.check_widgets()
    assert c.status == "FAIL" and "found 1.1.7" in c.message and "jupyterlab_widgets~=3" in c.message


def test_widget_extension_missing_or_outside_the_environment(monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "_extension_dir", lambda: None)
    c = doctor.check_widgets()
    assert c.status == "FAIL" and "widgets show as text" in c.message and "restart JupyterLab" in c.message
    monkeypatch.setattr(doctor, "_extension_dir", lambda: tmp_path)
    c = doctor.check_widgets()
    assert c.status == "warn" and str(tmp_path) in c.message


def test_widget_extension_found_here_is_the_one_jupyterlab_widgets_installed():
    ext = doctor._extension_dir()
    assert ext is not None and (ext / "install.json").is_file()
    assert '"jupyterlab_widgets"' in (ext / "install.json").read_text()


def test_jupyter_lab_on_path_from_another_python_is_named(tmp_path):
    other = tmp_path / "conda" / "bin" / "jupyter-lab"
    c = doctor.check_jupyter_on_path(which=lambda name: str(other))
    assert c.status == "warn" and str(other) in c.message and "-m jupyterlab notebooks/" in c.message
    import sysconfig

    mine = Path(sysconfig.get_path("scripts")) / "jupyter-lab"
    assert doctor.check_jupyter_on_path(which=lambda name: str(mine)).status == "ok"
    none = doctor.check_jupyter_on_path(which=lambda name: None)
    assert none.status == "ok" and "-m jupyterlab notebooks/" in none.message


def test_matplotlib_failures(monkeypatch):
    monkeypatch.setattr(doctor, "_import", _missing("matplotlib"))
    assert doctor.check_matplotlib().status == "FAIL"
    monkeypatch.setattr(doctor, "_import", _missing("matplotlib_inline"))
    c = doctor.check_matplotlib()
    assert c.status == "FAIL" and "pip install matplotlib-inline" in c.message
    monkeypatch.setattr(doctor, "_import", doctor.importlib.import_module)
    monkeypatch.setenv("MPLBACKEND", "TkAgg")
    c = doctor.check_matplotlib()
    assert c.status == "warn" and "unset MPLBACKEND" in c.message
    monkeypatch.delenv("MPLBACKEND")
    assert doctor.check_matplotlib().status == "ok"


def test_memory_thresholds():
    gib = 2**30
    low = doctor.check_memory(free=gib // 2, peak=gib // 4)
    assert low.status == "FAIL" and "0.5 GiB free" in low.message and "close other programs" in low.message
    tight = doctor.check_memory(free=3 * gib // 2, peak=gib // 4)
    assert tight.status == "warn" and "GRPO_LAB_PROFILE=fast" in tight.message
    assert doctor.check_memory(free=8 * gib, peak=gib // 4).status == "ok"


def test_memory_unknown_warns(monkeypatch):
    monkeypatch.setattr(doctor, "_free_bytes", lambda: None)
    c = doctor.check_memory(peak=1)
    assert c.status == "warn" and "pip install psutil" in c.message


def test_free_memory_read_here_is_plausible():
    free = doctor._free_bytes()
    assert free is not None and 0 < free


def test_tested_ranges_match_requirements_txt():
    pins = {}
    for row in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*([<>=!~][^#\s]*)", row)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    for dist, spec in doctor.TESTED.items():
        assert pins[dist] == spec, (dist, pins.get(dist), spec)
