"""Each documented install line, run into a fresh venv, gives a worker that starts.

Offline: pip reads the machine's local index and wheel folders (its own configuration), so
nothing is downloaded at run time. The worker runs a chart task app on Redis and must say
``ready``; ``celery -A ... xsm --help`` must load too (it needs the ``cli`` extra).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.service, pytest.mark.timeout(900)]


def documented_extras() -> list[str]:
    """The extras of every documented install line that sets up a worker (has ``celery``)."""
    found: set[str] = set()
    line = re.compile(r"""pip install (?:-e )?["']?(?:\.|xsm-celery)\[([a-z,]+)\]""")
    for doc in [ROOT / "README.md", *ROOT.glob("examples/*/README.md"), *ROOT.glob("docs/*.md")]:
        for match in line.finditer(doc.read_text()):
            if "celery" in match.group(1).split(","):
                found.add(",".join(sorted(match.group(1).split(","))))
    return sorted(found)


def test_the_example_install_line_has_the_cli_extra() -> None:
    """The shop example's install line includes ``cli``, which ``celery -A proj xsm`` needs."""
    assert any("cli" in extras.split(",") for extras in documented_extras())


@pytest.mark.parametrize("extras", documented_extras())
def test_an_install_line_gives_a_worker_that_starts(
    extras: str, tmp_path: Path, redis_url: str
) -> None:
    """``pip install -e ".[extras]"`` into a fresh venv, then a worker starts and says ready."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[{extras}]"],
        check=True,
        timeout=800,
        capture_output=True,
    )
    (tmp_path / "installproj.py").write_text(
        textwrap.dedent(f"""
        from celery import Celery
        from xsm_celery.celery import Xsm
        app = Celery("installproj", broker="{redis_url.rsplit("/", 1)[0]}/12")
        app.conf.xsm_dead_letter_store = "sqlite:///{tmp_path}/dlq.db"
        app.conf.xsm_timer_store = "sqlite:///{tmp_path}/timers.db"
        xsm = Xsm(app)

        @xsm.task(name="installproj.work")
        def work():
            return 1
    """)
    )
    celery = env_dir / "bin" / "celery"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    helped = subprocess.run(
        [str(celery), "-A", "installproj", "xsm", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if "cli" in extras.split(","):
        assert helped.returncode == 0, helped.stderr
    queue = f"install-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(celery),
                "-A",
                "installproj",
                "worker",
                "-P",
                "solo",
                "-Q",
                queue,
                "-l",
                "INFO",
                "-n",
                f"{queue}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=out,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                if " ready." in log.read_text(errors="replace"):
                    break
                time.sleep(0.5)
            assert " ready." in log.read_text(errors="replace"), log.read_text()[-3000:]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert sys.executable != str(python)
