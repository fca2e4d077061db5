"""An S3 endpoint that cannot be reached at all is said at once (``_buckets.refused``); what
may pass is left to boto's and s3fs's retries, but for the bounds of the probe and of each
upload on an endpoint that never answers. The refused connection itself runs for real in
``tests/integration/test_object_store.py`` (and the doctest); here, a listening socket and the
resolver's answers."""

import contextlib
import socket
import threading
from typing import Any, Callable, Iterator, List, Tuple

import pytest

from det_lightning.pytorch._buckets import refused


@contextlib.contextmanager
def _silent_endpoint(accepted: List[socket.socket]) -> Iterator[int]:
    """A port on loopback that accepts connections (into ``accepted``) and never answers;
    closed, with every connection, at the end."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)

        def accept() -> None:
            try:
                while True:
                    accepted.append(server.accept()[0])  # kept open, never answered
            except OSError:
                return

        threading.Thread(target=accept, daemon=True).start()
        try:
            yield server.getsockname()[1]
        finally:
            for connection in accepted:
                connection.close()


def _fake_credentials(monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    """Keys for the silent endpoint (never checked), and a cache of the test's own."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("DET_LIGHTNING_CACHE_DIR", cache)


def _ended(call: Callable[[], Any]) -> Tuple[bool, List[BaseException]]:
    """Runs ``call`` in a thread for at most 120 s (generous: a loaded machine; unbounded, it
    never ends): whether it ended, and what it raised."""
    raised: List[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001  what the thread ended with, to check
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    return not thread.is_alive(), raised


def test_an_endpoint_that_accepts_connections_is_not_refused() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert refused("s3", (("endpoint_url", f"http://127.0.0.1:{port}"),)) is None


def test_a_closed_port_is_refused_and_named() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]  # bound, not listening: connections are refused
        said = refused("s3", (("endpoint_url", f"http://127.0.0.1:{port}"),))
    assert (
        said == f"nothing accepts connections at http://127.0.0.1:{port} (ConnectionRefusedError)"
    )


@pytest.mark.parametrize("errno, definite", [(socket.EAI_NONAME, True), (socket.EAI_AGAIN, False)])
def test_only_a_name_that_does_not_exist_is_definite(
    monkeypatch: pytest.MonkeyPatch, errno: int, definite: bool
) -> None:
    def resolver_says(*_: Any, **__: Any) -> None:
        raise socket.gaierror(errno, "the resolver's answer")

    monkeypatch.setattr(socket, "create_connection", resolver_says)
    said = refused("s3", (("endpoint_url", "https://minio.example:9000"),))
    assert (said is not None) == definite
    if definite:
        assert said is not None and "https://minio.example:9000 does not resolve" in said


def test_the_environments_endpoint_counts_and_aws_own_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
        assert refused("s3", ()) is not None
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert refused("s3", ()) is None  # AWS's own endpoint: never probed here


def test_an_endpoint_that_accepts_but_never_answers_is_said_within_the_probes_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A listening socket that accepts connections and never answers: botocore's PUT waits
    for "100 Continue", which no read timeout bounds, within s3fs's and botocore's retries (the
    start once hung for over 13 minutes). The probe gives up after its bound and says so."""
    import time

    from det_lightning.pytorch import _buckets
    from det_lightning.pytorch._remote import ObjectStore

    monkeypatch.setattr(_buckets, "PROBE_TIMEOUT_S", 2.0)
    _fake_credentials(monkeypatch, str(tmp_path))
    accepted: List[socket.socket] = []
    with _silent_endpoint(accepted) as port:
        store = ObjectStore("s3://bucket/run", (("endpoint_url", f"http://127.0.0.1:{port}"),))
        started = time.monotonic()
        said = store.problem()
        waited = time.monotonic() - started
    assert said is not None and "did not finish within 2 s" in said, said
    assert f"http://127.0.0.1:{port}" in said and "Nothing was trained" in said, said
    assert accepted, "the endpoint was never reached"
    assert waited < 60, waited  # the bound, not botocore's minutes (generous: a loaded machine)


def test_an_upload_to_an_endpoint_that_stops_answering_is_given_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The same silent endpoint, met by a checkpoint's upload (after a probe that passed):
    each file is given up after its bound (``upload_bound``), so the trial stops with an
    error naming the checkpoint, instead of waiting for "100 Continue" for ever."""
    from det_lightning import errors
    from det_lightning.pytorch import _remote
    from det_lightning.pytorch._remote import ObjectStore

    monkeypatch.setattr(_remote, "UPLOAD_GRACE_S", 2.0)
    _fake_credentials(monkeypatch, str(tmp_path / "cache"))
    local = tmp_path / "staged"
    local.mkdir()
    (local / "metadata.json").write_text("{}")
    (local / "state_dict.pth").write_bytes(b"x" * 1000)
    accepted: List[socket.socket] = []
    with _silent_endpoint(accepted) as port:
        store = ObjectStore("s3://bucket/run", (("endpoint_url", f"http://127.0.0.1:{port}"),))
        # botocore's client first (seconds on a loaded machine): the bound is the upload's.
        store.filesystem().connect()

        uuid = "0" * 8 + "-0000-0000-0000-" + "0" * 12
        finished, raised = _ended(lambda: store.publish(uuid, local))
    assert finished, "the upload is still waiting on the silent endpoint"
    assert accepted, "the endpoint was never reached"
    (error,) = raised
    assert isinstance(error, errors.CheckpointStorageError), repr(error)
    assert "UploadStalled" in str(error) and "within 2 s" in str(error), str(error)
    assert "DET_LIGHTNING_UPLOAD_MIN_MBPS" in str(error) and "Training stopped" in str(error)


def test_a_bad_upload_rate_names_the_variable() -> None:
    from det_lightning import errors
    from det_lightning.pytorch._remote import upload_bound

    for given in ("fast", "0", "-1"):
        with pytest.raises(errors.CheckpointStorageError, match="DET_LIGHTNING_UPLOAD_MIN_MBPS"):
            upload_bound(10, {"DET_LIGHTNING_UPLOAD_MIN_MBPS": given})


def test_the_experiments_record_on_a_silent_endpoint_is_an_error_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``experiment.json`` is written before any trial (and so before the probe): on the
    silent endpoint its existence check is bounded too, and the experiment stops with an error
    naming the object, instead of waiting out botocore's retries."""
    from det_lightning import errors
    from det_lightning.pytorch import _buckets
    from det_lightning.pytorch._remote import ObjectStore

    monkeypatch.setattr(_buckets, "PROBE_TIMEOUT_S", 2.0)
    _fake_credentials(monkeypatch, str(tmp_path))
    accepted: List[socket.socket] = []
    with _silent_endpoint(accepted) as port:
        store = ObjectStore("s3://bucket/exp", (("endpoint_url", f"http://127.0.0.1:{port}"),))
        store.filesystem().connect()

        finished, raised = _ended(lambda: store.write_once("experiment.json", b"{}"))
    assert finished, "the record's write is still waiting on the silent endpoint"
    (error,) = raised
    assert isinstance(error, errors.CheckpointStorageError), repr(error)
    said = str(error)
    assert "Writing s3://bucket/exp/experiment.json failed" in said, said
    assert "did not answer within 2 s" in said and "Nothing was trained" in said, said
