"""The console in a real headless browser: a nats-server, the five actors and
``worldline mcp --http`` (the gateway) as a subprocess; Debian's chromium (``.ci/run``
installs it) driven by playwright opens ``/console/``, the belief table renders (a
screenshot, checked for size and content), a belief added through the SDK appears
without a reload, and a request without the token is refused (401)."""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import struct
import zlib
from typing import TYPE_CHECKING

import anyio
import pytest
from playwright.async_api import async_playwright

import worldline
from tests.console.serving import gateway, get
from tests.support import all_actors, running, unique_world

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.cli, pytest.mark.nats]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:  # .ci/run installs it; say so rather than pass silently
    pytest.fail(
        "no chromium on PATH: `apt-get install -y chromium` (as .ci/run does)",
        pytrace=False,
    )


def _png_colours(png: bytes) -> tuple[int, int, int]:
    """Width, height and how many distinct byte values the pixel rows hold."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    data, at = b"", 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind = png[at + 4 : at + 8]
        if kind == b"IDAT":
            data += png[at + 8 : at + 8 + length]
        at += 12 + length
    return width, height, len(set(zlib.decompress(data)))


@pytest.mark.timeout(90)
async def test_the_console_shows_beliefs_and_follows_the_feed_live(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    token = secrets.token_hex(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[agents.ada]\ntoken_sha256 = "{digest}"\n')
    log = tmp_path / "gateway.log"
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "actors"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        first = await ada.add("The deploy window opens at noon", confidence=0.7)
        async with gateway(nats_url, world, tokens, log) as base:
            # The data routes need the token; the static page holds no data.
            for path in ("snapshot", "events", f"beliefs/{first.id}"):
                code, body = await anyio.to_thread.run_sync(
                    get, f"{base}/console/api/{path}"
                )
                assert code == 401, (path, body)
            code, _ = await anyio.to_thread.run_sync(
                get, f"{base}/console/api/snapshot", "not-" + token
            )
            assert code == 401
            code, body = await anyio.to_thread.run_sync(
                get, f"{base}/console/api/snapshot", token
            )
            assert code == 200
            snap = json.loads(body)
            assert [b["text"] for b in snap["beliefs"]] == [first.text]
            assert snap["viewer"] == "ada"
            assert {row["actor"] for row in snap["actors"]} >= {"fusion", "projector"}
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM)
                page = await browser.new_page(viewport={"width": 1200, "height": 800})
                await page.goto(f"{base}/console/#token={token}")
                rows = page.locator("#beliefs tbody tr")
                await rows.filter(has_text=first.text).wait_for(timeout=15_000)
                assert await rows.count() == 1
                assert "0.70" in await rows.first.inner_text()
                await page.locator("#live.on").wait_for(timeout=10_000)
                # the token left the address bar (kept for the tab only)
                assert "token" not in page.url
                shot = await page.screenshot(full_page=True)
                width, height, colours = _png_colours(shot)
                assert (width, height) >= (1200, 800)
                assert len(shot) > 10_000, len(shot)
                assert colours > 16, colours  # not one blank colour
                (tmp_path / "console.png").write_bytes(shot)

                await page.evaluate("window.__same_page = true")
                changes = page.locator("#live")
                before = int(await changes.get_attribute("data-changes") or 0)
                second = await ada.add(
                    "The cache is cold after deploys", confidence=0.4
                )
                await page.locator("#beliefs tbody tr", has_text=second.text).wait_for(
                    timeout=10_000
                )
                assert await page.evaluate("window.__same_page === true")  # no reload
                # ... brought by the change feed's events, not the 10 s poll
                assert int(await changes.get_attribute("data-changes") or 0) > before
                assert await rows.count() == 2

                # Evidence moves the posterior on the page, live; a click shows the
                # belief's trace and history.
                moved = await ada.evidence(
                    first.id, direction="supports", kind="measurement", source="ci"
                )
                assert moved.confidence is not None
                shown = f"{moved.confidence:.2f}"
                assert shown != "0.70"
                row = page.locator("#beliefs tbody tr", has_text=first.text)
                await row.filter(has_text=shown).wait_for(timeout=10_000)
                await row.click()
                step = page.locator("#trace tbody tr", has_text="measurement")
                await step.wait_for(timeout=10_000)
                assert "ci" in await step.inner_text()
                assert first.text in await page.locator("#detail-text").inner_text()
                summary = await page.locator("#detail-summary").inner_text()
                assert f"posterior {shown}" in summary
                # kept beside the test's other files, for a person to look at
                detail = await page.screenshot(full_page=True)
                (tmp_path / "console-detail.png").write_bytes(detail)
                await browser.close()
            code, body = await anyio.to_thread.run_sync(get, f"{base}/metrics")
            assert code == 200
            assert (
                b'worldline_gateway_requests_total{code="401",route="console"}' in body
            )
            assert b"process_resident_memory_bytes" in body
            code, _ = await anyio.to_thread.run_sync(get, f"{base}/healthz")
            assert code == 200
    lines = log.read_text().splitlines()
    assert lines, "the gateway logged nothing"
    for line in lines:  # --log-format json: every line one JSON object
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(entry), line
    assert "Traceback" not in log.read_text()
