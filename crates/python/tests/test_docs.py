"""docs/python.md runs as written: its python blocks, in order, in one namespace, from the
repository root with /tmp/ rewritten to a scratch directory; the table the worked example
prints is the one the page shows. (The docs test in crates/cli runs the page's sh blocks;
it does not run python blocks.)"""

import contextlib
import io
import os
import re

from conftest import REPO

PAGE = REPO / "docs" / "python.md"


def blocks(text, lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def test_python_md_runs_as_written(tmp_path, monkeypatch):
    text = PAGE.read_text()
    code = blocks(text, "python")
    assert code, "docs/python.md has no python blocks"
    monkeypatch.chdir(REPO)
    scratch = f"{tmp_path}/"
    namespace = {"__name__": "__docs__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in code:
            exec(compile(block.replace("/tmp/", scratch), str(PAGE), "exec"), namespace)
    assert os.path.getsize(tmp_path / "parsplice-memory-vs-miss.png") > 10_000
    printed = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    shown = blocks(text, "text")[0]
    for line in shown.strip().splitlines():
        assert " ".join(line.split()) in printed, line
