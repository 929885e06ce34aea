"""The classroom server (classroom/jupyterhub_config.py) on 127.0.0.1: JupyterHub from PyPI and
configurable-http-proxy from npm, each installed into build/classroom on first use; three learners log in
with the class's password, their servers start, each gets the course copied into their home, and the same
notebook runs in the three kernels at the same time over the servers' kernel API. The pinned outputs (the
cells nbval checks) must equal the committed ones. Each learner's kernel is measured (peak memory, CPU
seconds) and the table printed and written to build/classroom/capacity.json for the instructor's guide.

What this machine cannot run is replaced, and only that: SystemdSpawner (it needs root and systemd; it
is what enforces the memory and CPU limits) by SimpleLocalProcessSpawner with a home per learner under a
temporary folder, the ports by free ones on 127.0.0.1, and where the test runs as root, the servers are told
that this is allowed. The learners' environment is a virtual environment
with JupyterHub that also sees the project environment's packages (the course, torch, JupyterLab), as a
server's user environment does after `make install` and `pip install jupyterhub`.

    GRPO_LAB_CLASSROOM_NOTEBOOK=03_grpo.ipynb pytest tests/deploy/test_classroom.py -s   # another notebook
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "classroom"
sys.path.insert(0, str(ROOT / "tools"))

from kernel_usage import KernelWatch  # noqa: E402

LEARNERS = ("ada", "grace", "alan")
PASSWORD = "workshop-" + secrets.token_hex(4)
NOTEBOOK = os.environ.get("GRPO_LAB_CLASSROOM_NOTEBOOK", "00_tour.ipynb")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the classroom server and its measurements are Linux"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list, **kw) -> None:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1200, check=False, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}:\n{(p.stdout + p.stderr)[-3000:]}"


@pytest.fixture(scope="module")
def installed():
    """build/classroom/hub-venv (JupyterHub, the idle culler, SystemdSpawner for the config to name) and
    configurable-http-proxy from npm; the venv also sees this checkout and this Python's packages."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for configurable-http-proxy (apt-get install npm)")
    venv = BUILD / "hub-venv"
    py = venv / "bin" / "python"
    if not (venv / "bin" / "jupyterhub").exists():
        _run([sys.executable, "-m", "venv", venv])
        _run([py, "-m", "pip", "install", "--quiet", "jupyterhub>=5,<6", "jupyterhub-idle-culler>=1.4",
              "jupyterhub-systemdspawner>=1"])  # fmt: skip
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    # This checkout's grpo_lab first, then this environment's packages, with their own .pth files (an
    # editable install is one): a plain path line would add the folder but not process its .pth files.
    (Path(site) / "zz_course_environment.pth").write_text(
        f"{ROOT}\nimport site; site.addsitedir({sysconfig.get_path('purelib')!r})\n"
    )
    chp = BUILD / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not chp.exists():
        _run(["npm", "install", "--prefix", BUILD / "node", "--no-audit", "--no-fund", "configurable-http-proxy@4"])
    return venv, chp


@pytest.fixture(scope="module")
def hub(installed, tmp_path_factory):
    venv, chp = installed
    tmp = tmp_path_factory.mktemp("hub")
    port, hub_port, api_port = _free_port(), _free_port(), _free_port()
    token = secrets.token_hex(16)
    config = tmp / "test_config.py"
    config.write_text(
        f"""c = get_config()  # noqa
load_subconfig({str(ROOT / "classroom" / "jupyterhub_config.py")!r})
# Only what this machine cannot run, replaced: no systemd here (so no enforced limits), free local ports.
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / "home" / "{username}")!r}
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.Spawner.args = {["--allow-root"] if os.geteuid() == 0 else []!r}  # as root here? servers refuse root without it
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{str(chp)!r}]
c.ConfigurableHTTPProxy.pid_file = {str(tmp / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{tmp / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
c.JupyterHub.services.append({{"name": "test", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "test", "scopes": ["admin:users", "admin:servers", "tokens"],
                                "services": ["test"]}})
"""
    )
    for name in LEARNERS:
        (tmp / "home" / name).mkdir(parents=True)
    env = {**os.environ, "GRPO_LAB_CLASS_PASSWORD": PASSWORD, "GRPO_LAB_USER_ENV": str(venv),
           "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    env.pop("PYTHONPATH", None)
    log = (tmp / "hub.log").open("w")
    proc = subprocess.Popen([venv / "bin" / "jupyterhub", "-f", config], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"{base}/hub/api", timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "hub.log").read_text()[-3000:]
        time.sleep(0.5)
    yield {"base": base, "token": token, "proc": proc, "log": tmp / "hub.log", "homes": tmp / "home"}
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def _login(base: str, name: str, password: str):
    import requests

    s = requests.Session()
    s.get(f"{base}/hub/login", timeout=30)
    r = s.post(f"{base}/hub/login?next=", data={"username": name, "password": password,
               "_xsrf": s.cookies.get("_xsrf", "")}, allow_redirects=False, timeout=60)  # fmt: skip
    return r


def _message(msg_type: str, content: dict, session: str) -> dict:
    return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session, "username": "",
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "content": content, "channel": "shell", "buffers": []}  # fmt: skip


async def _run_notebook(ws_url: str, token: str, cells: list) -> list:
    """Execute ``cells`` in order on the kernel behind ``ws_url``; each cell's outputs, as nbformat outputs."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    conn = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}),
                                   max_message_size=256 * 1024 * 1024)  # fmt: skip
    session, results = uuid.uuid4().hex, []
    for cell in cells:
        msg = _message("execute_request", {"code": cell.source, "silent": False, "store_history": True,
                                           "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                       session)  # fmt: skip
        await conn.write_message(json.dumps(msg))
        outputs, idle, replied = [], False, False
        while not (idle and replied):
            raw = await asyncio.wait_for(conn.read_message(), timeout=1800)
            assert raw is not None, "the kernel's websocket closed"
            if isinstance(raw, bytes):  # a message with binary buffers (a widget's state): no output of ours
                continue
            m = json.loads(raw)
            if m.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                continue
            t, c = m["msg_type"], m["content"]
            if t == "status" and c["execution_state"] == "idle":
                idle = True
            elif t == "execute_reply":
                replied = True
            elif t == "stream":
                outputs.append(nbformat.v4.new_output("stream", name=c["name"], text=c["text"]))
            elif t in ("execute_result", "display_data"):
                outputs.append(nbformat.v4.new_output(t, data=c["data"], **({"execution_count": 0} if t ==
                               "execute_result" else {})))  # fmt: skip
            elif t == "error":
                outputs.append(nbformat.v4.new_output("error", ename=c["ename"], evalue=c["evalue"],
                                                      traceback=c["traceback"]))  # fmt: skip
        results.append(outputs)
    conn.close()
    return results


def _text(outputs: list) -> str:
    """What nbval compares: streams and text/plain results, in order (without ANSI colours)."""
    parts = []
    for o in outputs:
        if o.output_type == "stream":
            parts.append(o.name + ":" + o.text)
        elif o.output_type == "execute_result":
            parts.append("result:" + o.data.get("text/plain", ""))
    return re.sub(r"\x1b\[[0-9;]*m", "", "".join(parts))


@pytest.fixture(scope="module")
def class_run(hub):
    import requests

    base, admin = hub["base"], {"Authorization": f"token {hub['token']}"}
    # a wrong password is refused; the class's password lets any name in
    assert _login(base, "mallory", "not-the-password").status_code == 403
    for name in LEARNERS:
        r = _login(base, name, PASSWORD)
        assert r.status_code == 302 and "/hub/login" not in r.headers.get("location", ""), (name, r.status_code)
    tokens = {}
    for name in LEARNERS:
        r = requests.post(f"{base}/hub/api/users/{name}/server", headers=admin, timeout=60)
        assert r.status_code in (201, 202), r.text
        tokens[name] = requests.post(f"{base}/hub/api/users/{name}/tokens", headers=admin, timeout=30,
                                     json={"note": "classroom test"}).json()["token"]  # fmt: skip
    for name in LEARNERS:
        deadline = time.monotonic() + 300
        while (
            not requests.get(f"{base}/hub/api/users/{name}", headers=admin, timeout=30)
            .json()["servers"]
            .get("", {})
            .get("ready")
        ):
            assert time.monotonic() < deadline, hub["log"].read_text()[-4000:]
            time.sleep(1)

    nb = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    ws = {}
    for name in LEARNERS:
        h = {"Authorization": f"token {tokens[name]}"}
        r = requests.post(f"{base}/user/{name}/api/sessions", headers=h, timeout=120, json={
            "path": f"grpo_lab/notebooks/{NOTEBOOK}", "type": "notebook", "kernel": {"name": "python3"}})  # fmt: skip
        assert r.status_code == 201, r.text
        ws[name] = f"ws://{base[len('http://') :]}/user/{name}/api/kernels/{r.json()['kernel']['id']}/channels"

    async def everyone():
        return await asyncio.gather(*(_run_notebook(ws[n], tokens[n], cells) for n in LEARNERS))

    t = time.perf_counter()
    with KernelWatch(hub["proc"].pid) as watch:
        outputs = dict(zip(LEARNERS, asyncio.run(everyone())))
    wall = time.perf_counter() - t
    return {"cells": cells, "outputs": outputs, "usage": watch.usage, "wall": wall, "homes": hub["homes"]}


def test_each_learner_got_the_course_in_their_home(class_run):
    for name in LEARNERS:
        copy = class_run["homes"] / name / "grpo_lab"
        assert sorted(p.name for p in (copy / "notebooks").glob("*.ipynb")) == sorted(
            p.name for p in (ROOT / "notebooks").glob("*.ipynb")
        )
        assert (copy / "LICENSE").exists() and (copy / "LICENSE-CONTENT").exists()


def test_three_learners_run_the_notebook_at_once_without_an_error(class_run):
    for name, outs in class_run["outputs"].items():
        errors = [o for cell in outs for o in cell if o.output_type == "error"]
        assert not errors, f"{name}: {errors[0].ename}: {errors[0].evalue}"


def test_the_pinned_outputs_equal_the_committed_ones_for_every_learner(class_run):
    pinned = [i for i, c in enumerate(class_run["cells"]) if "# NBVAL_CHECK_OUTPUT" in c.source]
    assert pinned
    for name, outs in class_run["outputs"].items():
        for i in pinned:
            assert _text(outs[i]) == _text(class_run["cells"][i].outputs), (name, class_run["cells"][i].source[:80])


def test_each_learner_kernel_is_measured_and_the_table_written(class_run):
    usage = class_run["usage"]
    by_learner = {}
    for k in usage.kernels.values():
        name = Path(k.environ_home).name
        if name in LEARNERS:
            by_learner[name] = k
    assert sorted(by_learner) == sorted(LEARNERS)
    rows = {n: {"kernel_peak_mb": round(k.peak_mb), "kernel_cpu_seconds": round(k.cpu_seconds, 1)}
            for n, k in by_learner.items()}  # fmt: skip
    for r in rows.values():
        # importing torch alone takes more than 100 MB; Binder's limit is 2 GB
        assert 100 < r["kernel_peak_mb"] < 2048 and r["kernel_cpu_seconds"] > 1
    report = {"notebook": NOTEBOOK, "learners": rows, "wall_seconds": round(class_run["wall"]),
              "all_processes_peak_mb": round(usage.tree_peak_mb), "cpu_count": os.cpu_count()}  # fmt: skip
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "capacity.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n" + json.dumps(report, indent=1))
