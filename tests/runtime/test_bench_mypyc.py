"""``bench/mypyc_build.py`` (issue 24): the edits it makes in its scratch copy before
compiling keep behaviour. The compile itself (a minute, a C compiler) is the bench's,
never the suite's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import mypyc_build

pytestmark = pytest.mark.timeout(120)

MODULE = '''\
"""A module with structs and logic."""

from __future__ import annotations

import msgspec


class Tagged(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="t.v1"):
    name: str
    size: int = 0


class Listed(msgspec.Struct):
    items: list[int] = msgspec.field(default_factory=list)


class Plain:
    pass


def make(name: str) -> Tagged:
    return Tagged(name=name)
'''


def test_structs_move_out_with_their_keywords_and_keep_their_names(
    tmp_path: Path,
) -> None:
    package = tmp_path / "mypyc_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(MODULE)
    moved = mypyc_build.move_keyword_classes(tmp_path, "mypyc_probe/mod.py")
    assert moved == ["Tagged", "Listed"]
    left = (package / "mod.py").read_text()
    assert mypyc_build.keyword_classes(left) == []
    assert "class Plain" in left
    assert "def make" in left
    probe = textwrap.dedent("""
        import msgspec
        from mypyc_probe import mod
        made = mod.make("a")
        config = mod.Tagged.__struct_config__
        assert (config.frozen, config.tag, config.tag_field) == (True, "t.v1", "kind")
        assert msgspec.json.encode(made) == b'{"kind":"t.v1","name":"a","size":0}'
        assert mod.Listed().items == [] and mod.Listed.__module__.endswith("_structs")
    """)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_edited_copy_stages_the_same_bytes_as_this_checkout(tmp_path: Path) -> None:
    moved = mypyc_build.prepare(tmp_path)
    # The structs of the modules it compiles, Card's and Reading's among them.
    assert "Card" in moved["worldline/actors/projector/index.py"]
    assert "Reading" in moved["worldline/actors/belief_model/posterior.py"]
    copy = mypyc_build.run_child(tmp_path, 40)
    here = mypyc_build.run_child(mypyc_build.ROOT, 40)
    assert copy["compiled"] is False
    assert here["compiled"] is False
    assert copy["digest"] == here["digest"]
