//! `Log::write_csv`: the CSV read back gives the log again, request for request.

use std::io;
use std::time::Duration;

use paceline_sim::{Limit, Log, OtherClients, Outcome, Policy, Request, Server};
use tokio::time::{Instant, sleep, timeout};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// The fields of one CSV record (RFC 4180: quoted fields may hold commas, doubled quotes and
/// line breaks). Returns the fields, each with whether it was quoted, and the rest of the text.
fn record(text: &str) -> (Vec<(String, bool)>, &str) {
    let mut fields = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        let mut field = String::new();
        let quoted = chars.peek().is_some_and(|&(_, c)| c == '"');
        if quoted {
            chars.next();
            loop {
                match chars.next().expect("a quoted field ends") {
                    (_, '"') if chars.peek().is_some_and(|&(_, c)| c == '"') => {
                        chars.next();
                        field.push('"');
                    }
                    (_, '"') => break,
                    (_, c) => field.push(c),
                }
            }
        }
        loop {
            match chars.next() {
                Some((_, ',')) => {
                    fields.push((field, quoted));
                    break;
                }
                Some((i, '\n')) => {
                    fields.push((field, quoted));
                    return (fields, &text[i + 1..]);
                }
                Some((_, c)) => {
                    assert!(!quoted, "text after a closing quote: {c:?}");
                    field.push(c);
                }
                None => panic!("the last record has no line break"),
            }
        }
    }
}

fn records(mut text: &str) -> Vec<Vec<(String, bool)>> {
    let mut all = Vec::new();
    while !text.is_empty() {
        let (fields, rest) = record(text);
        all.push(fields);
        text = rest;
    }
    all
}

/// `12.050000000` (or `-0.5…`) as an offset from `start`; exactly nine decimals.
fn instant(start: Instant, field: &str) -> Instant {
    match field.strip_prefix('-') {
        Some(before) => start - seconds(before),
        None => start + seconds(field),
    }
}

fn seconds(field: &str) -> Duration {
    let (whole, nanos) = field.split_once('.').expect("seconds with decimals");
    assert_eq!(nanos.len(), 9, "nine decimals: {field}");
    Duration::new(whole.parse().unwrap(), nanos.parse().unwrap())
}

fn optional<T>(field: &str, parse: impl FnOnce(&str) -> T) -> Option<T> {
    (!field.is_empty()).then(|| parse(field))
}

fn boolean(field: &str) -> bool {
    match field {
        "true" => true,
        "false" => false,
        other => panic!("not a boolean: {other:?}"),
    }
}

/// A CSV row read back into the request it describes.
fn request(start: Instant, row: &[(String, bool)]) -> Request {
    let field = |i: usize| row[i].0.as_str();
    let outcome = match (field(4), field(5)) {
        ("accepted", "") => {
            assert_eq!(field(6), "", "an accepted request has no penalty field");
            Outcome::Accepted
        }
        ("rejected", by) => Outcome::Rejected {
            by: match by {
                "global" => Limit::Global,
                "scope" => Limit::Scope,
                other => panic!("not a limit: {other:?}"),
            },
            in_penalty: boolean(field(6)),
        },
        other => panic!("not an outcome: {other:?}"),
    };
    Request {
        arrived: instant(start, field(0)),
        ours: boolean(field(1)),
        number: optional(field(2), |f| f.parse().unwrap()),
        // A quoted empty field is the empty scope; an unquoted one, none.
        scope: (row[3].1 || !row[3].0.is_empty()).then(|| row[3].0.clone()),
        outcome,
        retry_after: optional(field(7), seconds),
        sent: optional(field(8), |f| instant(start, f)),
        answered: optional(field(9), |f| instant(start, f)),
        sends_before_answer: optional(field(10), |f| f.parse().unwrap()),
    }
}

fn csv(log: &Log) -> String {
    let mut out = Vec::new();
    log.write_csv(&mut out).expect("a Vec takes every byte");
    String::from_utf8(out).expect("UTF-8")
}

/// Every kind of request a log can hold: ours and others', accepted, rejected by either limit
/// with and without a penalty, scopes that need quoting, a call dropped before its answer,
/// and answers still on their way when the log is read.
async fn varied_log() -> Log {
    let api = Server::builder()
        .latency(50 * MS)
        .jitter(7 * MS)
        .seed(3)
        .global(
            Policy::token_bucket(6.0, 3)
                .penalty(300 * MS, SEC)
                .other_clients(OtherClients::random(1.5)),
        )
        .per_scope(Policy::fixed_window(1, SEC))
        .build();
    let scopes = [
        None,
        Some("acct-1"),
        Some(""),
        Some("a,\"b\""),
        Some("line\nbreak"),
    ];
    let calls = (0..40).map(|i| {
        let api = api.clone();
        let scope = scopes[i % scopes.len()];
        async move {
            sleep(i as u32 * 150 * MS).await;
            let _ = api.call(scope).await;
        }
    });
    futures::future::join_all(calls).await;
    // Sent, then dropped before the answer came.
    assert!(timeout(70 * MS, api.call(None)).await.is_err());
    // Judged, the answer still on its way down when the log is read.
    let in_flight = tokio::spawn({
        let api = api.clone();
        async move { api.call(Some("acct-1")).await }
    });
    sleep(60 * MS).await;
    let log = api.log();
    in_flight.abort();
    log
}

#[tokio::test(start_paused = true)]
async fn the_csv_reads_back_as_the_log_exactly() {
    let log = varied_log().await;
    let requests = log.requests();
    // The run must hold what the CSV has to carry, or the test proves less than it says.
    assert!(requests.iter().any(|r| !r.ours));
    assert!(requests.iter().any(|r| r.ours && r.answered.is_none()));
    assert!(requests.iter().any(|r| r.in_penalty()));
    let rejected_by = |limit, in_penalty| {
        let rejected = Outcome::Rejected {
            by: limit,
            in_penalty,
        };
        requests.iter().any(|r| r.outcome == rejected)
    };
    assert!(rejected_by(Limit::Global, false) && rejected_by(Limit::Scope, false));
    for scope in ["", "a,\"b\"", "line\nbreak"] {
        assert!(requests.iter().any(|r| r.scope.as_deref() == Some(scope)));
    }
    assert!(
        requests
            .iter()
            .any(|r| r.arrived.duration_since(log.start()).subsec_nanos() != 0)
    );

    let csv = csv(&log);
    let rows = records(&csv);
    assert_eq!(
        rows.len(),
        1 + requests.len(),
        "a header and one row per request"
    );
    let read: Vec<Request> = rows[1..]
        .iter()
        .map(|row| {
            assert_eq!(row.len(), 11, "{row:?}");
            request(log.start(), row)
        })
        .collect();
    assert_eq!(read, requests);
}

#[tokio::test(start_paused = true)]
async fn the_header_names_the_columns_in_order() {
    let start = Instant::now();
    let csv = csv(&Log::new(start, Vec::new()));
    assert_eq!(
        csv,
        "arrived_s,ours,number,scope,outcome,limit,in_penalty,retry_after_s,sent_s,\
         answered_s,sends_before_answer\n"
    );
    assert_eq!(csv.trim_end(), Log::CSV_HEADER);
}

#[tokio::test(start_paused = true)]
async fn an_instant_before_the_start_is_written_negative() {
    let start = Instant::now() + 2 * SEC;
    let by_hand = Request {
        ours: true,
        number: Some(7),
        scope: None,
        sent: Some(start - 1500 * MS),
        arrived: start + Duration::new(0, 1),
        answered: None,
        sends_before_answer: None,
        outcome: Outcome::Accepted,
        retry_after: None,
    };
    let csv = csv(&Log::new(start, vec![by_hand.clone()]));
    let row = csv.lines().nth(1).unwrap();
    assert_eq!(row, "0.000000001,true,7,,accepted,,,,-1.500000000,,");
    assert_eq!(request(start, &records(&csv)[1]), by_hand);
}

/// A writer that takes `room` bytes, then fails.
struct Full {
    room: usize,
}

impl io::Write for Full {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_writers_error_comes_back() {
    let log = varied_log().await;
    let empty = Log::new(log.start(), Vec::new());
    // Full in the header (of a log with no rows to fail after it), and in the rows.
    for (log, room) in [(&empty, 10), (&log, 200)] {
        let error = log.write_csv(Full { room }).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(error.to_string(), "disk full");
    }
}
