"""The Python in the project's README, docs/ and examples/python runs against a real server:
every ```python block of README.md and of the pages of docs/ as a program of its own
(``REDIS_URL`` tells it the server)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


def python_blocks():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [block for page in pages for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]


@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.splitlines()[0][:40])
def test_readme_python_runs(server, block):
    done = subprocess.run([sys.executable, "-c", block], env={**os.environ, "REDIS_URL": server.url},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_takes_and_releases_a_lock(server):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / "lock.py"), server.url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "acquired invoice:42 with fencing token" in done.stdout
    assert "released" in done.stdout
