"""Reports as a reader sees them: opened in headless Chromium with the network cut off, every plot
must decode (an <img> with a natural size), and the page must ask for nothing outside itself."""
import json
import shutil

import pytest

from analysis.job import analyse
from tests.support.cli import peerlab
from tests.support.runs import write_run

pytestmark = pytest.mark.spark
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.fail("headless Chromium is required for the report tests (.ci/system-packages installs it)")


def open_in_chromium(page_path, screenshot):
    """(images on the page, images decoded, requests that left the page's own file)."""
    from playwright.sync_api import sync_playwright

    outside = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})

            def guard(route):
                if route.request.url.startswith(("file://", "data:")):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()
            page.route("**/*", guard)
            page.goto(page_path.as_uri(), wait_until="load")
            total, decoded = page.evaluate(
                "() => { const im = [...document.images];"
                " return [im.length, im.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length]; }")
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return total, decoded, outside


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_run_report_shows_its_plots_offline(tmp_path, spark):
    run = tmp_path / "run"
    write_run(run)
    analyse(run, spark)
    shot = tmp_path / "report.png"
    total, decoded, outside = open_in_chromium(run / "analysis" / "report.html", shot)
    assert (total, decoded) == (3, 3)  # latency CDF, coverage over time, bandwidth over time
    assert outside == []
    width, height = _png_size(shot)
    assert width == 1200 and height > 900  # the whole page, longer than one screen


def test_compare_page_overlays_the_runs_plots_offline(tmp_path, spark):
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        write_run(run)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest.update(run_id=f"hand-{name}", label=f"run {name}")
        manifest["scenario"]["topology"] = {"algorithm": "complete"}
        for node in manifest["plan"]["nodes"]:
            node["dial"] = [f"n{i}" for i in range(int(node["id"][1:]) + 1, 4)]
        (run / "manifest.json").write_text(json.dumps(manifest))
        analyse(run, spark)
        runs.append(str(run))
    page = tmp_path / "compare.html"
    out = peerlab("compare", *runs, "--html", str(page), "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("run,label,protocol")
    assert "wrote" in out.stderr and "(3 overlaid plots)" in out.stderr
    total, decoded, outside = open_in_chromium(page, tmp_path / "compare.png")
    assert (total, decoded) == (3, 3)  # latency CDF, coverage, upload per node over time
    assert outside == []
