"""``vqa serve``'s errors as a client meets them, against a real server: every error in the
documented shape (bad query parameters, unknown routes and methods), HEAD for probes, and the
bearer scheme in any case."""
from __future__ import annotations

import pytest
from tests.support.malformed_media import good_clip
from tests.support.server import Server, error, wait_job

pytestmark = pytest.mark.slow

TOKEN = "t0ken"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-errors")
    root = base / "root"
    (root / "day").mkdir(parents=True)
    good_clip(root / "day", "clip0.mp4")
    srv = Server(root, base / "data", token=TOKEN)
    with srv:
        yield srv


def test_bad_query_parameters_get_400_in_the_error_shape(server):
    with server.client() as client:
        job = client.post("/v1/jobs", json={"paths": ["day/clip0.mp4"]}).json()["id"]
        wait_job(client, job)
        records = f"/v1/jobs/{job}/records"
        for after in ("99999999999999999999", "-99999999999999999999", "-2", "abc"):
            message = error(client.get(records, params={"after": after, "follow": "false"}), 400, "E_USAGE")
            assert "after" in message, message
        error(client.get(records, params={"format": "xml"}), 400, "E_USAGE")
        error(client.get(f"/v1/jobs/{job}", params={"records": "maybe"}), 400, "E_USAGE")
        error(client.get(f"/v1/jobs/{job}/report", params={"thumbnails": "51"}), 400, "E_USAGE")
        assert len(client.get(records, params={"after": "-1"}).text.splitlines()) == 1


def test_unknown_routes_and_methods_get_the_error_shape(server):
    with server.client() as client:
        error(client.get("/nonexistent"), 404, "E_NO_ROUTE")
        error(client.get("/v1/jobs/nope"), 404, "E_NO_JOB")
        put = client.put("/v1/jobs", json={})
        error(put, 405, "E_METHOD")
        assert {"GET", "POST"} <= {m.strip() for m in put.headers["allow"].split(",")}
        error(client.patch("/v1/score"), 405, "E_METHOD")


def test_probes_may_use_head(server):
    with server.client(token=None) as anonymous, server.client() as client:
        health = anonymous.head("/healthz")
        assert health.status_code == 200 and health.content == b""
        assert health.headers["content-type"] == "application/json"
        assert client.head("/metrics").status_code == 200
        assert anonymous.head("/metrics").status_code == 401


def test_the_bearer_scheme_is_any_case(server):
    with server.client(token=None) as client:
        for scheme in ("bearer", "BEARER", "Bearer"):
            assert client.get("/v1/jobs", headers={"Authorization": f"{scheme} {TOKEN}"}).status_code == 200, scheme
        error(client.get("/v1/jobs", headers={"Authorization": f"bearer {TOKEN}x"}), 401, "E_AUTH")
