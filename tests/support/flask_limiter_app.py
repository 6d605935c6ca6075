"""Flask-Limiter in front of one path, for paceline's tests (see limiter_app.rs beside it).

    python3 flask_limiter_app.py --limit "20 per 2 seconds" --log requests.log \
        [--strategy moving-window | sliding-window-counter]

Serves GET /call on 127.0.0.1 at a port the OS picks, and prints `listening on PORT` once it
accepts connections. Flask-Limiter enforces its limit on every request (one key for all, in
memory; a fixed window unless `--strategy` says `moving-window`, or `sliding-window-counter`:
the `limits` library's strategies) and sends its headers,
Retry-After among them, on every answer: 200 "ok" or 429.

Requests are answered one at a time. The `limits` library's in-memory storage is not safe
across request threads (its expiry timer drops a key's lock while a request may hold it, so
two requests can judge the same key at once), and a loaded CI run once had a 500 from this
app. One at a time, the limiter judges each request as its docs say; requests still arrive
concurrently, on werkzeug's threads, and wait their turn only for the fraction of a
millisecond the limiter and the handler take. Should an answer be a 500 again, the test's
panic shows this app's stderr, where Flask logs the traceback.

Every request to /call goes into the log, one line each, written and flushed before the answer
is sent: `ARRIVED STATUS RETRY_AFTER`, the arrival as seconds since the Unix epoch with
microseconds, and `-` for no Retry-After.
"""

import argparse
import logging
import threading
import time

from flask import Flask, g, request
from flask_limiter import Limiter
from werkzeug.serving import make_server


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", required=True, help='e.g. "20 per 2 seconds"')
    parser.add_argument("--log", required=True, help="the file every request is logged to")
    parser.add_argument("--strategy", default="fixed-window", help="fixed-window, moving-window or sliding-window-counter")
    args = parser.parse_args()

    app = Flask(__name__)
    app.config["RATELIMIT_HEADERS_ENABLED"] = True
    log = open(args.log, "a", encoding="ascii")

    # Registered before the limiter's own hooks: before-request hooks run in order, so the
    # arrival is taken before the limiter judges the request; after-request hooks run in
    # reverse, so the line is written after the limiter has set its headers.
    @app.before_request
    def arrived():
        g.arrived = time.time()

    @app.after_request
    def logged(response):
        if request.path == "/call":
            retry_after = response.headers.get("Retry-After", "-")
            log.write(f"{g.arrived:.6f} {response.status_code} {retry_after}\n")
            log.flush()
        return response

    Limiter(
        key_func=lambda: "all",
        app=app,
        default_limits=[args.limit],
        strategy=args.strategy,
        storage_uri="memory://",
    )

    @app.route("/call")
    def call():
        return "ok"

    one_at_a_time = threading.Lock()
    serve = app.wsgi_app

    def serialised(environ, start_response):
        with one_at_a_time:
            # The hooks, the log line among them, run inside; the body is read here too.
            return list(serve(environ, start_response))

    app.wsgi_app = serialised

    # werkzeug's line per request would only repeat the log above, on stderr.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"listening on {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
