"""slowapi (FastAPI under uvicorn) in front of one path, for paceline's tests (see
limiter_app.rs beside it).

    python3 slowapi_app.py --limit "20 per 2 seconds" --log requests.log \
        [--strategy moving-window | sliding-window-counter]

Serves GET /call on 127.0.0.1 at a port the OS picks, and prints `listening on PORT` once it
accepts connections. slowapi enforces its limit on every request (one key for all, in memory;
a fixed window unless `--strategy` says otherwise: the `limits` library's strategies) and
sends its headers, Retry-After among them, on every answer: 200 "ok" or 429. Its
`X-RateLimit-Reset` is a Unix time with a fraction, as Python prints a float.

Every request to /call goes into the log, one line each, written and flushed before the answer
is sent: `ARRIVED STATUS RETRY_AFTER`, as flask_limiter_app.py writes it.
"""

import argparse
import asyncio
import logging
import socket
import time

import uvicorn
from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", required=True, help='e.g. "20 per 2 seconds"')
    parser.add_argument("--log", required=True, help="the file every request is logged to")
    parser.add_argument("--strategy", default="fixed-window", help="a limits strategy")
    args = parser.parse_args()

    limiter = Limiter(
        key_func=lambda request: "all",
        strategy=args.strategy,
        storage_uri="memory://",
        headers_enabled=True,
    )
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    log = open(args.log, "a", encoding="ascii")

    # A middleware runs around the route, whose decorator judges the request and sets the
    # headers: the arrival is taken before, the line written after.
    @app.middleware("http")
    async def logged(request: Request, call_next):
        arrived = time.time()
        response = await call_next(request)
        if request.url.path == "/call":
            retry_after = response.headers.get("Retry-After", "-")
            log.write(f"{arrived:.6f} {response.status_code} {retry_after}\n")
            log.flush()
        return response

    @app.get("/call")
    @limiter.limit(args.limit)
    async def call(request: Request, response: Response):
        return Response("ok")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="error", access_log=False)
    logging.getLogger("uvicorn.error").setLevel(logging.ERROR)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
