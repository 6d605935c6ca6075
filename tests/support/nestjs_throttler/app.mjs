// NestJS's throttler in front of one path, for paceline's tests (see ../limiter_app.rs).
//
//     node app.mjs --log requests.log
//
// Serves GET /call on 127.0.0.1 at a port the OS picks, and prints `listening on PORT` once it
// accepts connections. `ThrottlerGuard` keeps two named throttlers (in memory, one key for
// all): "short", 20 per 2 s, and "long", 1000 per 60 s. Each announces itself in a family of
// fields its name ends: `X-RateLimit-Limit-short`, `X-RateLimit-Remaining-short` and
// `X-RateLimit-Reset-short` (seconds until its count's oldest record expires, rounded up), and
// on a refusal `Retry-After-short` (the throttler's default `default` alone would send them
// unnamed).
//
// Every request to /call goes into the log, one line each, as its answer goes: `ARRIVED STATUS
// RETRY_AFTER`, the arrival as seconds since the Unix epoch with microseconds, and `-` for no
// Retry-After of any name (the log Flask-Limiter's app writes, which the tests read alike).

import "reflect-metadata";
import fs from "node:fs";
import { Controller, Get, Module } from "@nestjs/common";
import { APP_GUARD, NestFactory } from "@nestjs/core";
import { ThrottlerGuard, ThrottlerModule } from "@nestjs/throttler";

const at = process.argv.indexOf("--log");
const logPath = at >= 0 ? process.argv[at + 1] : undefined;
if (!logPath) {
  console.error("usage: node app.mjs --log FILE");
  process.exit(2);
}
const log = fs.openSync(logPath, "a");

// Decorators applied as functions: the file runs under plain node.
class CallController {
  call() {
    return "ok";
  }
}
const call = Object.getOwnPropertyDescriptor(CallController.prototype, "call");
Get("call")(CallController.prototype, "call", call);
Controller()(CallController);

class AppModule {}
Module({
  imports: [
    ThrottlerModule.forRoot([
      { name: "short", ttl: 2_000, limit: 20 },
      { name: "long", ttl: 60_000, limit: 1_000 },
    ]),
  ],
  controllers: [CallController],
  providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
})(AppModule);

const app = await NestFactory.create(AppModule, { logger: false });
// Taken before the guard judges the request, written as the answer's head is, before it is
// sent: a client that has its answer finds its line in the log.
app.use((request, response, next) => {
  const arrived = performance.timeOrigin + performance.now();
  const writeHead = response.writeHead;
  response.writeHead = function (status, ...rest) {
    if (request.path === "/call") {
      const named = this.getHeaderNames().find((name) => name.startsWith("retry-after"));
      const retryAfter = named === undefined ? "-" : this.getHeader(named);
      const seconds = (arrived / 1000).toFixed(6);
      fs.writeSync(log, `${seconds} ${status} ${retryAfter}\n`);
    }
    return writeHead.call(this, status, ...rest);
  };
  next();
});
await app.listen(0, "127.0.0.1");
console.log(`listening on ${app.getHttpServer().address().port}`);
