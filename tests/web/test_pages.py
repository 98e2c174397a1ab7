"""Server-side checks of the HTML pages (TestClient): values on the pages equal the database and
the REST API, privacy holds, sign-in cookies are safe, errors are HTML with the right status."""

from __future__ import annotations

import io
import json
import re
from html import unescape

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy import select

from api.web.auth import COOKIE_NAME
from certbench.smoothing.metrics import PA_GRID, pa_ecdf
from certbench.smoothing.records import read_table
from models.boards.leaderboard import SORT_COLUMNS, certification_results, robustness_result
from models.catalog.benchmarks import get_benchmark, parse_definition, upsert_benchmark
from models.db.engine import session_scope
from models.db.entities import LeaderboardEntry, Submission
from tests.support.figure_specs import curves, rows, specs, texts
from tests.support.web import Site
from tests.support.web_seed import (
    ROBUSTNESS_BANK_SHA256,
    ROBUSTNESS_PLANS,
    clean_definition,
    submit,
)

ROW = re.compile(r'<tr data-id="(\d+)"')
ROBUSTNESS_KEYS = ("base_accuracy", "linf_acc_8", "pd_acc_8", "linf_acc_16", "pd_acc_16")


def _row_ids(html: str) -> list[int]:
    return [int(m) for m in ROW.findall(html)]


def _api_ids(client: TestClient, benchmark: str, **params: str) -> list[int]:
    response = client.get(f"/api/v1/leaderboards/{benchmark}", params=params)
    assert response.status_code == 200, response.text
    return [row["submission_id"] for row in response.json()["rows"]]


@pytest.fixture
def anonymous(client: TestClient) -> TestClient:
    client.cookies.clear()
    return client


def test_leaderboard_rows_and_values_match_the_database(anonymous: TestClient, site: Site) -> None:
    html = anonymous.get("/leaderboards/webbands").text
    ids = _row_ids(html)
    with session_scope(site.settings) as session:
        entries = {
            e.submission_id: e
            for e in session.scalars(
                select(LeaderboardEntry).where(LeaderboardEntry.submission_id.in_(ids))
            )
        }
    assert len(ids) == 5 and site.seeded.private_id not in ids
    assert ids == sorted(ids, key=lambda i: (-entries[i].macr, i))
    header = html[html.index("<thead>") : html.index("</thead>")]
    assert re.search(r'data-key="macr".*?higher is better">↑', header, re.S)
    assert re.search(r'data-key="abstain_rate".*?lower is better">↓', header, re.S)
    for sid, entry in entries.items():
        row = html[html.index(f'<tr data-id="{sid}"') :].split("</tr>")[0]
        assert f'data-key="macr" data-value="{entry.macr}"' in row
        assert f"{entry.macr:.3f}" in row
        assert f"{entry.cert_acc_050 * 100:.1f}%" in row
        assert f"{entry.pa_median:.3f}" in row
        assert f"{entry.band_low:.3f}" in row and f"{entry.band_high:.3f}" in row


def test_every_sort_key_orders_like_the_rest_api(anonymous: TestClient) -> None:
    keys = anonymous.get("/api/v1/benchmarks/webbands").json()["sort_keys"]
    assert {"macr", "band_low", "sigma"} <= set(keys) < set(SORT_COLUMNS)
    for sort, label in keys.items():
        for order in ("asc", "desc"):
            page = anonymous.get(f"/leaderboards/webbands?sort={sort}&order={order}")
            assert page.status_code == 200
            assert f"sorted by {label} (" in page.text
            assert _row_ids(page.text) == _api_ids(anonymous, "webbands", sort=sort, order=order)


def test_filters_search_and_paging_match_the_rest_api(anonymous: TestClient) -> None:
    cases = [
        ({"sigma": "0.5"}, {"sigma": "0.5"}),
        ({"architecture": "wrn"}, {"architecture": "wrn"}),
        ({"extra_data": "yes"}, {"extra_data": "true"}),
        ({"venue": "ICML"}, {"venue": "ICML"}),
        ({"baseline": "only"}, {"baseline": "true"}),
        ({"flagged": "exclude"}, {"flagged": "false"}),
        ({"search": "ar"}, {"search": "ar"}),
        ({"per_page": "2", "page": "2"}, {"limit": "2", "offset": "2"}),
    ]
    for web, api in cases:
        ids = _row_ids(anonymous.get("/leaderboards/webbands", params=web).text)
        assert ids == _api_ids(anonymous, "webbands", **api), web
        assert ids, f"filter {web} should match something in the seed"


def test_paging_shows_counts_and_rank_offsets(anonymous: TestClient) -> None:
    html = anonymous.get("/leaderboards/webbands?per_page=2&page=3").text
    assert "Entries 5–5 of 5" in html
    assert re.search(r'<td class="num rank">5</td>', html)


def test_private_entry_only_for_its_owner(client: TestClient, site: Site) -> None:
    client.cookies.clear()
    assert site.seeded.private_id not in _row_ids(client.get("/leaderboards/webbands").text)
    assert client.get(f"/models/{site.seeded.private_id}").status_code == 404
    client.cookies.set(COOKIE_NAME, site.seeded.tokens["alice"])
    try:
        assert site.seeded.private_id in _row_ids(client.get("/leaderboards/webbands").text)
        assert client.get(f"/models/{site.seeded.private_id}").status_code == 200
        client.cookies.set(COOKIE_NAME, site.seeded.tokens["bob"])
        assert client.get(f"/models/{site.seeded.private_id}").status_code == 404
    finally:
        client.cookies.clear()


def test_model_page_shows_results_versions_and_records(anonymous: TestClient, site: Site) -> None:
    sid = site.seeded.entries["webbands"]["Alpha"]
    html = anonymous.get(f"/models/{sid}").text
    with session_scope(site.settings) as session:
        results = [
            (r.test_set.name, r.acr, r.pa_median, r.evaluator_version)
            for r in certification_results(session, sid)
        ]
        protocol = session.get(Submission, sid).protocol_version
    assert len(results) == 6
    for name, acr, pa_median, evaluator in results:
        row = html[html.index(f'data-test-set="{name}"') :].split("</tr>")[0]
        assert f"{acr:.3f}" in row
        assert f"{pa_median:.3f}" in row
        assert evaluator in html
        link = re.search(r'href="([^"]+)" download', row).group(1)
        download = anonymous.get(link)
        assert download.status_code == 200 and download.content[:4] == b"PAR1"
    assert f"<code>{protocol}</code>" in html
    assert '"sigma": 0.25' in unescape(html)  # the manifest
    assert "radius (ℓ2, [0,1] pixels)" in html


def test_pa_curve_on_the_page_is_the_records_ecdf(anonymous: TestClient, site: Site) -> None:
    sid = site.seeded.entries["webclean"]["Bravo"]
    html = anonymous.get(f"/models/{sid}").text
    label, drawn_rows = next(iter(curves(specs(html)["pa-ecdf"]).items()))
    assert label.startswith("Bravo")
    points = np.array([[r["x"], r["y"]] for r in drawn_rows])
    with session_scope(site.settings) as session:
        result = certification_results(session, sid)[0]
        path = site.settings.artifacts_dir / result.records_path
    expected = pa_ecdf(read_table(path))
    drawn = np.interp(PA_GRID, points[:, 0], points[:, 1])
    # between kept points the drawn line is flat or linear: compare where the curve is defined
    kept = np.isin(np.round(PA_GRID, 3), np.round(points[:, 0], 3))
    assert np.allclose(drawn[kept], expected[kept], atol=1e-4)
    assert points[0][0] == 0.5 and points[-1][0] == 1.0


def test_fourier_heatmap_cells_are_mean_acr_over_severities(
    anonymous: TestClient, site: Site
) -> None:
    sid = site.seeded.entries["webf"]["Charlie"]
    html = anonymous.get(f"/models/{sid}").text
    values = [r["value"] for r in rows(specs(html)["fourier-heatmap"])]
    with session_scope(site.settings) as session:
        acrs = [r.acr for r in certification_results(session, sid)]
    assert sorted(values) == pytest.approx(sorted(acrs), abs=1e-4)  # one severity per cell


def test_home_and_datasets_show_hub_links_and_one_liners(anonymous: TestClient) -> None:
    home = anonymous.get("/").text
    assert 'href="https://huggingface.co/datasets/certbench/web-c"' in home
    datasets = unescape(anonymous.get("/datasets").text)
    assert 'load_dataset("certbench/web-f", "fc01_a0p5_s1", split="test")' in datasets
    page = unescape(anonymous.get("/datasets/certbench/web-c").text)
    for config in ("fog_s1", "blur_s2", "noise_s1"):
        assert f'load_dataset("certbench/web-c", "{config}", split="test")' in page
    assert "has none" in page  # no local copy → the page says so


def test_local_dataset_samples_and_figures(anonymous: TestClient) -> None:
    page = anonymous.get("/datasets/certbench/web-clean").text
    assert "/datasets/certbench/web-clean/samples/clean.png" in page
    assert "/datasets/certbench/web-clean/figures/sample_grid.png" in page
    png = anonymous.get("/datasets/certbench/web-clean/samples/clean.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(png.content)).size == (4 * 34 * 3, 4 * 34 * 3)
    assert anonymous.get("/datasets/certbench/web-clean/figures/../README.md").status_code == 404
    assert anonymous.get("/datasets/certbench/web-clean/figures/nope.png").status_code == 404


def test_broken_local_copy_is_reported_not_fatal(anonymous: TestClient, site: Site) -> None:
    folder = site.data_dir.parent / "broken-dataset"
    folder.mkdir(exist_ok=True)  # exists, but holds no Hub layout
    definition = json.loads(clean_definition(folder))
    definition.update(name="webbroken", title="Web broken")
    definition["test_sets"][0]["repo"] = "certbench/web-broken"
    with session_scope(site.settings) as session:
        upsert_benchmark(session, parse_definition(json.dumps(definition)))
    page = anonymous.get("/datasets/certbench/web-broken")
    assert page.status_code == 200
    assert "cannot be read" in page.text and 'role="alert"' in page.text
    assert anonymous.get("/datasets/certbench/web-broken/samples/clean.png").status_code == 404


def test_sign_in_sets_a_safe_cookie(anonymous: TestClient, site: Site) -> None:
    response = anonymous.post(
        "/login",
        data={"token": site.seeded.tokens["bob"], "next": "https://evil.example/"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/submissions"  # no open redirect
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=43200" in cookie
    bad = anonymous.post("/login", data={"token": "cb_nope"}, follow_redirects=False)
    assert bad.status_code == 401 and "invalid API token" in bad.text
    foreign = anonymous.post(
        "/login",
        data={"token": site.seeded.tokens["bob"]},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers


def test_status_page_is_for_the_owner_only(client: TestClient, site: Site) -> None:
    client.cookies.clear()
    running = site.seeded.running_id
    redirect = client.get(f"/submissions/{running}", follow_redirects=False)
    assert redirect.status_code == 303 and redirect.headers["location"].startswith("/login")
    client.cookies.set(COOKIE_NAME, site.seeded.tokens["bob"])
    assert client.get(f"/submissions/{running}").status_code == 404
    client.cookies.set(COOKIE_NAME, site.seeded.tokens["root"])  # admins see everything
    html = client.get(f"/submissions/{running}").text
    assert '<dd id="state">running</dd>' in html
    assert html.count('<td class="num">8 / 8</td>') == 1  # recorded
    assert html.count('<td class="num">3 / 8</td>') == 1  # running: 3 images so far
    assert html.count('<td class="num">0 / 8</td>') == 4
    assert 'http-equiv="refresh"' in html
    _status_page_shows_the_rest_apis_progress(client, running, html)
    client.cookies.set(COOKIE_NAME, "cb_revoked_or_wrong")
    stale = client.get("/leaderboards/webbands")
    assert stale.status_code == 200 and f'{COOKIE_NAME}=""' in stale.headers["set-cookie"]
    client.cookies.clear()


def _status_page_shows_the_rest_apis_progress(client: TestClient, sid: int, html: str) -> None:
    """The page's fraction, ETA and estimate are ``/progress``'s: 8 recorded + 3 running images
    of 48 at 1,010 forward passes each; the running shard did 3,030 in 12 s (252.5 samples/s)."""
    token = client.cookies.get(COOKIE_NAME)
    report = client.get(
        f"/api/v1/submissions/{sid}/progress", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert report["samples_done"] == 11 * 1010 and report["samples_total"] == 48 * 1010
    assert f'<progress id="overall" max="1" value="{report["progress"]}">' in html
    assert "11,110 of 48,480 forward passes" in html
    assert report["eta_seconds"] == pytest.approx(37 * 1010 / 252.5)  # 148 s
    assert '<p id="eta"><strong>about 2 min left</strong> at 252 samples/s</p>' in html
    assert "252 samples/s, 0.2 images/s (1 shard(s) running now)" in html
    assert '<dd id="estimate">48,480 forward passes' in html
    flops = report["estimate"]["flops"]  # the passes × the network's FLOPs per sample
    assert flops > 0 and flops % report["samples_total"] == 0
    assert f"({flops:.3g} FLOPs, what the daily compute quota charges)" in html


def test_owner_cancels_from_the_status_page(client: TestClient, site: Site) -> None:
    with session_scope(site.settings) as session:
        bench = get_benchmark(session, "webclean")
        alice = session.get(Submission, site.seeded.running_id).user
        sid = submit(
            session, user=alice, benchmark=bench, settings=site.settings, name="Tmp", seed=777
        )
    client.cookies.set(COOKIE_NAME, site.seeded.tokens["alice"])
    try:
        html = client.get(f"/submissions/{sid}").text
        assert "queue-position" in html and "Cancel this submission" in html
        response = client.post(f"/submissions/{sid}/cancel", follow_redirects=False)
        assert response.status_code == 303
        assert '<dd id="state">cancelled</dd>' in client.get(f"/submissions/{sid}").text
        again = client.post(f"/submissions/{sid}/cancel")
        assert again.status_code == 409 and "text/html" in again.headers["content-type"]
    finally:
        client.cookies.clear()


def test_compare_page_and_its_errors(anonymous: TestClient, site: Site) -> None:
    ids = site.seeded.entries["webbands"]
    html = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Echo']}").text
    figures = specs(html)
    assert len(curves(figures["compare-cert-acc"])) == len(curves(figures["compare-pa"])) == 2
    one = anonymous.get(f"/compare?id={ids['Alpha']}")
    assert one.status_code == 422 and "2 to 4" in one.text
    mixed = anonymous.get(f"/compare?id={ids['Alpha']}&id={site.seeded.entries['webf']['Alpha']}")
    assert mixed.status_code == 422 and "different benchmarks" in mixed.text


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/leaderboards/nope", 404),
        ("/leaderboards/webbands?sort=drop_table", 422),
        ("/leaderboards/webbands?extra_data=maybe", 422),
        ("/leaderboards/webbands?sigma=abc", 422),
        ("/models/999999", 404),
        ("/datasets/nobody/nothing", 404),
    ],
)
def test_errors_are_html_pages(anonymous: TestClient, url: str, status: int) -> None:
    response = anonymous.get(url)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert 'role="alert"' in response.text


def test_static_files_are_bundled(anonymous: TestClient) -> None:
    for name in ("certbench.css", "certbench.js"):
        response = anonymous.get(f"/static/{name}")
        assert response.status_code == 200 and len(response.content) > 1000
    html = anonymous.get("/").text
    assert "http://" not in html.split("<body>")[0] and "https://" not in html.split("<body>")[0]


# ---- base-classifier robustness (Muthukumar et al. 2025) --------------------------------------


def _entries(site: Site, benchmark: str) -> dict[int, LeaderboardEntry]:
    ids = list(site.seeded.entries[benchmark].values())
    with session_scope(site.settings) as session:
        return {
            e.submission_id: e
            for e in session.scalars(
                select(LeaderboardEntry).where(LeaderboardEntry.submission_id.in_(ids))
            )
        }


def _row(html: str, sid: int) -> str:
    return html[html.index(f'<tr data-id="{sid}"') :].split("</tr>")[0]


def test_leaderboard_shows_robustness_columns(anonymous: TestClient, site: Site) -> None:
    html = anonymous.get("/leaderboards/webclean").text
    header = html[html.index("<thead>") : html.index("</thead>")]
    keys = re.findall(r'<th scope="col" class="num metric[^"]*" data-key="([a-z0-9_]+)"', header)
    assert keys[-5:] == list(ROBUSTNESS_KEYS)  # in this order, after the certified columns
    links = re.findall(
        r'data-key="(?:base_acc|linf_acc|pd_acc)[^"]*".*?<a [^>]*>(.*?)<span class="hib"',
        header,
        re.S,
    )
    labels = [re.sub(r"<[^>]+>", "", link) for link in links]  # as a screen reader reads it
    assert labels == ["clean (base)", "ℓ∞ 8/255", "ℓ∞∩PD 8/255", "ℓ∞ 16/255", "ℓ∞∩PD 16/255"]
    pd8 = re.search(r'<th[^>]*data-key="pd_acc_8"[^>]*title="([^"]+)"', header).group(1)
    assert "not smoothed" in pd8 and "PD-aware APGD" in pd8 and "higher is better" in pd8
    assert 'href="?sort=pd_acc_8"' in header
    assert 'id="robustness-note"' in html
    entries = _entries(site, "webclean")
    measured = 0
    for sid, entry in entries.items():
        row = _row(html, sid)
        for key in ROBUSTNESS_KEYS:
            value = getattr(entry, key)
            cell = re.search(rf'data-key="{key}" data-value="([^"]*)"[^>]*>\s*([^<]*?)\s*<', row)
            if value is None:
                assert cell.groups() == ("", "–"), (sid, key)
            else:
                measured += 1
                assert float(cell.group(1)) == value and cell.group(2) == f"{value * 100:.1f}%"
    alpha = site.seeded.entries["webclean"]["Alpha"]
    assert entries[alpha].pd_acc_8 is None  # finished before the stage existed
    assert measured == 5 * len(ROBUSTNESS_PLANS)
    # benchmarks without the stage keep their table as it was
    bands = anonymous.get("/leaderboards/webbands").text
    assert 'data-key="base_accuracy"' not in bands and 'id="robustness-note"' not in bands


@pytest.mark.parametrize("key", ["pd_acc_8", "linf_acc_16", "base_accuracy"])
def test_sorting_by_robustness_changes_the_row_order(
    anonymous: TestClient, site: Site, key: str
) -> None:
    entries = _entries(site, "webclean")
    default = _row_ids(anonymous.get("/leaderboards/webclean").text)
    for order in ("desc", "asc"):
        ids = _row_ids(anonymous.get(f"/leaderboards/webclean?sort={key}&order={order}").text)
        measured = [i for i in entries if getattr(entries[i], key) is not None]
        sign = -1 if order == "desc" else 1
        expected = sorted(measured, key=lambda i: (sign * getattr(entries[i], key), i))
        expected += sorted(i for i in entries if getattr(entries[i], key) is None)  # nulls last
        assert ids == expected, (key, order)
        assert ids == _api_ids(anonymous, "webclean", sort=key, order=order)
    best_first = _row_ids(anonymous.get(f"/leaderboards/webclean?sort={key}").text)
    assert best_first != default
    assert best_first[-1] == site.seeded.entries["webclean"]["Alpha"]


def test_pd_sort_reverses_the_certified_ranking(anonymous: TestClient, site: Site) -> None:
    """The seed's robustness is the reverse of certification quality (Alpha unmeasured)."""
    names = {v: k for k, v in site.seeded.entries["webclean"].items()}
    by_macr = [names[i] for i in _row_ids(anonymous.get("/leaderboards/webclean").text)]
    by_pd = [names[i] for i in _row_ids(anonymous.get("/leaderboards/webclean?sort=pd_acc_8").text)]
    assert by_macr == ["Alpha", "Bravo", "Charlie", "Delta", "Echo"]
    assert by_pd == ["Echo", "Delta", "Charlie", "Bravo", "Alpha"]
    html = anonymous.get("/leaderboards/webclean?sort=pd_acc_8").text
    assert re.search(r'data-key="pd_acc_8" aria-sort="descending"', html)


def test_model_page_shows_robustness_table_chart_and_protocol(
    anonymous: TestClient, site: Site
) -> None:
    sid = site.seeded.entries["webclean"]["Echo"]
    html = anonymous.get(f"/models/{sid}").text
    with session_scope(site.settings) as session:
        stored = robustness_result(session, sid)
        figures, records_path = dict(stored.figures), stored.records_path
    section = html[html.index('id="robustness"') : html.index('aria-labelledby="sets-h"')]
    assert (
        "Robustness of the base classifier (Projected Displacement, Muthukumar et al.)" in section
    )
    assert f'id="base-accuracy">{figures["clean_accuracy"] * 100:.1f}%<' in section
    for eps in (8, 16):
        row = section[section.index(f'<tr data-eps="{eps}">') :].split("</tr>")[0]
        for key, figure in (
            ("linf", "linf_robust_accuracy"),
            ("pd", "pd_robust_accuracy"),
            ("projected", "pd_projected_accuracy"),
            ("aware", "pd_aware_accuracy"),
        ):
            value = figures[f"{figure}_{eps}"]
            assert f'data-key="{key}">{value * 100:.1f}%</td>' in row, (eps, key)
    # Echo's ℓ∞ attack found nothing at 8/255: no median d_PD there, a number at 16/255
    assert figures["linf_pd_threat_median_8"] is None
    threat8 = section[section.index('<tr data-eps="8">') :].split("</tr>")[0]
    assert "none found" in threat8
    assert f'data-key="threat">{figures["linf_pd_threat_median_16"]:.3f}<' in section
    chart = specs(section)["robustness-bars"]
    bars = rows(chart)
    assert len(bars) == 6  # clean, ℓ∞, ℓ∞ ∩ PD at 8/255 and 16/255
    values = [b["value"] for b in bars]
    clean = figures["clean_accuracy"]
    assert values == pytest.approx(
        [
            *(clean, clean),
            *(figures["linf_robust_accuracy_8"], figures["linf_robust_accuracy_16"]),
            *(figures["pd_robust_accuracy_8"], figures["pd_robust_accuracy_16"]),
        ],
        abs=1e-4,
    )
    assert 'id="robustness-bars" role="img" aria-label="Accuracy of the base classifier' in section
    assert "ℓ∞ radius ε (units of 1/255)" in texts(chart)
    assert f'href="/models/{sid}/figures/robustness-bars.pdf"' in section
    protocol = section[section.index('id="robustness-protocol"') :]
    assert "k = 2 per class, seed 0" in protocol and "10 iterations" in protocol
    assert f"sha256:{ROBUSTNESS_BANK_SHA256[:12]}…" in protocol
    assert "<dd>8, 1 in 2 of the test split" in protocol
    # no local paths: the stage's dataset folder and the records file stay on the server
    assert str(site.data_dir.parent / "dataset") not in html and records_path not in html
    # the certified summary table keeps to the smoothed model's columns
    summary = html[html.index('id="summary"') :].split("</table>")[0]
    assert 'data-key="macr"' in summary and 'data-key="pd_acc_8"' not in summary


def test_model_page_says_when_robustness_is_absent(anonymous: TestClient, site: Site) -> None:
    legacy = anonymous.get(f"/models/{site.seeded.entries['webclean']['Alpha']}").text
    assert "Robustness of the base classifier (Projected Displacement, Muthukumar et al.)" in legacy
    assert "Not measured for this entry" in legacy and 'id="robustness-bars"' not in legacy
    # a benchmark without the stage: no empty section (issue 25 §2, the demo's model page)
    plain = anonymous.get(f"/models/{site.seeded.entries['webbands']['Alpha']}").text
    assert 'id="robustness"' not in plain and "Muthukumar" not in plain.split("<footer")[0]


def test_compare_page_has_robustness_rows(anonymous: TestClient, site: Site) -> None:
    ids = site.seeded.entries["webclean"]
    html = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Echo']}").text
    entries = _entries(site, "webclean")
    assert "Base classifier, not smoothed (Projected Displacement, Muthukumar et al.)" in html
    for key in ROBUSTNESS_KEYS:
        row = html[html.index(f'<tr data-key="{key}">') :].split("</tr>")[0]
        cells = re.findall(r'<td class="num"[^>]*>(.*?)</td>', row)
        assert "not measured" in cells[0] and "/rerun" in row, key  # Alpha predates the stage
        assert cells[1] == f"{getattr(entries[ids['Echo']], key) * 100:.1f}%", key
    bands = site.seeded.entries["webbands"]
    other = anonymous.get(f"/compare?id={bands['Alpha']}&id={bands['Echo']}").text
    assert "Muthukumar" not in other and 'data-key="pd_acc_8"' not in other


# ---- pages that fit and read (issue 25 §2) -------------------------------------------------


def test_sort_accepts_the_labels_users_see(anonymous: TestClient) -> None:
    by_key = anonymous.get("/leaderboards/webbands?sort=macr").text
    for typed in ("acr", "ACR", "mACR"):
        page = anonymous.get(f"/leaderboards/webbands?sort={typed}")
        assert page.status_code == 200, typed
        assert 'id="sorted-by" data-key="macr"' in page.text
        assert re.findall(r'<tr data-id="(\d+)"', page.text) == re.findall(
            r'<tr data-id="(\d+)"', by_key
        )
    radius = anonymous.get("/leaderboards/webbands?sort=r%20%3D%200.5")
    assert 'data-key="cert_acc_050"' in radius.text.split('id="sorted-by"')[1][:40]
    assert anonymous.get("/leaderboards/webbands?sort=nope").status_code == 422


def test_compare_paired_tests_name_figures_as_users_see_them(
    anonymous: TestClient, site: Site
) -> None:
    ids = site.seeded.entries["webbands"]
    html = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Echo']}").text
    table = html[html.index('id="paired-tests"') :].split("</table>")[0]
    assert "<caption>A = Alpha (#" in table and ", B = Echo (#" in table
    assert table.count("Alpha (#") == 1  # the names once, in the caption, not on every row
    heads = re.findall(r'<th scope="row" title="([^"]+)">([^<]+)</th>', table)
    assert ("macr", "mACR") in heads and ("cert_acc_000", "r = 0") in heads
    assert "&amp;amp;" not in html and "Müller &amp; Vechev" in html


def test_model_page_reads_as_a_page(anonymous: TestClient, site: Site) -> None:
    html = anonymous.get(f"/models/{site.seeded.entries['webclean']['Bravo']}").text
    manifest = html[html.index('id="manifest"') :].split("</dl>")[0]
    assert "<dt>smoothing › sigma</dt><dd>0.25</dd>" in manifest
    assert "\\u03c3" not in html and "\\u2113" not in html
    assert "pd_robustness images" not in html  # stages by their titles


def test_datasets_count_and_explain_their_configs(anonymous: TestClient) -> None:
    listing = anonymous.get("/datasets").text
    row = listing[listing.index('data-repo="certbench/web-clean"') :].split("</tr>")[0]
    assert '<td class="num">1</td>' in row  # never "Configs 0"
    page = anonymous.get("/datasets/certbench/web-f").text
    assert page.count("load_dataset(") == 1  # one snippet for the 6 configs
    table = page[page.index('id="configs"') :].split("</table>")[0]
    assert table.count("<tr>") == 7 and '<td class="num">0.5</td>' in table
    assert "f_c</strong> is the centre frequency" in page and "ε = 8, 10, 12" in page


def test_not_found_pages_speak_to_researchers(anonymous: TestClient) -> None:
    analysis = anonymous.get("/analysis/webbands")
    assert analysis.status_code == 404
    assert "id_benchmark" not in analysis.text and "out-of-distribution" in analysis.text
    typo = anonymous.get("/leaderboards/webbnads")
    assert typo.status_code == 404 and "did you mean &#39;webbands&#39;" in typo.text


def test_an_ended_run_that_was_rejected_offers_no_reproduction() -> None:
    from types import SimpleNamespace

    from api.web.rendering import templates

    macro = templates.env.get_template("_provenance.html").module.seed_fact
    seed = SimpleNamespace(kind="secret", revealed=True, value="0xab", commitment="cd")
    assert "Reproduce the records with" in str(macro(seed, "finished"))
    rejected = str(macro(seed, "rejected"))
    assert "Reproduce" not in rejected and "ended rejected" in rejected
