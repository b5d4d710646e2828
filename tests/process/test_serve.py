"""`estimator-mnist serve` as a process on a loopback port, asked over real HTTP (requests) as a TF Serving client
asks: no version before the first export, status, metadata, :predict in both forms on both signatures equal to
`predict`, Serving's 400s, a newer export served without a restart, concurrent requests, Ctrl-C."""

import base64
import concurrent.futures
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.helpers import free_ports, run_cli
from tests.serve_helpers import Server, write_exports_and_digits

DIGITS = 12


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server started on an empty model_dir, then given its first export; a newer one and PNG digits aside."""
    tmp_path = tmp_path_factory.mktemp("serve")
    model_dir = tmp_path / "model"
    (model_dir / "export" / "latest").mkdir(parents=True)
    server = Server(model_dir, "--poll-secs", "0.2")
    try:
        before = (requests.get(server.url("/v1/models/mnist"), timeout=10),
                  server.predict({"instances": [{"b64": "AA=="}]}))
        made = write_exports_and_digits(tmp_path / "staging", 2, tmp_path / "digits", DIGITS)
        first = str(model_dir / "export" / "latest" / Path(made["exports"][0]).name)
        os.rename(made["exports"][0], first)  # as export.py finishes an export: one rename
        server.wait_for_version(int(Path(first).name))
        yield {"server": server, "model_dir": model_dir, "first": first, "newer": made["exports"][1],
               "files": made["files"], "before": before, "floats": np.load(tmp_path / "digits" / "digits.npy")}
    finally:
        server.stop()


def b64(file) -> dict:
    return {"b64": base64.b64encode(Path(file).read_bytes()).decode()}


def predict_classes(model, *files) -> list:
    proc = run_cli("predict", "--model", str(model), *map(str, files), "--json")
    assert proc.returncode == 0, proc.stderr
    return [record["class"] for record in json.loads(proc.stdout)["predictions"]]


def test_before_the_first_export_no_version_is_available(served):
    status, predict = served["before"]
    assert status.status_code == 404 and status.json() == {"error": "Could not find any versions of model mnist"}
    assert predict.status_code == 404
    assert predict.json() == {"error": "Servable not found for request: Latest(mnist)"}


def test_status_and_metadata_as_serving_gives_them(served):
    server, version = served["server"], Path(served["first"]).name
    status = requests.get(server.url("/v1/models/mnist"), timeout=10).json()
    assert status == {"model_version_status": [{"version": version, "state": "AVAILABLE",
                                                "status": {"error_code": "OK", "error_message": ""}}]}
    assert requests.get(server.url(f"/v1/models/mnist/versions/{version}"), timeout=10).json() == status
    metadata = requests.get(server.url(f"/v1/models/mnist/versions/{version}/metadata"), timeout=10).json()
    assert metadata["model_spec"] == {"name": "mnist", "signature_name": "", "version": version}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert signatures["serving_default"]["inputs"]["image_bytes"]["dtype"] == "DT_STRING"
    assert signatures["images"]["inputs"]["images"]["tensor_shape"]["dim"][1:] == [{"size": "28", "name": ""},
                                                                                 {"size": "28", "name": ""},
                                                                                 {"size": "1", "name": ""}]
    assert signatures["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert requests.get(server.url("/v1/models/mnist/versions/7"), timeout=10).status_code == 404


def test_predict_in_both_forms_on_both_signatures_equals_predict(served):
    server, files, floats = served["server"], served["files"], served["floats"]
    floats_file = Path(files[0]).parent / "floats.npy"
    np.save(floats_file, floats)
    both = predict_classes(served["model_dir"], *files, floats_file)  # PNGs to one signature, floats to the other
    expected, from_floats = both[:len(files)], both[len(files):]
    rows = server.predict({"instances": [b64(f) for f in files]})
    assert rows.status_code == 200 and rows.headers["X-Model-Version"] == Path(served["first"]).name
    assert [p["class_ids"] for p in rows.json()["predictions"]] == expected
    assert np.allclose([sum(p["probabilities"]) for p in rows.json()["predictions"]], 1.0, atol=1e-5)
    columns = server.predict({"signature_name": "serving_default", "inputs": [b64(f) for f in files]}).json()
    assert columns["outputs"]["class_ids"] == expected

    images_rows = server.predict({"signature_name": "images", "instances": floats.tolist()}).json()
    assert [p["class_ids"] for p in images_rows["predictions"]] == from_floats
    images_columns = server.predict({"signature_name": "images", "inputs": {"images": floats.tolist()}}).json()
    assert images_columns["outputs"]["class_ids"] == from_floats


def test_grpc_answers_as_rest_on_both_signatures_with_serving_s_codes(served):
    """A TF Serving gRPC client (tensorflow-serving-api's stubs): the same classes as `predict`, metadata and status
    as Serving gives them, Serving's codes for an unknown signature, a wrong dtype, an unknown model."""
    import grpc  # pylint: disable=import-outside-toplevel

    from tests.serve_grpc import code_of, GrpcClient  # pylint: disable=import-outside-toplevel  # TensorFlow

    server, files, floats = served["server"], served["files"], served["floats"]
    floats_file = Path(files[0]).parent / "floats_grpc.npy"
    np.save(floats_file, floats)
    both = predict_classes(served["model_dir"], *files, floats_file)
    client = GrpcClient(server.grpc_port)
    try:
        assert client.classes_of_pngs([Path(f).read_bytes() for f in files]) == both[:len(files)]
        assert client.classes_of_floats(floats) == both[len(files):]
        response, signatures = client.metadata()
        assert response.model_spec.version.value == int(Path(served["first"]).name)
        assert sorted(signatures.signature_def) == ["images", "serving_default"]
        assert [s.state for s in client.status().model_version_status] == [30]  # AVAILABLE
        request = client.predict_request({"images": floats}, "nope")
        assert code_of(client.predictions.Predict, request)[0].name == "FAILED_PRECONDITION"  # predict_util.cc
        request = client.predict_request({"images": np.array(["dark"])}, "images")
        assert code_of(client.predictions.Predict, request) == (
            grpc.StatusCode.INVALID_ARGUMENT, "Expects arg[0] to be float but string is provided")
        request = client.predict_request({"images": floats}, "images", name="other")
        assert code_of(client.predictions.Predict, request)[0].name == "NOT_FOUND"
    finally:
        client.close()


BAD = [
    ("malformed JSON", b'{"instances": [', "JSON Parse error: Invalid value. at offset: 15"),
    ("not an image", {"instances": [{"b64": "aGVsbG8="}]}, "Unknown image file format"),
    ("not base64", {"instances": [{"b64": "%%%"}]}, "Unable to base64 decode"),
    ("wrong shape", {"signature_name": "images", "instances": [[[0.5] * 28] * 28]}, "Cannot feed value of shape"),
    ("wrong dtype", {"signature_name": "images", "instances": [[[["dark"]] * 28] * 28]}, "is not of expected type"),
    ("no such signature", {"signature_name": "nope", "instances": [1]}, 'Serving signature name: "nope" not found'),
    ("too many instances", {"instances": [{"b64": "AA=="}] * 10001}, "Task size 10001 is larger than maximum"),
    ("over 10 MB", {"instances": [{"b64": "A" * (11 * 1024 * 1024)}]}, "larger than 10485760 bytes"),
]


@pytest.mark.parametrize("body,error", [(b, e) for _, b, e in BAD], ids=[name for name, _, _ in BAD])
def test_bad_requests_get_400_with_serving_s_error_body_and_the_server_goes_on(served, body, error):
    server = served["server"]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = requests.post(server.url("/v1/models/mnist:predict"), data=data, timeout=60)
    assert response.status_code == 400 and list(response.json()) == ["error"]
    assert error in response.json()["error"]
    assert server.predict({"instances": [b64(served["files"][0])]}).status_code == 200


def test_an_undecodable_image_gets_tensorflow_s_own_message(served):
    """As Serving's C++ session gives it: the kernel's message and its node, without TF 2.15's Python prefix."""
    answer = served["server"].predict({"instances": [{"b64": "aGVsbG8="}]})
    assert answer.json() == {"error": "Unknown image file format. One of JPEG, PNG, GIF, BMP required.\n\t "
                                      "[[{{node decode_image/DecodeImage}}]]"}


def test_classify_and_regress_answer_as_serving_does_for_a_predict_signature(served):
    server = served["server"]
    classify = requests.post(server.url("/v1/models/mnist:classify"), json={"examples": [{}]}, timeout=10)
    assert (classify.status_code, classify.json()) == (400, {"error": "Expected one or two output Tensors, found 3"})
    regress = requests.post(server.url("/v1/models/mnist:regress"), json={"examples": [{}]}, timeout=10)
    assert (regress.status_code, regress.json()) == (400, {"error": "Expected one output Tensor."})
    other = requests.post(server.url("/v1/models/other:predict"), json={"instances": [1]}, timeout=10)
    assert other.json() == {"error": "Servable not found for request: Latest(other)"}
    malformed = requests.put(server.url("/v1/models/mnist"), timeout=10)
    assert (malformed.status_code, malformed.json()) == (400, {"error": "Malformed request: PUT /v1/models/mnist"})


def test_concurrent_requests_are_answered_each_with_its_own_answer(served):
    server, files = served["server"], served["files"]
    alone = [server.predict({"instances": [b64(f)]}).json()["predictions"][0]["class_ids"] for f in files]
    bodies = [{"instances": [b64(f)]} for f in files] * 3 + [{"instances": [{"b64": "aGVsbG8="}]}] * 4
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(server.predict, bodies))
    assert [a.json()["predictions"][0]["class_ids"] for a in answers[:-4]] == alone * 3
    assert [a.status_code for a in answers[-4:]] == [400] * 4  # bad images fail their own requests only


def test_a_newer_export_is_served_without_a_restart_and_the_info_names_it(served):
    server = served["server"]
    newer = str(served["model_dir"] / "export" / "latest" / Path(served["newer"]).name)
    os.rename(served["newer"], newer)
    server.wait_for_version(int(Path(newer).name))
    status = server.wait_for_version(int(Path(served["first"]).name), state="END", timeout=30)
    assert status["model_version_status"][0]["version"] == Path(newer).name
    assert status["model_version_status"][1] == {"version": Path(served["first"]).name, "state": "END",
                                                  "status": {"error_code": "OK", "error_message": ""}}
    answer = server.predict({"instances": [b64(served["files"][0])]})
    assert answer.headers["X-Model-Version"] == Path(newer).name
    info = requests.get(server.url("/estimator-mnist/model"), timeout=10).json()
    assert info == {"name": "mnist", "version": int(Path(newer).name), "export": newer}  # no evaluation recorded
    shutil.rmtree(newer)  # deleted while loaded, as keep_newest deletes old exports
    time.sleep(0.5)  # a poll or two
    assert server.predict({"instances": [b64(served["files"][0])]}).headers["X-Model-Version"] == Path(newer).name
    assert "text/html" in requests.get(server.url("/"), timeout=10).headers["Content-Type"]
    assert requests.get(server.url("/static/page.js"), timeout=10).status_code == 200


def test_bad_model_path_and_busy_port_are_one_line_and_exit_2(tmp_path, served):
    started = time.monotonic()
    missing = run_cli("serve", "--model", str(tmp_path / "nonexistent"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no such directory" in missing.stderr and time.monotonic() - started < 5
    busy = run_cli("serve", "--model", str(served["model_dir"]), "--port", str(served["server"].port))
    assert busy.returncode == 2 and "already in use" in busy.stderr and len(busy.stderr.strip().splitlines()) == 1
    broken = tmp_path / "broken" / "123"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    unloadable = run_cli("serve", "--model", str(broken), "--port", str(free_ports(1)[0]), "--grpc-port", "0")
    assert unloadable.returncode == 2 and len(unloadable.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_it_with_130(served):
    """The module's server, stopped as a user stops it (this module's last test)."""
    started = time.monotonic()
    assert served["server"].stop() == 130 and time.monotonic() - started < 30
