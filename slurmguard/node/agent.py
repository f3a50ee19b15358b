"""`slurmguard agent`: a resident node agent that answers "run hook X now" on a unix socket.

A hook process pays for starting Python and importing slurmguard on every job start (about
100 ms of a 130 ms prolog). The agent pays once: it keeps NVML initialised (and an NVML event
set for Xid critical errors), follows the kernel log, keeps the slow sources' last values
(filesystem probes, the /proc scan, IB counters, chrony, munge), and runs a hook when the thin
client (``slurmguard-agent-client``, C, prolog/sg_agent_client.c) asks.

One definition of a hook run: the agent calls :func:`slurmguard.node.hooks.execute`, the same
gather/evaluate/decide/act/report code the in-process ``slurmguard prolog`` runs, with its
own *source table*: each source is a callable that returns the live or cached value (or
raises the cached exception), so the checks, their timeouts, the decision, the drain (with
the same blast-radius permit) and the record are the very same code. Freshness contract
(docs/agent.md): sources not in ``agent.background`` are read at ask time (NVML queries, the
new kernel-log lines, /proc/meminfo); a slow source's value is used only when younger than
``agent.max_age``, else it is re-run inside the hook's budget (joining a read of it already
running, never starting a second). Nothing is read on a timer unless ``agent.refresh`` > 0:
an idle agent costs what its sleeping threads cost, not a loop of probes (the 5-s loop this
replaced cost more CPU than the agent saved; tests/bench/bench_agent_idle.py). The record
carries each source's age (``agent.ages``) and the agent's boot id.

The agent never drains on its own schedule, unless ``agent.healthcheck_interval`` > 0 (then
it *is* the HealthCheckProgram, and runs the same healthcheck on that interval).

Wire protocol (one request per connection, root only, socket mode 0600)::

    request:  SGA1 <hook> node=N job=J uid=U boot=B json=0|1 dry=0|1 config=PATH started=EPOCH\\n
    answer:   SGA1 <exit> <boot id> <len out> <len err>\\n<out bytes><err bytes>SGA1 END\\n
    refusal:  SGA1 unavailable <why>\\n

Empty values are allowed (``job=``). A client that gets anything else, a refusal, a boot id
other than the node's current one, or no whole answer within its timeout runs the hook
in-process instead (docs/agent.md, "Fallback").
"""

from __future__ import annotations

import io
import json
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmguard import unixsock
from slurmguard.errors import ConfigError, SlurmguardError
from slurmguard.sources import GatherContext

if TYPE_CHECKING:
    from slurmguard.config import Config

log = logging.getLogger("slurmguard.node.agent")

PROTO = "SGA1"
HOOKS = ("prolog", "epilog", "healthcheck")
MAX_REQUEST = 4096
_XID_RECORDS_KEPT = 10000
# Seconds an idle thread sleeps between looks (the kernel-log file's stat, a stop, NVML's
# event wait): each wake-up is Python work, paid every hour of the node's life.
FOLLOW_PERIOD = 2.0
REFRESH_MIN = 0.5  # s: the shortest agent.refresh period taken (config.py says so)


def socket_path(template: str, node: str) -> str:
    """``agent.socket`` with ``%n`` replaced by the node name (several slurmd per host)."""
    return template.replace("%n", node)


def read_boot_id(path: str) -> str:
    try:
        return Path(path).read_text().strip() or "unknown-boot"
    except OSError:
        return "unknown-boot"


@dataclass
class _Cached:
    at: float  # time.monotonic() when the gather started (the data is at least this old)
    gen: int = 0  # the config generation it was gathered with (a reload makes it unusable)
    value: Any = None
    exc: BaseException | None = None

    def result(self) -> Any:
        if self.exc is not None:
            raise self.exc
        return self.value


class _Inflight:
    """A slow-source read in progress: its outcome once ``done`` is set."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: _Cached | None = None


class KernelLogFollower:
    """The kernel log read incrementally: /dev/kmsg kept open, or a file followed by offset.

    :meth:`read` returns the same :class:`~slurmguard.adapters.kmsg.KernelLog` a hook's own
    read would (every Xid record still known, the last position, the identity), built from
    what was read since the agent started; the Xid check then applies its saved cursor
    exactly as in a hook process.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._key: tuple[str, str] | None = None
        self._fd: int | None = None
        self._records: deque[Any] = deque(maxlen=_XID_RECORDS_KEPT)
        self._last = -1
        self._scanned = 0
        self._since: tuple[str, int] | None = None
        self._tail = b""
        self._seen: tuple[int, int, int, int] | None = None  # the file's stat at the last read
        self.reads = 0  # whole reads done (ask time and follow loop): SGA1 status reports them

    def _reset(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._records.clear()
        self._last, self._scanned, self._since, self._tail = -1, 0, None, b""
        self._seen = None

    def fileno(self) -> int | None:
        return self._fd

    def file_changed(self, path: str) -> bool:
        """For the follow loop: whether the followed file may hold something not read yet
        (its inode, device, size or mtime differ from the last read's). One stat instead of a
        read each period; the ask-time read never asks this, it always reads."""
        try:
            st = os.stat(path)
        except OSError:
            return True  # gone: let read() say so
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self._seen

    def read(self, p: Mapping[str, Any]) -> Any:
        from slurmguard.adapters import kmsg

        source = str(p["source"])
        path = str(p["kmsg_path"] if source == "kmsg" else p["file"])
        with self.lock:
            if self._key != (source, path):
                self._reset()
                self._key = (source, path)
            self.reads += 1
            if source == "kmsg":
                if self._fd is None:
                    self._fd = kmsg.open_kmsg(path)
                recs, last, scanned = kmsg.read_kmsg_records(self._fd, path,
                                                             kmsg.boot_time(str(p["stat_path"])))
                self._records.extend(recs)
                self._last = max(self._last, last)
                self._scanned += scanned
                return kmsg.KernelLog("kmsg", read_boot_id(str(p["boot_id_path"])), self._last,
                                      tuple(self._records), {}, self._scanned)
            since = self._since if self._same_prefix(path) else None
            try:
                st = os.stat(path)
                seen: tuple[int, int, int, int] | None = (st.st_dev, st.st_ino, st.st_size,
                                                          st.st_mtime_ns)
            except OSError:
                seen = None
            got = kmsg._read_file(p, since)
            self._seen = seen  # taken before the read: a line written during it is read again
            if since is None:
                self._records.clear()
                self._scanned = 0
            self._records.extend(got.records)
            self._scanned += got.scanned
            self._since = (got.identity, got.end_pos)
            self._tail = self._read_tail(path, got.end_pos)
            return kmsg.KernelLog("file", got.identity, got.end_pos, tuple(self._records), {},
                                  self._scanned)

    _TAIL = 256

    def _read_tail(self, path: str, end: int) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, end - self._TAIL))
                return fh.read(min(end, self._TAIL))
        except OSError:
            return b""

    def _same_prefix(self, path: str) -> bool:
        """True when the file is the one read before, grown only: same inode, not shorter,
        and the bytes before the old end unchanged (a truncate-and-rewrite with the same
        inode, as logrotate's copytruncate does, is read afresh like a hook would)."""
        if self._since is None:
            return False
        try:
            st = os.stat(path)
        except OSError:
            return False
        identity, end = self._since
        if f"{st.st_dev}:{st.st_ino}" != identity or st.st_size < end:
            return False
        return self._read_tail(path, end) == self._tail

    def close(self) -> None:
        with self.lock:
            self._reset()


class NvmlHolder:
    """NVML initialised for the agent's lifetime, plus an event set for Xid critical errors.

    Holding one nvmlInit reference keeps the driver state open, so the ask-time gather's own
    nvmlInit/nvmlShutdown (slurmguard.adapters.nvml.gather, unchanged) only moves the
    reference count. Xid events are kept (GPU index, Xid, time) and reported in the answer;
    they do not change the verdict, which comes from the kernel log exactly as in a hook
    process (an NVML event is only delivered to a set that existed when it happened, so a
    hook process could never see it: using it would make the two paths disagree).
    """

    def __init__(self, cfg: Config, on_event: Callable[[int, int], None]) -> None:
        self.cfg = cfg
        self.on_event = on_event
        self.status = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv: Any = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(FOLLOW_PERIOD + 1.0)

    def _run(self) -> None:
        from slurmguard.adapters import nvml

        try:
            import pynvml as nv

            nvml._load_library(nv, str(self.cfg["checks.gpu.nvml_library"] or ""))
            nv.nvmlInit()
        except Exception as exc:  # no GPU, no driver: the hooks report it as they always do
            self.status = f"not initialised: {exc}"
            return
        self._nv = nv
        try:
            if not self.cfg["agent.nvml_events"]:
                self.status = "initialised (events off)"
                self._stop.wait()
                return
            try:
                evset = nv.nvmlEventSetCreate()
                handles = {}
                for i in range(nv.nvmlDeviceGetCount()):
                    try:
                        h = nv.nvmlDeviceGetHandleByIndex(i)
                        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, evset)
                        handles[i] = h
                    except nv.NVMLError:
                        continue  # a lost GPU: the gather reports it at ask time
            except nv.NVMLError as exc:
                self.status = f"initialised, no events: {exc}"
                self._stop.wait()
                return
            self.status = f"initialised, Xid events on {len(handles)} GPUs"
            while not self._stop.is_set():
                try:
                    data = nv.nvmlEventSetWait_v2(evset, int(FOLLOW_PERIOD * 1000))
                except nv.NVMLError as exc:
                    if exc.value != nv.NVML_ERROR_TIMEOUT:
                        self._stop.wait(1.0)
                    continue
                try:
                    index = nv.nvmlDeviceGetIndex(data.device)
                except nv.NVMLError:
                    index = -1
                self.on_event(int(index), int(data.eventData))
            try:
                nv.nvmlEventSetFree(evset)
            except nv.NVMLError:
                pass
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def _config_stamp(files: list[str]) -> tuple[Any, ...]:
    out = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((f, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((f, None, None))
    return tuple(out)


class Agent:
    """The agent's state: config, caches, followers; :meth:`handle` answers one request."""

    def __init__(self, config_path: str | None, node: str) -> None:
        from slurmguard import config as config_mod

        self.config_path = config_path or os.environ.get("SLURMGUARD_CONFIG") or None
        self.node = node
        self._config_mod = config_mod
        self.base = config_mod.load(self.config_path)
        self._stamp = self._current_stamp()
        self.cfg = self.base.for_node(node)
        self.boot_path = str(self.cfg["checks.xid.boot_id_path"])
        self.boot_id = read_boot_id(self.boot_path)
        self.run_lock = threading.Lock()  # one hook run at a time (state.json, NVML)
        self.cache_lock = threading.Lock()
        self.cache: dict[tuple[str, str], _Cached] = {}
        self.gen = 0
        # A slow source being read now (by a hook or the background refresh): its end, which
        # a second reader waits on instead of starting another read (a hung probe runs once).
        self._inflight: dict[tuple[str, str], _Inflight] = {}
        self.reads: dict[str, int] = {}  # slow-source reads started, by source: SGA1 status
        self.nodes = {node}
        self.kernel_log = KernelLogFollower()
        self.xid_events: deque[tuple[int, int, float]] = deque(maxlen=64)
        self.nvml = NvmlHolder(self.cfg, self._on_xid_event)
        self.stop = threading.Event()
        self.started = time.time()
        # Rounds completed by the background, scheduled-healthcheck and kernel-log loops: `SGA1
        # status` reports them, so a caller can wait until the agent had its chance (tests).
        self.passes = {"background": 0, "healthcheck": 0, "follow": 0}

    # -- config ---------------------------------------------------------------------------------
    def _current_stamp(self) -> tuple[Any, ...]:
        main = self.base.sources[0] if self.base.sources else None
        files = list(self.base.sources)
        if main:
            confd = Path(main).parent / "conf.d"
            if confd.is_dir():
                files = sorted(set(files) | {str(f) for f in confd.glob("*.toml")})
        return _config_stamp(files)

    def config_for(self, node: str) -> Any:
        """The config for ``node``, reloaded when a config file changed (caches dropped)."""
        if self._current_stamp() != self._stamp:
            base = self._config_mod.load(self.config_path)  # ConfigError: the client falls back
            self.base, self._stamp = base, self._current_stamp()
            self.cfg = base.for_node(self.node)
            with self.cache_lock:
                self.cache.clear()
                self.gen += 1
        return self.base.for_node(node) if node != self.node else self.cfg

    # -- sources --------------------------------------------------------------------------------
    def _on_xid_event(self, gpu: int, xid: int) -> None:
        self.xid_events.append((gpu, xid, time.monotonic()))
        log.warning("NVML Xid event: GPU %d Xid %d", gpu, xid)
        try:  # pull the driver's line into the follower now
            self.kernel_log.read(self.cfg.section("checks.xid"))
        except Exception:  # noqa: BLE001
            pass

    def _gather_into(self, key: tuple[str, str], target: Any, cfg: Config,
                     ctx: GatherContext) -> _Cached:
        from slurmguard.node.runner import resolve_source

        with self.cache_lock:
            gen = self.gen
        c = _Cached(time.monotonic(), gen)
        with self.cache_lock:
            self.reads[key[1]] = self.reads.get(key[1], 0) + 1
        try:
            c.value = resolve_source(target)(cfg, ctx)
        except BaseException as exc:  # noqa: BLE001 - cached, raised again in the hook's run
            c.exc = exc
        with self.cache_lock:
            old = self.cache.get(key)
            if c.gen == self.gen and (old is None or old.at <= c.at):
                self.cache[key] = c  # a value of an older config is never stored
        return c

    def _refresh(self, key: tuple[str, str], target: Any, cfg: Config,
                 ctx: GatherContext) -> _Cached:
        """Read a slow source now, or wait for the read of it already running (until
        ``ctx.deadline``: the hook's gather abandons a source it waited too long for, as it
        does in a hook process), so a hung probe is never run twice at once."""
        with self.cache_lock:
            running = self._inflight.get(key)
            if running is None:
                mine = self._inflight[key] = _Inflight()
        if running is None:
            try:
                mine.outcome = self._gather_into(key, target, cfg, ctx)
                return mine.outcome
            finally:
                with self.cache_lock:
                    del self._inflight[key]
                mine.done.set()
        if running.done.wait(max(0.0, ctx.deadline - time.monotonic())) and running.outcome:
            return running.outcome
        raise TimeoutError(f"{key[1]}: an earlier read of it is still running")

    def sources_for(self, cfg: Config, node: str, job_uid: int | None,
                    ages: dict[str, float]) -> dict[str, Any]:
        """The source table of one hook run: name -> callable(cfg, ctx)."""
        from slurmguard.node.runner import registry, resolve_source

        table = registry(cfg)[1]
        background = set(cfg["agent.background"])
        max_age = float(cfg["agent.max_age"])
        out: dict[str, Any] = {}

        def live(name: str, target: Any) -> Callable[[Any, GatherContext], Any]:
            def get(c: Any, ctx: GatherContext) -> Any:
                ages[name] = 0.0
                return resolve_source(target)(c, ctx)
            return get

        def kernel_log(c: Any, ctx: GatherContext) -> Any:
            from slurmguard.adapters import kmsg

            ages["kmsg"] = 0.0
            p = c.section("checks.xid")
            return kmsg.finish(p, self.kernel_log.read(p))

        def cached(name: str, target: Any) -> Callable[[Any, GatherContext], Any]:
            def get(c: Any, ctx: GatherContext) -> Any:
                with self.cache_lock:
                    hit = self.cache.get((node, name))
                    current = self.gen
                now = time.monotonic()
                if hit is not None and hit.gen == current and now - hit.at <= max_age:
                    ages[name] = round(now - hit.at, 3)
                    return hit.result()
                ages[name] = 0.0  # stale or absent: run it now, inside this hook's budget
                return self._refresh((node, name), target, c, ctx).result()
            return get

        for name, target in table.items():
            if name == "kmsg" and cfg["checks.xid.source"] in ("kmsg", "file"):
                out[name] = kernel_log
            elif name in background and not (name == "procs" and job_uid is not None):
                # The epilog's /proc scan looks for the finished job's processes: always live.
                out[name] = cached(name, target)
            else:
                out[name] = live(name, target)
        return out

    def background_once(self) -> None:
        """Refresh every background source some hook of a known node reads (one not being
        read already: never two reads of the same at once)."""
        from slurmguard.node.runner import registry, select_checks

        for node in sorted(self.nodes):
            try:
                cfg = self.config_for(node)
                available, table = registry(cfg)
                needed: set[str] = set()
                for hook in HOOKS:
                    needed |= {s for c in select_checks(cfg, hook, (), available) for s in c.sources}
            except SlurmguardError as exc:
                log.warning("background: %s", exc)
                continue
            timeout = float(cfg["hooks.check_timeout"])
            for name in sorted(needed & set(cfg["agent.background"])):
                key = (node, name)
                with self.cache_lock:
                    if key in self._inflight:
                        continue  # still running (a hung probe): never stack them up
                ctx = GatherContext(node=node, hook="agent", deadline=time.monotonic() + timeout)

                def work(key: tuple[str, str] = key, target: Any = table[name], cfg: Config = cfg,
                         ctx: GatherContext = ctx) -> None:
                    try:
                        self._refresh(key, target, cfg, ctx)
                    except TimeoutError:
                        pass  # another read of it started meanwhile: that one is kept

                threading.Thread(target=work, name=f"bg-{name}", daemon=True).start()

    def _background_loop(self) -> None:
        """Only with ``agent.refresh`` > 0 (default 0: a hook reads a slow source older than
        ``agent.max_age`` itself): refresh the slow sources on that period."""
        while not self.stop.is_set():
            self.background_once()
            self.passes["background"] += 1
            self.stop.wait(max(REFRESH_MIN, float(self.cfg["agent.refresh"])))

    def _follow_loop(self) -> None:
        """Keep reading the kernel log so nothing is lost to a ring-buffer wrap between asks."""
        while not self.stop.is_set():
            p = self.cfg.section("checks.xid")
            if p["source"] not in ("kmsg", "file"):
                self.stop.wait(5.0)
                continue
            fd = self.kernel_log.fileno()
            try:
                if fd is not None:  # /dev/kmsg: woken by a record (or the period, for stop)
                    if select.select([fd], [], [], FOLLOW_PERIOD)[0]:
                        self.kernel_log.read(p)
                else:  # a file: one stat a period, a read only when it changed
                    self.stop.wait(FOLLOW_PERIOD)
                    if p["source"] == "kmsg" or self.kernel_log.file_changed(str(p["file"])):
                        self.kernel_log.read(p)
            except (SlurmguardError, OSError, ValueError):
                self.stop.wait(5.0)
            finally:
                self.passes["follow"] += 1

    def _healthcheck_loop(self) -> None:
        interval = float(self.cfg["agent.healthcheck_interval"])
        while not self.stop.wait(interval):
            try:
                _, _, err = self.run("healthcheck", self.node, None, None, as_json=False,
                                     dry_run=False, started=time.time())
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("scheduled healthcheck failed")
                continue
            finally:
                self.passes["healthcheck"] += 1
            for line in err.splitlines():
                log.info("scheduled %s", line)

    # -- one hook run ---------------------------------------------------------------------------
    def run(self, hook: str, node: str, job_id: str | None, job_uid: int | None, *,
            as_json: bool, dry_run: bool, started: float) -> tuple[int, str, str]:
        """Run ``hook`` for ``node`` exactly as `slurmguard <hook>` would: (exit, out, err)."""
        from slurmguard.node import hooks

        cfg = self.config_for(node)
        self.nodes.add(node)
        out, err = io.StringIO(), io.StringIO()
        ages: dict[str, float] = {}
        with self.run_lock:
            t0 = time.monotonic() - min(max(0.0, time.time() - started), 60.0)
            sources = self.sources_for(cfg, node, job_uid, ages)
            now = time.monotonic()
            extra = {"agent": {"boot_id": self.boot_id, "pid": os.getpid(), "ages": ages,
                               "nvml": self.nvml.status,
                               "xid_events": [{"gpu": g, "xid": x, "age": round(now - t, 3)}
                                              for g, x, t in self.xid_events]}}
            code = hooks.execute(cfg, hook, node, as_json=as_json, out=out, err=err,
                                 dry_run=dry_run, t0=t0, job_id=job_id, job_uid=job_uid,
                                 sources=sources, extra=extra)
        return code, out.getvalue(), err.getvalue()

    def status(self) -> dict[str, Any]:
        """What `SGA1 status` answers: identity, loop rounds and the reads done so far, by
    source (``kmsg``: the kernel log's); runs no hook, reads nothing."""
        with self.cache_lock:
            reads = dict(self.reads)
        reads["kmsg"] = self.kernel_log.reads
        return {"node": self.node, "boot_id": self.boot_id, "pid": os.getpid(),
                "uptime": round(time.time() - self.started, 3), "passes": dict(self.passes),
                "reads": reads, "nvml": self.nvml.status}

    def handle(self, line: str) -> bytes:
        """Parse one request line and answer it (a refusal when the request does not fit)."""
        if line.rstrip("\n") == f"{PROTO} status":
            return answer(0, self.boot_id, json.dumps(self.status()), "")
        try:
            req = parse_request(line)
        except ValueError as exc:
            return refusal(str(exc))
        if req["boot"] != self.boot_id:
            return refusal(f"stale boot id: agent started in boot {self.boot_id}")
        mine = os.path.realpath(self.config_path) if self.config_path else ""
        theirs = os.path.realpath(req["config"]) if req["config"] else ""
        if mine != theirs:
            return refusal(f"config {theirs or '(default)'} is not the agent's {mine or '(default)'}")
        current = read_boot_id(self.boot_path)
        if current != self.boot_id:
            self.stop.set()  # rebooted under us (or a restored snapshot): restart afresh
            return refusal("boot id changed since the agent started")
        t = time.monotonic()
        try:
            code, out, err = self.run(req["hook"], req["node"] or self.node, req["job"] or None,
                                      int(req["uid"]) if req["uid"].isdigit() else None,
                                      as_json=req["json"] == "1", dry_run=req["dry"] == "1",
                                      started=float(req["started"] or time.time()))
        except ConfigError as exc:
            return refusal(f"config error: {exc.message}")
        except Exception as exc:  # noqa: BLE001 - the in-process path will say it properly
            log.exception("hook run failed")
            return refusal(f"internal error: {type(exc).__name__}: {exc}")
        log.info("answered %s for %s (job %s): exit %d in %.1f ms", req["hook"],
                 req["node"] or self.node, req["job"] or "-", code, (time.monotonic() - t) * 1000)
        return answer(code, self.boot_id, out, err)


def parse_request(line: str) -> dict[str, str]:
    parts = line.rstrip("\n").split(" ")
    if len(parts) < 2 or parts[0] != PROTO:
        raise ValueError("not an SGA1 request")
    if parts[1] not in HOOKS:
        raise ValueError(f"unknown hook {parts[1]!r}")
    req = {"hook": parts[1], "node": "", "job": "", "uid": "", "boot": "", "json": "0",
           "dry": "0", "config": "", "started": ""}
    for item in parts[2:]:
        key, sep, value = item.partition("=")
        if not sep or key not in req or key == "hook":
            raise ValueError(f"bad request field {item[:40]!r}")
        req[key] = value
    try:
        float(req["started"] or 0)
    except ValueError:
        raise ValueError(f"bad request field started={req['started'][:40]!r}") from None
    return req


def answer(code: int, boot_id: str, out: str, err: str) -> bytes:
    o, e = out.encode(), err.encode()
    return f"{PROTO} {code} {boot_id} {len(o)} {len(e)}\n".encode() + o + e + f"{PROTO} END\n".encode()


def refusal(why: str) -> bytes:
    return f"{PROTO} unavailable {' '.join(why.split())[:300]}\n".encode()


def bind_socket(path: str) -> socket.socket:
    """A unix stream socket at ``path``, mode 0600, in a directory not writable by others;
    a stale socket is replaced, a live one (another agent) refused (slurmguard.unixsock)."""
    return unixsock.bind_private(path, key="agent.socket", server="agent")


def serve(agent: Agent, path: str, *, ready: Callable[[], None] | None = None) -> None:
    """Answer requests on ``path`` until ``agent.stop`` is set (SIGTERM, reboot detected)."""
    srv = bind_socket(path)
    me = os.geteuid()
    threads = [threading.Thread(target=agent._follow_loop, name="kernel-log", daemon=True)]
    if float(agent.cfg["agent.refresh"]) > 0:
        threads.append(threading.Thread(target=agent._background_loop, name="background",
                                        daemon=True))
    if float(agent.cfg["agent.healthcheck_interval"]) > 0:
        threads.append(threading.Thread(target=agent._healthcheck_loop, name="healthcheck",
                                        daemon=True))
    agent.nvml.start()
    try:
        try:
            agent.kernel_log.read(agent.cfg.section("checks.xid"))
        except Exception as exc:  # noqa: BLE001 - the hooks report the source as they would
            log.info("kernel log: %s", exc)
        for t in threads:
            t.start()
        log.info("listening on %s (node %s, boot %s)", path, agent.node, agent.boot_id)
        if ready:
            ready()

        def one(conn: socket.socket) -> None:
            with conn:
                try:
                    conn.settimeout(2.0)
                    uid = unixsock.peer_uid(conn)
                    if uid not in (0, me):
                        conn.sendall(refusal(f"uid {uid} may not ask"))
                        return
                    line = unixsock.read_line(conn, MAX_REQUEST)
                    if line is None:
                        return
                    conn.settimeout(None)
                    conn.sendall(agent.handle(line))
                except OSError:
                    return  # the client gave up (its timeout): it runs the hook itself

        # FOLLOW_PERIOD: how soon a stop (SIGTERM, reboot seen) is noticed
        unixsock.accept_loop(srv, lambda conn: threading.Thread(
            target=one, args=(conn,), name="ask", daemon=True).start(), agent.stop, FOLLOW_PERIOD)
    finally:
        srv.close()  # accept_loop closed it, unless the start above failed
        unixsock.remove(path)
        agent.nvml.stop()
        agent.kernel_log.close()


def ask(path: str, line: str, timeout: float) -> bytes:
    """Send one request and return the raw answer (tests and `slurmguard agent --ask`)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(line.encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk
    finally:
        s.close()
