"""Atelier's web GUI.

    python app.py                       # http://127.0.0.1:7860, this machine only
    python app.py --demo                # build the tiny demo model + data and preselect the demo preset
    ATELIER_PASSWORD="$(cat ~/.atelier-password)" python app.py --listen --username me   # from the network, with login
    python app.py --share --auth-file users.txt                 # public gradio link, with login
"""
from __future__ import annotations

import argparse
import atexit
import ipaddress
import os
import re
import signal
import socket
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

REPO = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Atelier: a web GUI for Stable Diffusion training.")
    p.add_argument("--listen", nargs="?", const="0.0.0.0", default="127.0.0.1", metavar="ADDR",
                   help="address to serve on (flag alone: 0.0.0.0, all interfaces)")
    p.add_argument("--server-port", type=int, default=int(os.environ.get("ATELIER_PORT", 7860)))
    p.add_argument("--share", action="store_true", help="also serve through a public gradio share link")
    p.add_argument("--headless", action="store_true", help="never open a browser")
    p.add_argument("--username", help="login name (with --password)")
    p.add_argument("--password", help="login password (prefer --auth-file or ATELIER_PASSWORD)")
    p.add_argument("--auth-file", type=Path, help="file of user:password lines")
    p.add_argument("--no-auth", action="store_true", help="allow --share / --listen without login (not advised)")
    p.add_argument("--root-path", default="", help="URL prefix when served behind a reverse proxy")
    p.add_argument("--runs-dir", type=Path, default=REPO / "runs", help="where run directories are written")
    p.add_argument("--datasets-dir", type=Path, default=None,
                   help="where datasets uploaded from the page go (default: datasets/ beside the runs folder)")
    p.add_argument("--models-dir", type=Path, default=None,
                   help="a folder of base models, VAEs and LoRAs the Browse buttons list (default: models/ beside "
                        "the runs folder)")
    p.add_argument("--presets-dir", type=Path, default=Path.home() / ".config" / "atelier" / "presets",
                   help="where user presets are saved")
    p.add_argument("--allowed-root", dest="allowed_roots", action="append", type=Path, default=None,
                   help="folder that paths typed into the page must lie under, and the only folders its Browse "
                        "buttons list; repeatable (default: anywhere when served on this machine only, and Browse "
                        "lists the datasets, runs and models folders and the home folder; the home folder and this "
                        "repo when exposed)")
    p.add_argument("--allow-hub-models", action="store_true",
                   help="while paths are confined (--allowed-root, or an exposed GUI), also take models named by hub "
                        "id (owner/name): they download into this machine's cache with its HF_TOKEN, and a caption "
                        "model's trust_remote_code runs the repository's code (default: local models only)")
    p.add_argument("--trusted-proxy", dest="trusted_proxies", action="append", type=_proxy_address, default=[],
                   metavar="ADDR", help="address (or network, e.g. 10.0.0.0/8) of a reverse proxy whose "
                   "X-Forwarded-For header names the real client; repeatable (default: none, every request counts "
                   "as coming from the address it connects from, which the login throttle keys on)")
    uploads = p.add_argument_group("dataset uploads from the page")
    uploads.add_argument("--max-upload-size", type=_size, default=_size("8GB"), metavar="SIZE",
                         help="largest file one upload may send, e.g. 500MB or 20GB (default 8GB)")
    uploads.add_argument("--max-unpacked-size", type=_size, default=_size("20GB"), metavar="SIZE",
                         help="most bytes one upload may hold once its zips are unpacked (default 20GB)")
    uploads.add_argument("--max-upload-files", type=_positive_int, default=100_000, metavar="N",
                         help="most files one upload may hold (default 100000)")
    uploads.add_argument("--max-unzip-ratio", type=float, default=100.0, metavar="R",
                         help="refuse a zip, or a member of one, that unpacks to more than R times its packed size "
                              "(checked above 16 MB unpacked; default 100): a zip bomb")
    p.add_argument("--demo", action="store_true", help="build the demo model and data, preselect the demo preset")
    return p.parse_args(argv)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # 1024-based, as Gradio's


def _size(text: str) -> int:
    """Bytes of a size like 500MB, 8GB, 1.5GiB or 1000000."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)I?B?\s*", text.upper())
    if not match or float(match[1]) <= 0:
        raise argparse.ArgumentTypeError(f"got {text!r}; give a size like 500MB or 8GB")
    return int(float(match[1]) * _UNITS[match[2]])


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; give a whole number of at least 1")
    return int(text)


def _proxy_address(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text.strip(), strict=False))
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; give an IP address or network, like 127.0.0.1 or "
                                         "10.0.0.0/8") from None


def credentials(args: argparse.Namespace) -> list[tuple[str, str]]:
    users: list[tuple[str, str]] = []
    password = args.password or os.environ.get("ATELIER_PASSWORD")
    if args.username and password:
        users.append((args.username, password))
    elif args.username or args.password:
        raise SystemExit("error: --username and --password go together (or set ATELIER_PASSWORD)")
    if args.auth_file:
        try:
            lines = args.auth_file.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise SystemExit(f"error: --auth-file {args.auth_file}: {err.strerror}") from None
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                user, sep, pw = line.strip().partition(":")
                if not sep or not user or not pw:
                    raise SystemExit(f"error: --auth-file {args.auth_file} line {number}: expected user:password")
                users.append((user, pw))
    return users


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.password:
        print("warning: a password on the command line can be read by other users of this machine (ps, /proc): "
              "prefer ATELIER_PASSWORD or --auth-file", file=sys.stderr)
    users = credentials(args)
    exposed = args.share or not is_loopback(args.listen)
    if exposed and not users and not args.no_auth:
        why = "--share" if args.share else f"--listen {args.listen}"
        print(f"error: {why} makes this GUI reachable by others, and it starts processes on this machine.\n"
              "Give a login with --username/--password (or ATELIER_PASSWORD) or --auth-file, "
              "or pass --no-auth if you really want it open.", file=sys.stderr)
        return 2
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from gui import folder_browser, transfers
    from gui.allowed_paths import AllowedRoots
    from gui.demo_build import DemoQueue
    from gui.jobs import JobManager
    from gui.page import Services, build_page, queue_page
    from gui.presets import Presets
    from gui.run_files import Watchers
    from gui.run_queue import RunQueue
    from gui.tensorboard import TENSORBOARDS

    stop_children_on_exit(TENSORBOARDS.stop_all)
    transfers.LIMITS = upload_limits(args)

    demo = _start_demo() if args.demo else None
    runs_dir = args.runs_dir.expanduser().resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    datasets_dir = (args.datasets_dir or runs_dir.parent / "datasets").expanduser().resolve()
    roots = args.allowed_roots or ([Path.home(), REPO, runs_dir] if exposed else None)
    if roots:  # uploads land where training may read them
        roots = [*roots, datasets_dir]
    models_dir = (args.models_dir or runs_dir.parent / "models").expanduser().resolve()
    folder_browser.ROOTS = folder_browser.browse_roots(roots, runs_dir, datasets_dir, models_dir)
    jobs = JobManager(runs_dir)
    queue = RunQueue(jobs) if demo is None else DemoQueue(jobs, demo)
    queue.run_scheduler()  # queued runs (this session's or an earlier one's) start as their GPUs free up
    allowed = AllowedRoots([r.expanduser().resolve() for r in roots], args.allow_hub_models) if roots else None
    services = Services(runs_dir, jobs, Presets(args.presets_dir.expanduser()), Watchers(), allowed, datasets_dir,
                        queue, demo)
    page = build_page(services, initial_preset="demo" if args.demo else None)
    queue_page(page)
    host = "localhost" if args.listen in ("0.0.0.0", "::") else args.listen
    print(f"Atelier: serving on http://{host}:{args.server_port}{args.root_path} "
          f"(listening on {args.listen}{', login required' if users else ''})", flush=True)
    if args.listen in ("0.0.0.0", "::"):
        print(f"  from other machines: http://{socket.gethostname()}:{args.server_port}{args.root_path}", flush=True)
    page.launch(**launch_options(args, users, runs_dir))
    return 0


def stop_children_on_exit(stop: Callable[[], None]) -> None:
    """Run `stop` when the GUI exits, also by SIGTERM or SIGHUP (SIGINT already ends Gradio's launch). Training runs
    are not the GUI's children to stop: they run in their own sessions and a restarted GUI reattaches them."""
    atexit.register(stop)

    def exit_on(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds launch(); atexit then runs `stop`

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, exit_on)


def upload_limits(args: argparse.Namespace) -> Any:
    """The upload flags as gui.transfers.UploadLimits."""
    from gui.transfers import UploadLimits

    return UploadLimits(max_upload_bytes=args.max_upload_size, max_unpacked_bytes=args.max_unpacked_size,
                        max_files=args.max_upload_files, max_ratio=args.max_unzip_ratio)


def launch_options(args: argparse.Namespace, users: list[tuple[str, str]], runs_dir: Path) -> dict[str, Any]:
    """Keyword arguments of Blocks.launch: files only from the runs folder; with a login, no route without it.

    Also sets FORWARDED_ALLOW_IPS, which uvicorn reads when Gradio starts it (Gradio passes no option for it):
    uvicorn's default trusts X-Forwarded-For from 127.0.0.1, so anyone on this machine (or behind a tunnel to it)
    could name any client address and escape the login throttle. Only --trusted-proxy addresses are trusted.
    """
    import gradio as gr
    from starlette.middleware import Middleware

    from gui.page import CSS
    from gui.docs_pages import DocsPages
    from gui.session_guard import RequireSession
    from gui.tensorboard import TensorBoardProxy

    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(args.trusted_proxies)  # empty: no one
    patient_startup_check()
    return dict(server_name=args.listen, server_port=args.server_port, share=args.share,
                auth=users or None, auth_message="Atelier: please log in.", root_path=args.root_path or None,
                inbrowser=not args.headless and bool(os.environ.get("DISPLAY")), allowed_paths=[str(runs_dir)],
                show_error=True, css=CSS, footer_links=[], theme=gr.themes.Soft(), max_file_size=args.max_upload_size,
                app_kwargs={"middleware": [Middleware(RequireSession), Middleware(TensorBoardProxy),
                                           Middleware(DocsPages)]})


def patient_startup_check(wait_s: float = 60.0) -> None:
    """Gradio's launch asks its own new server for the page once, with a 3 s timeout, and exits with "localhost is
    not accessible" when that one answer is late: on a machine busy training (a CPU demo run uses every core) a
    restarted GUI could not start. Ask again until the server answers or `wait_s` passes."""
    import time

    import gradio.networking as networking
    import httpx

    if getattr(networking.url_ok, "patient", False):
        return
    quick = networking.url_ok

    def url_ok(url: str) -> bool:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if quick(url):
                    return True
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    url_ok.patient = True  # type: ignore[attr-defined]
    url_ok.quick = quick  # type: ignore[attr-defined]
    networking.url_ok = url_ok


def _start_demo() -> Any:
    """Start preparing the demo model and dataset the demo preset points at (demo/ in the repo) in a process of its
    own: the page serves at once and shows how far it is."""
    from gui.demo_build import DemoBuild

    demo = DemoBuild(REPO / "demo")
    demo.start()
    return demo


if __name__ == "__main__":
    os.chdir(REPO)  # presets name paths relative to the repo (demo/...)
    sys.exit(main())
