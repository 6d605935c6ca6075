// express-rate-limit in front of one path, for paceline's tests (see ../limiter_app.rs).
//
//     node app.js --log requests.log [--stacked]
//
// Serves GET /call on 127.0.0.1 at a port the OS picks, and prints `listening on PORT` once it
// accepts connections. Two limiters (one key for all, in memory, fixed windows) stand one
// behind the other, as a service keeps a burst limit and a sustained one: "burst", 10 per 2 s,
// and "sustained", 40 per 20 s. Each announces itself in the IETF draft's eighth revision
// (`standardHeaders: 'draft-8'`): one named item in `RateLimit` and one in `RateLimit-Policy`
// for each, with `q`, `w` and a `pk` partition key.
//
// With `--stacked`, the two limiters are those of a service that limits the whole key and
// each account of it: "whole", 20 a second for every request (one key for all), and
// "account", 5 a second for each account, keyed by the request's `X-Account` header. Each
// policy's `pk` is a hash of its key: the same for every account's request in "whole", one of
// each account in "account".
//
// Every request to /call goes into the log, one line each, as its answer goes: `ARRIVED STATUS
// RETRY_AFTER`, the arrival as seconds since the Unix epoch with microseconds, and `-` for no
// Retry-After (the log Flask-Limiter's app writes, which the tests read alike).

"use strict";

const fs = require("fs");
const express = require("express");
const { rateLimit } = require("express-rate-limit");

const logPath = process.argv[process.argv.indexOf("--log") + 1];
if (!logPath || process.argv.indexOf("--log") < 0) {
  console.error("usage: node app.js --log FILE");
  process.exit(2);
}
const log = fs.openSync(logPath, "a");

const app = express();
// Taken before either limiter judges the request, written as the answer's head is, before
// it is sent: a client that has its answer finds its line in the log.
app.use((request, response, next) => {
  const arrived = performance.timeOrigin + performance.now();
  const writeHead = response.writeHead;
  response.writeHead = function (status, ...rest) {
    if (request.path === "/call") {
      const retryAfter = this.getHeader("Retry-After") ?? "-";
      const seconds = (arrived / 1000).toFixed(6);
      fs.writeSync(log, `${seconds} ${status} ${retryAfter}\n`);
    }
    return writeHead.call(this, status, ...rest);
  };
  next();
});
const limiter = (identifier, limit, windowMs, keyGenerator = () => "all") =>
  rateLimit({
    windowMs,
    limit,
    identifier,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    keyGenerator,
    validate: false,
  });
if (process.argv.includes("--stacked")) {
  app.use(limiter("whole", 20, 1_000));
  app.use(limiter("account", 5, 1_000, (request) => request.get("X-Account") ?? "none"));
} else {
  app.use(limiter("burst", 10, 2_000));
  app.use(limiter("sustained", 40, 20_000));
}
app.get("/call", (request, response) => response.send("ok"));

const server = app.listen(0, "127.0.0.1", () => {
  console.log(`listening on ${server.address().port}`);
});
