"""JupyterHub for a class on one machine, in the manner of The Littlest JupyterHub: each learner logs in
with a name of their choice and the class's shared password, gets their own JupyterLab with a copy of the
course's notebooks in their home, at most MEMORY and CPUS of the machine, and is stopped after IDLE
seconds without activity. docs/instructors_guide.md has the commands and a measured capacity table.

    GRPO_LAB_CLASS_PASSWORD=... jupyterhub -f classroom/jupyterhub_config.py

Environment (read once here):
    GRPO_LAB_CLASS_PASSWORD  the shared password, 8 characters or more (required)
    GRPO_LAB_COURSE          the course's checkout whose notebooks each learner gets (default: this repository)
    GRPO_LAB_USER_ENV        the Python environment learners' servers and kernels run in, the course's
                             installed plus the `jupyterhub` package (default: GRPO_LAB_COURSE/.venv)
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - defined by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent
COURSE = Path(os.environ.get("GRPO_LAB_COURSE", HERE.parent)).resolve()
USER_ENV = Path(os.environ.get("GRPO_LAB_USER_ENV", COURSE / ".venv"))
MEMORY = "3G"  # a kernel peaks below 0.9 GB (the guide's table), the server adds about 0.2 GB: room for two kernels
CPUS = 1.0  # torch runs on one thread per learner (OMP_NUM_THREADS below): a class shares the cores evenly
IDLE = 3600  # seconds: a learner's server idle this long is stopped (their files stay)

password = os.environ.get("GRPO_LAB_CLASS_PASSWORD", "")
if len(password) < 8:
    sys.exit(f"GRPO_LAB_CLASS_PASSWORD: set the class's shared password, 8 characters or more; got {len(password)}")
if not (USER_ENV / "bin" / "python").exists():
    sys.exit(f"GRPO_LAB_USER_ENV: no Python at {USER_ENV}/bin/python; make it with `make install` in {COURSE}")

# A workshop: any name, one shared password. For a longer course, FirstUseAuthenticator (each learner sets
# their own password at first login) or the university's OAuth are drop-in replacements.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = password
c.Authenticator.allow_all = True

# systemd enforces the limits (cgroups), and gives each learner a throwaway system user with a private home.
c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
c.SystemdSpawner.dynamic_users = True
c.Spawner.mem_limit = MEMORY
c.Spawner.cpu_limit = CPUS
c.Spawner.cmd = [str(HERE / "start-singleuser.sh")]  # copies the course on first start, then starts JupyterLab
c.Spawner.environment = {
    "GRPO_LAB_COURSE": str(COURSE),
    "GRPO_LAB_PYTHON": str(USER_ENV / "bin" / "python"),
    "OMP_NUM_THREADS": str(int(CPUS)),
}
c.Spawner.default_url = "/lab/tree/grpo_lab/notebooks/00_tour.ipynb"
c.Spawner.start_timeout = 120  # a room logging in at once starts many servers together
c.Spawner.http_timeout = 120

c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE}"],
    }
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }
]
