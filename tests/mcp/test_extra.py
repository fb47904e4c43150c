"""``mcp`` is an extra: the core install never imports it, and ``worldline mcp``
without it says how to install it and exits 2."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from worldline.cli.mcp import INSTALL


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_importing_worldline_and_its_cli_does_not_import_mcp() -> None:
    ran = _python(
        """
        import contextlib, io, sys
        import worldline, worldline.cli, worldline.sdk
        from worldline.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                main(["--help"])
            except SystemExit:
                pass
        assert "mcp" in out.getvalue()  # the verb is listed all the same
        loaded = sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("mcp", "mcp_types", "uvicorn", "starlette")
        )
        print(loaded)
        """
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"


def test_worldline_mcp_without_the_extra_names_the_install_and_exits_2() -> None:
    ran = _python(
        """
        import sys

        class NoMcp:  # as if `pip install worldline` left the extra out
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "mcp":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoMcp())
        from worldline.cli import main
        sys.exit(main(["mcp", "--nats", "nats://127.0.0.1:9"]))
        """
    )
    assert ran.returncode == 2, ran.stderr
    assert INSTALL in ran.stderr
    assert "Traceback" not in ran.stderr
