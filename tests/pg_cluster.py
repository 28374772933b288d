"""A throwaway PostgreSQL cluster for the fleet tests: initdb, pg_ctl, a unix socket in a temp dir.

``start_cluster()`` runs ``initdb`` and ``pg_ctl start`` with the system's PostgreSQL binaries
(``/usr/lib/postgresql/<version>/bin``, or on ``PATH``), as an unprivileged user when running as
root (PostgreSQL refuses to run as root; CI runs as root), listening only on a unix socket in a
private temp dir (no TCP port to collide with). ``stop()`` stops it and removes the dir;
``pause()`` and ``resume()`` stop and start it again, its data kept (an outage).
It deletes old WAL segments at a checkpoint instead of recycling them (``wal_recycle=off``,
``wal_keep_size=0``), as a store that erases must (docs/fleet.md); ``data_dir`` is where its
files are. ``AGENTTEAM_TEST_PG_URL`` names a server to use instead (its user must be allowed to
create databases and roles).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final
from urllib.parse import quote

ENV_URL: Final = "AGENTTEAM_TEST_PG_URL"
_RUN_AS: Final = ("postgres", "nobody")


class ClusterUnavailable(Exception):
    """No PostgreSQL could be started here (no binaries, or it would not start)."""


def find_bin_dir() -> Path:
    """The directory holding initdb and pg_ctl (the newest installed version first)."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    raise ClusterUnavailable("no initdb/pg_ctl (install the postgresql package)")


class Cluster:
    """A running server: the superuser's URL, and databases made for a test."""

    def __init__(
        self,
        url: str,
        stop: list[str] | None,
        root: Path | None,
        user: str | None,
        start: list[str] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.url = url
        self._stop = stop
        self._root = root
        self._user = user
        self._start = start
        self._env = env

    @property
    def data_dir(self) -> Path | None:
        """The server's data directory (None: a server given by AGENTTEAM_TEST_PG_URL)."""
        return None if self._root is None else self._root / "data"

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server, as its superuser."""
        base, sep, query = self.url.partition("?")
        head = base.rsplit("/", 1)[0]
        return f"{head}/{name}{sep}{query}"

    def create_database(self, prefix: str = "fleet") -> str:
        """A fresh database (named ``prefix_<random>``); its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def pause(self) -> None:
        """Stop the server, its data kept: connections fail until ``resume()``."""
        if self._stop is None:
            raise ClusterUnavailable("not a server this process started")
        subprocess.run(self._stop, check=True, capture_output=True, user=self._user)

    def resume(self) -> None:
        """Start the server ``pause()`` stopped."""
        if self._start is None:
            raise ClusterUnavailable("not a server this process started")
        subprocess.run(
            self._start,
            check=True,
            capture_output=True,
            user=self._user,
            env=self._env,
            cwd=self._root,
        )

    def stop(self) -> None:
        if self._stop is not None:
            subprocess.run(self._stop, check=False, capture_output=True, user=self._user)
            self._stop = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in _RUN_AS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise ClusterUnavailable("running as root and no unprivileged user to run PostgreSQL as")


def start_cluster() -> Cluster:
    """Start a server (see the module docstring); ClusterUnavailable when it cannot."""
    given = os.environ.get(ENV_URL)
    if given:
        return Cluster(given, None, None, None)
    bin_dir = find_bin_dir()
    user = _run_as()
    # Short: a unix socket path must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="agpg-", dir="/tmp"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, sock):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    if user is not None:
        env["HOME"] = str(root)
    try:
        subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            user=user,
            env=env,
            cwd=root,
        )
        options = (
            f"-k {sock} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off -c max_connections=60 -c shared_buffers=32MB"
            # Erasure (docs/fleet.md): a checkpoint deletes old WAL segments, never reuses them.
            " -c wal_recycle=off -c wal_keep_size=0"
        )
        start = [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-t",
            "120",
            "-o",
            options,
            "-l",
            str(root / "server.log"),
            "start",
        ]
        subprocess.run(
            start,
            check=True,
            capture_output=True,
            user=user,
            env=env,
            cwd=root,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        log = root / "server.log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        stderr = getattr(exc, "stderr", b"") or b""
        shutil.rmtree(root, ignore_errors=True)
        raise ClusterUnavailable(f"PostgreSQL did not start: {exc} {stderr!r} {detail}") from exc
    stop = [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]
    url = f"postgresql://postgres@/postgres?host={quote(str(sock))}"
    return Cluster(url, stop, root, user, start, env)


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
