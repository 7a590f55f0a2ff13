"""``vqa serve``'s OpenAPI document is true of the live server: a property-based run
(schemathesis, every check) finds no undocumented status, content type or body and no 500;
the document has no 422 FastAPI would advertise, the bearer scheme and a model for every
answer; and the docs pages open in a real browser with a token set, from packaged assets."""
from __future__ import annotations

import re
import shutil
import subprocess

import httpx
import pytest
from tests.support.browser import _run
from tests.support.malformed_media import good_clip
from tests.support.server import Server

pytestmark = pytest.mark.slow

TOKEN = "schema-t0ken"
BUDGET_S = 40  # schemathesis's time budget: the whole test stays under a minute


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-schema")
    root = base / "root"
    root.mkdir()
    good_clip(root, "clip0.mp4")
    with Server(root, base / "data", token=TOKEN) as srv:
        yield srv


def test_the_live_server_keeps_to_its_schema(server, tmp_path):
    st = shutil.which("schemathesis") or shutil.which("st")
    if st is None:
        pytest.skip("schemathesis is not installed (requirements-test.txt pins it)")
    proc = subprocess.run([st, "run", f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
                           "--checks", "all", "--max-examples", "10", "--max-time", str(BUDGET_S),
                           "--generation-deterministic", "--request-timeout", "20",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, timeout=BUDGET_S + 60,
                          cwd=tmp_path)  # its crash cache (.schemathesis/) goes there, not into the checkout
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert "No issues found" in proc.stdout, proc.stdout[-4000:]
    statuses = {int(s) for s in re.findall(r"vqa serve: access .*? status=(\d+)", server.log())}
    assert statuses and max(statuses) < 500 and statuses - {200, 202} , statuses  # errors were provoked, no 500


def test_the_document_names_real_statuses_models_and_the_bearer_scheme(server):
    with server.client() as client:
        doc = client.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer",
                                                              "description": doc["components"]["securitySchemes"]
                                                              ["bearer"]["description"]}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            assert "422" not in op["responses"], where
            ok = next(s for s in op["responses"] if s.startswith("2"))
            assert op["responses"][ok].get("content") or path == "/metrics", where  # a schema, not {}
            if path != "/healthz":
                assert op.get("security") == [{"bearer": []}] and "401" in op["responses"], where
            for status, answer in op["responses"].items():
                if int(status) >= 400 and path != "/healthz":
                    assert "application/json" in answer["content"], (where, status)
    assert "400" in doc["paths"]["/v1/jobs/{job_id}/records"]["get"]["responses"]
    assert "location" in {h.lower() for h in doc["paths"]["/v1/jobs"]["post"]["responses"]["202"]["headers"]}


@pytest.mark.parametrize("page, rendered", [("/docs", "/v1/jobs/{job_id}/records"), ("/redoc", "/v1/score")])
def test_the_docs_open_in_a_browser_with_a_token_set_and_no_cdn(server, page, rendered):
    html = httpx.get(server.url + page, timeout=30).text  # no token: a page load cannot send one
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/docs-assets/") for s in sources), sources
    assert "http://" not in html.replace(server.url, "") and "https://" not in html.split("<body", 1)[-1]
    dom, _log, _seconds = _run(["--virtual-time-budget=15000", "--dump-dom", server.url + page], timeout=90)
    assert rendered in dom, dom[-2000:]
    with server.client(token=None) as anonymous:  # the data stays behind the token
        assert anonymous.get("/v1/jobs").status_code == 401
