"""`serve`'s bad input, each one line and exit 2 before TensorFlow would load an export: the flags, the model
path, the port; and the one warning for an address other than loopback."""

import errno
import os
import re
import socket

import pytest

from estimator_mnist import cli
from estimator_mnist.errors import UsageError
from estimator_mnist.storage import local
from estimator_mnist.tf_model.serve import server
from tests.helpers import error_pattern


@pytest.mark.parametrize("flags,error", [
    (["--port", "0"], "'0' is not a positive whole number"),
    (["--port", "70000"], "'70000' is not a port"),
    (["--name", "a/b"], "'a/b' cannot be a model name"),
    (["--max-batch-size", "0"], "'0' is not a positive whole number"),
    (["--batch-timeout-ms", "-1"], "'-1' is not a wait from 0 to 1000 ms"),
    (["--grpc-port", "70000"], "'70000' is not a port"),
    (["--request-timeout-ms", "0"], "'0' is not a positive whole number"),
    (["--max-body-bytes", "big"], "'big' is not a positive whole number"),
    (["--drain-secs", "-1"], "'-1' is not a time from 0 to 3600 s"),
    (["--drain-delay-secs", "soon"], "'soon' is not a time from 0 to 3600 s"),
    (["--max-images-per-request", "0"], "'0' is not a positive whole number"),
    (["--trusted-proxy", "lb.local"], "--trusted-proxy 'lb.local' is not an IP address"),
    (["--max-client-images", "10", "--max-images-per-request", "20"],
     "--max-client-images 10 is below --max-images-per-request 20"),
])
def test_each_bad_flag_exits_2_naming_it(tmp_path, capsys, flags, error):
    assert cli.main(["serve", "--model", str(tmp_path), *flags]) == 2  # argparse's errors are one line too
    err = capsys.readouterr().err
    assert error in err and len(err.strip().splitlines()) == 1


def test_a_missing_model_path_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["serve", "--model", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(error_pattern(server.ERR_NO_MODEL), err.strip().removeprefix("estimator-mnist: error: "))


def test_an_unreadable_model_path_is_named(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir(mode=0)

    def refused(path):  # as for a user who may not read it (root may): the storage layer's listing is refused
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(local.os, "listdir", refused)
    with pytest.raises(UsageError, match="model: cannot be read \\(permission denied\\)"):
        server.check_model_path(str(tmp_path / "model"))


def test_a_busy_port_is_named_with_the_fix():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 cannot be used \\(already in use\\); give "
                                             "another with --port"):
            server.listen("127.0.0.1", port)
    with pytest.raises(UsageError, match="unknown host"):
        server.listen("no-such-host.invalid", 8501)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 cannot be used \\(already in use\\); give "
                                             "another with --grpc-port"):
            server.check_grpc_port("127.0.0.1", port)


def test_only_an_address_other_than_loopback_gets_the_warning():
    assert server.exposure_warning("127.0.0.1", 8501) == server.exposure_warning("localhost", 8501) == ""
    assert server.exposure_warning("::1", 8501) == ""
    warning = server.exposure_warning("0.0.0.0", 8501)
    assert len(warning.splitlines()) == 1 and "anyone who can reach this port can use the model" in warning


def test_the_flags_become_one_frozen_settings_object():
    import dataclasses  # pylint: disable=import-outside-toplevel

    from estimator_mnist.serve_settings import ServeSettings  # pylint: disable=import-outside-toplevel
    args = cli.build_parser().parse_args(["serve", "--model", "m", "--trusted-proxy", "10.0.0.5",
                                          "--batch-timeout-ms", "3", "--request-timeout-ms", "1500"])
    settings = ServeSettings.from_args(args)
    assert (settings.trusted_proxies, settings.batch_timeout_secs, settings.request_timeout_secs) == (
        ("10.0.0.5",), 0.003, 1.5)
    assert settings.max_images_per_request == 10000 and settings.switch_interval_secs == 0.001
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.port = 1  # type: ignore[misc]
