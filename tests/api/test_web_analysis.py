"""The effective-robustness page ``/analysis/{benchmark}`` and the leaderboard's ER column agree
with the REST analysis: fits, ER order, scatter points with Clopper–Pearson bars, the fit line's
opacity (its R²), the metric-predictor table and visibility."""

from __future__ import annotations

import re

import pytest
from analysis_factories import ID_ACC, URL, Family
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.web.auth import COOKIE_NAME
from models.settings import Settings


@pytest.fixture
def family(session: Session, settings: Settings) -> Family:
    fam = Family(session, settings)
    for model, accuracy in enumerate(ID_ACC, start=1):
        fam.model(model, 0.25, accuracy)
    fam.model(7, 0.25, 0.66, shift=1.0)
    return fam


def _section(html: str, ident: str) -> str:
    start = html.index(f'id="{ident}"')
    return html[start : html.index("</section>", start)]


def test_the_page_shows_the_rest_fit_points_and_er_order(client: TestClient, family: Family):
    rest = client.get(URL.format("cifar10-c"), params={"ood": "cifar10-c/fog"}).json()
    trend = rest["groups"][0]["trends"][0]
    html = client.get("/analysis/cifar10-c", params={"ood": "cifar10-c/fog"}).text
    section = _section(html, "trend")
    fit = trend["fit"]
    assert f'<span data-key="slope">{fit["slope"]:.3f}</span>' in section
    assert f'<span data-key="r2">{fit["r2"]:.3f}</span>' in section

    svg = section[section.index('id="er-trend"') :]
    line = re.search(
        r'<line class="fit"[^>]*stroke-opacity="([0-9.]+)"[^>]*data-r2="([0-9.]+)"', svg
    )
    assert line and float(line.group(1)) == pytest.approx(max(fit["r2"], 0.12), abs=1e-3)
    assert svg.count('<g class="point"') == fit["n"] == 7
    assert svg.count('class="err"') == 2 * 7  # ID and OOD Clopper–Pearson bars
    assert svg.count('r="4.5"') == 1  # the one entry whose ER interval lies above 0

    table = section[section.index('id="er-table"') :]
    rows = re.findall(r'<tr data-id="(\d+)">', table)
    assert [int(r) for r in rows] == [e["submission_id"] for e in trend["entries"]]
    best = trend["entries"][0]["effective_robustness"]["value"]
    assert f'data-key="er">{best:+.3f}</td>' in table

    fits = _section(html, "fits")
    assert 'data-key="cifar10-c/band:low"' in fits and 'data-key="cifar10-c"' in fits


def test_the_predictor_table_marks_the_metric_that_explains_robustness(
    client: TestClient, family: Family
):
    html = client.get("/analysis/cifar10", params={"ood": "cifar10-c/fog"}).text
    table = _section(html, "predictors")
    row = table[table.index('<tr data-key="cifar10-c/fog">') :]
    row = row[: row.index("</tr>")]
    hff = re.search(r'data-metric="hff_amplitude" data-r2="([0-9.]+)">([^<]*)<strong>', row)
    assert hff and float(hff.group(1)) == pytest.approx(1.0, abs=1e-3)
    assert "★" in row[row.index('data-metric="hff_amplitude"') :].split("</td>")[0]
    assert "★" not in row[row.index('data-metric="id_accuracy"') :].split("</td>")[0]
    assert 'data-metric="cd_amplitude">–</td>' in row  # constant metric: no fit
    assert 'id="metric-hff_amplitude"' in table and 'id="metric-cd_amplitude"' in table


def test_page_choices_and_errors(client: TestClient, family: Family):
    assert "σ = 0.25" in client.get("/analysis/cifar10-c", params={"sigma": "0.25"}).text
    bad = client.get("/analysis/cifar10-c", params={"ood": "cifar10-c/rain"})
    assert bad.status_code == 422 and "not an OOD set" in bad.text
    assert client.get("/analysis/cifar10-c", params={"sigma": "0.5"}).status_code == 422
    assert client.get("/analysis/nope").status_code == 404
    base = client.get("/analysis/cifar10-c", params={"id": "base"}).text
    assert "the base classifier&#39;s clean accuracy" in base or "base classifier's" in base


def test_leaderboard_er_column_matches_rest_and_respects_visibility(
    client: TestClient, family: Family
):
    _, private = family.model(9, 0.25, 0.6, private=True)
    rest = client.get("/api/v1/leaderboards/cifar10-c", params={"limit": 200}).json()
    html = client.get("/leaderboards/cifar10-c", params={"per_page": 200}).text
    assert 'id="er-head"' in html and 'href="/analysis/cifar10-c"' in html
    for row in rest["rows"]:
        value = row["effective_robustness"]["value"]
        cell = re.search(
            rf'<tr data-id="{row["submission_id"]}".*?data-key="effective_robustness" '
            r'data-value="([^"]*)"',
            html,
            re.S,
        )
        assert cell and float(cell.group(1)) == pytest.approx(value)
    assert f'data-id="{private}"' not in html
    token = family.headers["alice"]["Authorization"].removeprefix("Bearer ")
    client.cookies.set(COOKIE_NAME, token)
    page = client.get("/analysis/cifar10-c").text
    client.cookies.clear()
    assert f'data-id="{private}"' in page
    assert f'data-id="{private}"' not in client.get("/analysis/cifar10-c").text
    clean = client.get("/leaderboards/cifar10").text
    assert 'id="er-head"' not in clean and 'href="/analysis/cifar10"' in clean
