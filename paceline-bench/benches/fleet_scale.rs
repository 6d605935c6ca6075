//! A large fleet on one namespace: many gates, each with its own connection to one
//! `redis-server` on loopback, in a few worker processes, sharing one rate.
//!
//! ```sh
//! cargo bench -p paceline-bench --bench fleet_scale --features redis
//! # or a subset: FLEET_RATES=10000,100000 FLEET_GATES=200 FLEET_LEASES=on cargo bench ...
//! ```
//!
//! For each fleet rate (`FLEET_RATES`, calls a second; 1,000, 10,000, 50,000 and 100,000
//! unless set) and each way of asking Redis (`FLEET_LEASES`: `on`, leases of `FLEET_LEASE_MS`,
//! the store's default of 20 ms unless set, and `off`, one script run per start; both unless
//! set), a fresh namespace gets
//! `FLEET_GATES` gates (1,000 unless set) in `FLEET_PROCESSES` processes (4), each gate with
//! `FLEET_TASKS` tasks (16) calling through it as fast as it lets them, for `FLEET_SECONDS`
//! (6; the first is left out as warm-up). Each call's start is stamped by the wall clock
//! every process shares. With `FLEET_DELAYS` (milliseconds each way, `0` unless set; `1,10`
//! runs each row twice), the workers reach Redis through a `paceline_sim::SlowLink` that
//! holds every byte that long each way. The table gives, over the measured seconds:
//!
//! - the starts a second the fleet achieved, and as a share of its rate;
//! - the most starts in any 1 s window (sliding by a millisecond), over the rate;
//! - script runs (`EVALSHA`) and Redis commands (every command `INFO commandstats` counts,
//!   those a script runs included) per start, and Redis's CPU (user and system, as a share of
//!   one core);
//! - the spread of the gates' shares: the fewest and the most starts of a gate, over the mean.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline::{Gate, RateLimited, RedisStore};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

/// The first second of a run is left out: the gates connect and load the scripts.
const WARM_UP: Duration = Duration::from_secs(1);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock past 1970")
        .as_micros() as u64
}

/// One worker's part of a run, from its command line.
struct Part {
    redis: String,
    namespace: String,
    gates: usize,
    tasks: usize,
    rate: f64,
    lease: Duration,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(part) = args.iter().position(|a| a == "--worker") {
        worker(&args[part + 1..]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    coordinate();
}

/// Starts Redis, runs every configuration's workers, prints the table.
fn coordinate() {
    let rates: Vec<f64> = std::env::var("FLEET_RATES")
        .unwrap_or_else(|_| "1000,10000,50000,100000".to_owned())
        .split(',')
        .map(|rate| rate.trim().parse().expect("FLEET_RATES: numbers"))
        .collect();
    let span: u64 = env_or("FLEET_LEASE_MS", 20);
    let leases: Vec<u64> = match std::env::var("FLEET_LEASES").as_deref() {
        Ok("on") => vec![span],
        Ok("off") => vec![0],
        _ => vec![span, 0],
    };
    let gates: usize = env_or("FLEET_GATES", 1_000);
    let processes: usize = env_or("FLEET_PROCESSES", 4);
    let tasks: usize = env_or("FLEET_TASKS", 16);
    let seconds: u64 = env_or("FLEET_SECONDS", 6);
    let delays: Vec<u64> = std::env::var("FLEET_DELAYS")
        .unwrap_or_else(|_| "0".to_owned())
        .split(',')
        .map(|ms| ms.trim().parse().expect("FLEET_DELAYS: milliseconds"))
        .collect();
    let redis = redis_server::RedisServer::start();
    println!(
        "Fleet: {gates} gates in {processes} processes, {tasks} tasks each, one redis-server on \
         loopback, {seconds} s a run (the first left out)"
    );
    println!(
        "| Redis delay each way | rate/s | leases | starts/s | of the rate | most in 1 s / rate \
         | script runs/start | commands/start | Redis CPU | gate shares (min, max / mean) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &delay in &delays {
        let upstream = format!("127.0.0.1:{}", redis.port())
            .parse()
            .expect("an address");
        let link = (delay > 0).then(|| {
            paceline_sim::SlowLink::start(upstream, Duration::from_millis(delay))
                .expect("a link on loopback")
        });
        let url = link.as_ref().map_or(redis.url(), |link| {
            format!("redis://127.0.0.1:{}", link.port())
        });
        for &rate in &rates {
            for &lease in &leases {
                let row = run(
                    (&redis, &url),
                    (gates, processes, tasks, seconds),
                    rate,
                    lease,
                );
                print_row(delay, rate, lease, &row);
            }
        }
    }
}

/// One row of the table.
fn print_row(delay: u64, rate: f64, lease: u64, row: &Row) {
    let lease = if lease > 0 {
        format!("{lease} ms")
    } else {
        "off".to_owned()
    };
    println!(
        "| {delay} ms | {rate:.0} | {lease} | {:.0} | {:.3} | {:.3} | {:.3} | {:.2} | {:.0} % \
         | {:.2}, {:.2} |",
        row.per_second,
        row.per_second / rate,
        row.most_in_second as f64 / rate,
        row.scripts_per_start,
        row.commands_per_start,
        row.redis_cpu * 100.0,
        row.shares.0,
        row.shares.1,
    );
}

struct Row {
    per_second: f64,
    most_in_second: u64,
    scripts_per_start: f64,
    commands_per_start: f64,
    redis_cpu: f64,
    shares: (f64, f64),
}

/// What `INFO` says: every command's calls, and the server's CPU seconds.
fn redis_info(redis: &redis_server::RedisServer) -> (BTreeMap<String, u64>, f64) {
    let output = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "INFO", "all"])
        .output()
        .expect("redis-cli runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut calls = BTreeMap::new();
    let mut cpu = 0.0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            let (command, stats) = rest.split_once(':').expect("name:stats");
            let count = stats
                .strip_prefix("calls=")
                .and_then(|s| s.split(',').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            calls.insert(command.to_owned(), count);
        }
        for field in ["used_cpu_sys:", "used_cpu_user:"] {
            if let Some(value) = line.strip_prefix(field) {
                cpu += value.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    (calls, cpu)
}

/// A run of the fleet's workers reaching `redis` at `url`.
fn run(
    (redis, url): (&redis_server::RedisServer, &str),
    (gates, processes, tasks, seconds): (usize, usize, usize, u64),
    rate: f64,
    lease: u64,
) -> Row {
    let namespace = format!("scale-{rate}-{lease}-{}", unix_micros());
    let exe = std::env::current_exe().expect("this bench's path");
    let mut children: Vec<_> = (0..processes)
        .map(|i| {
            let share = gates / processes + usize::from(i < gates % processes);
            Command::new(&exe)
                .arg("--worker")
                .args([url.to_owned(), namespace.clone()])
                .args([share, tasks].map(|n| n.to_string()))
                .arg(rate.to_string())
                .arg(lease.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("the worker starts")
        })
        .collect();
    // Each worker says when its gates have heard Redis; then all are told when to begin.
    let mut outputs = Vec::new();
    for child in &mut children {
        let mut output = BufReader::new(child.stdout.take().expect("its output"));
        let mut ready = String::new();
        output.read_line(&mut ready).expect("the worker's output");
        assert_eq!(ready.trim(), "READY", "a worker failed to set up");
        outputs.push(output);
    }
    let begin = unix_micros() + 500_000;
    let end = begin + seconds * 1_000_000;
    for child in &mut children {
        let mut input = child.stdin.take().expect("its input");
        writeln!(input, "{begin} {end}").expect("the worker reads");
    }
    // Measured from the end of the warm-up to the end.
    let from = begin + WARM_UP.as_micros() as u64;
    let wait = Duration::from_micros(from.saturating_sub(unix_micros()));
    std::thread::sleep(wait);
    let (calls_before, cpu_before) = redis_info(redis);
    std::thread::sleep(Duration::from_micros(end.saturating_sub(unix_micros())));
    let (calls_after, cpu_after) = redis_info(redis);
    let mut per_ms = vec![0u64; ((end - from) / 1_000) as usize + 1];
    let mut per_gate = Vec::new();
    for (mut child, mut output) in children.into_iter().zip(outputs) {
        let mut text = String::new();
        output
            .read_to_string(&mut text)
            .expect("the worker's output");
        assert!(
            child.wait().expect("the worker ends").success(),
            "a worker failed"
        );
        for line in text.lines() {
            if let Some(counts) = line.strip_prefix("GATES ") {
                per_gate.extend(counts.split(',').map(|n| n.parse::<u64>().unwrap()));
            }
            if let Some(stamps) = line.strip_prefix("MS ") {
                for (i, n) in stamps.split(',').enumerate() {
                    per_ms[i] += n.parse::<u64>().unwrap();
                }
            }
        }
    }
    let starts: u64 = per_ms.iter().sum();
    let window = per_ms.len().min(1_000);
    let most_in_second = (0..=per_ms.len() - window)
        .map(|i| per_ms[i..i + window].iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    let delta =
        |name: &str| calls_after.get(name).unwrap_or(&0) - calls_before.get(name).unwrap_or(&0);
    let commands: u64 = calls_after.keys().map(|name| delta(name)).sum::<u64>() - delta("info");
    let measured = (end - from) as f64 / 1e6;
    let mean = per_gate.iter().sum::<u64>() as f64 / per_gate.len() as f64;
    let (min, max) = per_gate
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &n| (lo.min(n), hi.max(n)));
    Row {
        per_second: starts as f64 / measured,
        most_in_second,
        scripts_per_start: delta("evalsha") as f64 / starts as f64,
        commands_per_start: commands as f64 / starts as f64,
        redis_cpu: (cpu_after - cpu_before) / measured,
        shares: (min as f64 / mean, max as f64 / mean),
    }
}

/// One worker process: its gates, each with its own connection, and their tasks; prints the
/// starts each gate made in the measured seconds (`GATES n,n,…`) and the fleet's starts in
/// each millisecond of them (`MS n,n,…`).
fn worker(args: &[String]) {
    let part = Part {
        redis: args[0].clone(),
        namespace: args[1].clone(),
        gates: args[2].parse().unwrap(),
        tasks: args[3].parse().unwrap(),
        rate: args[4].parse().unwrap(),
        lease: Duration::from_millis(args[5].parse().unwrap()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(calls(&part));
}

async fn calls(part: &Part) {
    let gates: Vec<Gate<()>> = (0..part.gates)
        .map(|_| {
            let store = RedisStore::open(&part.redis, &part.namespace)
                .expect("a Redis URL")
                .timeout(Duration::from_secs(1))
                .lease(part.lease);
            Gate::builder(|_: &()| None::<RateLimited>)
                .rate(part.rate)
                .max_in_flight(part.tasks)
                .store(store)
                .build()
                .expect("a gate")
        })
        .collect();
    // Each gate connects, and hears the fleet's members, before the run, as a gate that a
    // program checked at start-up (`RedisStore::check`) and that has been running would.
    // A few at a time, so that a Redis far away makes a connection within the timeout; one
    // that did not hears Redis on its next call.
    for batch in gates.chunks(25) {
        for _ in 0..5 {
            let unheard = batch.iter().filter(|g| g.stats().fleet_members.is_none());
            let first = unheard.map(|gate| gate.call(|| async { Ok(()) }));
            for called in futures::future::join_all(first).await {
                called.expect("no call fails");
            }
        }
    }
    let unheard = gates.iter().filter(|g| g.stats().fleet_members.is_none());
    assert_eq!(unheard.count(), 0, "gates that never heard Redis");
    // Told when to begin and end, in microseconds since the epoch.
    println!("READY");
    let mut told = String::new();
    std::io::stdin()
        .read_line(&mut told)
        .expect("the coordinator's word");
    let mut told = told
        .split_whitespace()
        .map(|t| t.parse::<u64>().expect("a time"));
    let (begin, end) = (told.next().expect("begin"), told.next().expect("end"));
    let from = begin + WARM_UP.as_micros() as u64;
    let slots = ((end - from) / 1_000) as usize + 1;
    let per_ms: Arc<Vec<AtomicU32>> = Arc::new((0..slots).map(|_| AtomicU32::new(0)).collect());
    tokio::time::sleep(Duration::from_micros(begin.saturating_sub(unix_micros()))).await;
    let counts: Vec<Arc<AtomicU32>> = (0..part.gates).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (gate, count) in gates.iter().zip(&counts) {
        for _ in 0..part.tasks {
            let (gate, count, per_ms) = (gate.clone(), Arc::clone(count), Arc::clone(&per_ms));
            tasks.push(tokio::spawn(async move {
                loop {
                    let started = gate.call(|| async { Ok(unix_micros()) }).await;
                    let at = started.expect("no call fails");
                    if at >= end {
                        return;
                    }
                    if at >= from {
                        count.fetch_add(1, Ordering::Relaxed);
                        per_ms[((at - from) / 1_000) as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task ends");
    }
    let list = |values: Vec<u32>| {
        values
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "GATES {}",
        list(counts.iter().map(|c| c.load(Ordering::Relaxed)).collect())
    );
    println!(
        "MS {}",
        list(per_ms.iter().map(|c| c.load(Ordering::Relaxed)).collect())
    );
}
