"""The simultaneous band of the p_A curve (Sun, Mao, Müller & Vechev 2025) on the web and in REST:
shaded around the page's own entry on the model page (Kolmogorov for one test set, Bonferroni
over the test sets of a multi-set entry, each set's own band listed in the per-set table), around
every entry on the compare page, and the same half-width in ``GET /api/v1/results/{id}``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from certbench.smoothing.records import read_table
from certbench.stats.entry_intervals import mean_pa_band
from certbench.stats.intervals import pa_band
from models.boards.leaderboard import certification_results
from models.db.engine import session_scope
from tests.support.figure_specs import rows, specs
from tests.support.web import Site


@pytest.fixture
def anonymous(client: TestClient) -> TestClient:
    client.cookies.clear()
    return client


def _bands(html: str, chart_id: str) -> list[str]:
    """ "label: what the band is" of every shaded curve of a figure."""
    found = {}
    for row in rows(specs(html)[chart_id]):
        if "band" in row:
            found[row["series"]] = f"{row['series']}: {row['band']}"
    return list(found.values())


def _set_bands(site: Site, sid: int) -> dict[str, tuple[int, float]]:
    """Each test set's (images, Kolmogorov half-width), from its records."""
    with session_scope(site.settings) as session:
        results = certification_results(session, sid)
        paths = {r.test_set.name: site.settings.artifacts_dir / r.records_path for r in results}
    out = {}
    for name, path in paths.items():
        table = read_table(path)
        out[name] = (table.num_rows, pa_band(table).half_width)
    return out


def test_one_test_set_entry_gets_the_kolmogorov_band(anonymous: TestClient, site: Site) -> None:
    sid = site.seeded.entries["webclean"]["Bravo"]
    ((_, half),) = _set_bands(site, sid).values()
    bands = _bands(anonymous.get(f"/models/{sid}").text, "pa-ecdf")
    assert len(bands) == 1  # the page's own entry only; the overlaid entries are unshaded
    assert bands[0].startswith("Bravo") and f"±{half:.3f} (kolmogorov)" in bands[0]
    body = anonymous.get(f"/api/v1/results/{sid}").json()
    assert body["pa_band"] == {
        "half_width": half, "level": 0.95, "method": "kolmogorov", "test_sets": 1,
    }  # fmt: skip
    assert body["results"][0]["intervals"]["pa_band_half_width"] == half


def test_a_multi_set_entry_gets_its_bonferroni_band_and_each_sets_own(
    anonymous: TestClient, site: Site
) -> None:
    sid = site.seeded.entries["webbands"]["Alpha"]
    per_set = _set_bands(site, sid)
    assert len(per_set) == 6
    half, method = mean_pa_band([images for images, _ in per_set.values()])
    assert method == "kolmogorov, bonferroni over test sets"
    assert half > max(width for _, width in per_set.values())  # each set at 1 − 0.05/6
    html = anonymous.get(f"/models/{sid}").text
    (band,) = _bands(html, "pa-ecdf")
    assert f"±{half:.3f} ({method})" in band
    assert "Bonferroni over its 6 test sets" in html
    for name, (_, width) in per_set.items():
        row = html[html.index(f'data-test-set="{name}"') :].split("</tr>")[0]
        assert f'<td class="num pa-band">{width:.3f}</td>' in row
    body = anonymous.get(f"/api/v1/results/{sid}").json()
    assert body["pa_band"]["half_width"] == half and body["pa_band"]["test_sets"] == 6


def test_every_compared_entry_is_shaded(anonymous: TestClient, site: Site) -> None:
    ids = site.seeded.entries["webbands"]
    html = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Echo']}").text
    bands = _bands(html, "compare-pa")
    assert [b.split(" (#")[0] for b in bands] == ["Alpha", "Echo"]
