"""The shared ingest token: a file readable only by root/SlurmUser."""

from __future__ import annotations

import os
import stat

from slurmguard.errors import ConfigError


def load_token(path: str, *, job: bool = False, key: str = "") -> str:
    """Read the token; refuse a missing, empty, non-regular or world-accessible file.

    A world-readable token lets any user on any node forge results and get nodes drained,
    so serve refuses to start rather than warn. The *job* token (``job=True``,
    notice.job_token_file) is meant to be readable by jobs: it only lets a job report slow
    nodes, which never drains anything, so it may be world-readable, not world-writable.
    """
    key = key or ("notice.job_token_file" if job else "serve.token_file")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path} does not exist (create it with mode 0600)") from None
    except OSError as exc:
        raise ConfigError(f"{key}: {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{key}: {path} is not a regular file")
    if job and st.st_mode & stat.S_IWOTH:
        raise ConfigError(f"{key}: {path} is world-writable; run chmod 0644 {path}")
    if not job and st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise ConfigError(f"{key}: {path} is world-accessible (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}); run chmod 0600 {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise ConfigError(f"{key}: {path} holds no token of at least 16 characters")
    return token
