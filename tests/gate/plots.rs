//! The scenarios' pictures: the gate's rate as sampled, the runs traced for them, and the SVG
//! drawn from them, read back as XML.

use std::time::Duration;

use paceline::{Gate, RateLimited};
use paceline_sim::{Policy, Server};
use tokio::time::{Instant, sleep, sleep_until};

use crate::support::pages::{SCENARIOS_MD, shown};
use crate::support::plot::{self, Figure};
use crate::support::scenarios::*;

#[tokio::test(start_paused = true)]
async fn the_sampled_rate_is_the_gates_rate_at_each_sampled_instant() {
    let gate = Gate::builder(|e: &&str| (*e == "429").then(RateLimited::new))
        .max_in_flight(1)
        .rate(10.0)
        .adaptive(1.0, 100.0)
        .max_retries(0)
        .build()
        .unwrap();
    let start = Instant::now();
    // The gate's rate read at every instant where it may change: when an attempt begins and
    // when it ends. Attempts take 30 ms and are due 40 ms or 90 ms past a tenth of a second,
    // so that most changes fall between the sampler's readings.
    let script = async {
        let mut changes = vec![(Duration::ZERO, gate.stats().rate.unwrap())];
        let answers = ["ok"; 12]
            .into_iter()
            .chain(["429", "ok", "429"])
            .chain(["ok"; 12]);
        for (i, answer) in answers.enumerate() {
            sleep_until(start + (250 * i as u32 + 40) * MS).await;
            let attempt = || async {
                let begun = (start.elapsed(), gate.stats().rate.unwrap());
                sleep(30 * MS).await;
                (answer == "ok").then_some(begun).ok_or(answer)
            };
            if let Ok(begun) = gate.call(attempt).await {
                changes.push(begun);
            }
            changes.push((start.elapsed(), gate.stats().rate.unwrap()));
        }
        changes
    };
    let probe = || gate.stats().rate.unwrap();
    let (changes, samples) = sampled(100 * MS, probe, script).await;

    let end = start.elapsed();
    let (last, grid) = samples.split_last().unwrap();
    let instants: Vec<Duration> = grid.iter().map(|s| s.0).collect();
    let expected: Vec<Duration> = (0..)
        .map(|k| k * 100 * MS)
        .take_while(|&t| t < end)
        .collect();
    assert_eq!(
        instants, expected,
        "a reading at the start and every 100 ms"
    );
    assert_eq!(last.0, end, "and one when the run ends");
    let distinct = changes.windows(2).filter(|w| w[0].1 != w[1].1).count();
    assert!(
        distinct >= 3,
        "the rate must change for this to test anything: {changes:?}"
    );
    for &(at, rate) in &samples {
        // Where a change falls on the instant of a reading, the reading may come before or
        // after it: either is the gate's rate at that instant.
        let before = changes.iter().rev().find(|c| c.0 < at).map(|c| c.1);
        let at_once = changes.iter().filter(|c| c.0 == at).map(|c| c.1);
        let allowed: Vec<f64> = before.into_iter().chain(at_once).collect();
        assert!(
            allowed.contains(&rate),
            "{rate} at {at:?}, not one of {allowed:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn traced_runs_repeat_the_untraced_figures() {
    let untraced = [s1().await, s1b().await, s2().await];
    let traced = [s1_traced().await, s1b_traced().await, s2_traced().await];
    for (runs, reports) in traced.iter().zip(&untraced) {
        for (run, report) in runs.iter().zip(reports) {
            assert_eq!(figures(&run.report), figures(report), "{}", report.who);
            assert_eq!(run.log.ours().count(), report.throttled + report.done);
        }
        let [gate, alone] = runs;
        assert!(alone.rate.is_empty());
        assert_eq!(gate.rate[0].0, Duration::ZERO);
        assert_eq!(gate.rate.last().unwrap().0, gate.report.elapsed);
    }
    // The gates start at 10/s in S1 and S1b, 25/s in S2.
    let first: Vec<f64> = traced.iter().map(|[gate, _]| gate.rate[0].1).collect();
    assert_eq!(first, [10.0, 10.0, 25.0]);
}

/// A small run through a gate and its baseline, on a server with a penalty and
/// Retry-After, so that each panel has every kind of mark.
async fn tiny() -> [Run; 2] {
    let server = || {
        Server::builder()
            .latency(50 * MS)
            .global(Policy::fixed_window(3, SEC).penalty(SEC, 4 * SEC))
            .build()
    };
    let gate = through_gate_traced("through a gate", server(), 4, 20, 6.0).await;
    let alone = server();
    let alone = traced(&alone, alone_with_retry_after(alone.clone(), 4, 20)).await;
    [gate, alone]
}

fn colour(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The elements named `tag` whose `attribute` is `value`.
fn having<'a>(
    svg: &'a roxmltree::Document<'a>,
    tag: &str,
    attribute: &str,
    value: &str,
) -> Vec<roxmltree::Node<'a, 'a>> {
    svg.descendants()
        .filter(|n| n.has_tag_name(tag) && n.attribute(attribute) == Some(value))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_pictures_svg_is_well_formed_and_holds_every_series() {
    let runs = tiny().await;
    let [gate, alone] = &runs;
    assert!(gate.report.throttled > 0 && alone.report.in_penalty > 0);
    let figure = Figure {
        title: "a tiny run",
        limit: &[(Duration::ZERO, 3.0)],
        runs: &runs,
    };
    let text = plot::svg(&figure).unwrap();
    let svg = roxmltree::Document::parse(&text).expect("well-formed XML");
    let root = svg.root_element();
    assert!(root.has_tag_name("svg"));
    assert_eq!(root.attribute("width"), Some("1000"));
    assert_eq!(root.attribute("height"), Some("820"));

    let texts: Vec<&str> = svg
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let count = |label: &str| texts.iter().filter(|&&t| t == label).count();
    assert_eq!(count("a tiny run"), 1);
    let captions: Vec<&&str> = texts
        .iter()
        .filter(|t| t.starts_with("through a gate: ") || t.starts_with("each task alone"))
        .collect();
    assert_eq!(captions.len(), 2, "{texts:?}");
    assert!(captions[0].contains(&format!("{} throttled", gate.report.throttled)));
    for label in [plot::TOLD_TO_WAIT, plot::LIMIT, plot::SENT, plot::ACCEPTED] {
        assert_eq!(count(label), 2, "{label} in each panel's legend");
    }
    for label in [plot::REJECTED, plot::IN_PENALTY] {
        assert_eq!(count(label), 2, "{label} in each panel's legend");
    }
    assert_eq!(count(plot::RATE), 1, "only the gate has a rate");

    // Lines: each series once per panel, and its legend's sample.
    let lines = |c| having(&svg, "polyline", "stroke", &colour(c));
    for c in [plot::LIMIT_COLOUR, plot::SENT_COLOUR, plot::ACCEPTED_COLOUR] {
        assert_eq!(lines(c).len(), 4, "{c:?}");
    }
    let rate = lines(plot::RATE_COLOUR);
    assert_eq!(rate.len(), 2);
    let points = rate[0]
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(points, gate.rate.len(), "one point per reading of the rate");
    // Alone in its picture, the gate's run is shown to its end, and its last reading with it.
    let alone_in_picture = Figure {
        runs: std::slice::from_ref(gate),
        ..figure
    };
    let text = plot::svg(&alone_in_picture).unwrap();
    let one = roxmltree::Document::parse(&text).expect("well-formed XML");
    let rate = having(&one, "polyline", "stroke", &colour(plot::RATE_COLOUR));
    let points = rate[0]
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(points, gate.rate.len());

    // Marks: every span told to wait, and the rejections, in both panels.
    let spans = having(&svg, "rect", "fill", &colour(plot::TOLD_TO_WAIT_COLOUR));
    let told = plot::told_to_wait(&gate.log).len() + plot::told_to_wait(&alone.log).len();
    assert_eq!(spans.len(), told + 2, "each span, and the two legends'");
    let crosses = having(&svg, "line", "stroke", &colour(plot::REJECTED_COLOUR));
    assert!(crosses.len() > 2, "rejections marked, beyond the legends'");
    let triangles = having(&svg, "polygon", "fill", &colour(plot::IN_PENALTY_COLOUR));
    assert!(triangles.len() > 2, "penalties marked, beyond the legends'");
}

#[tokio::test(start_paused = true)]
async fn a_rate_far_above_the_requests_is_cut_at_the_top_and_says_so() {
    let [mut gate, _] = tiny().await;
    let requests = gate
        .log
        .max_in_window(SEC, paceline_sim::Which::OursArrived) as f64;
    let readings = gate.rate.len() as f64;
    for (i, reading) in gate.rate.iter_mut().enumerate() {
        reading.1 = (1000.0 - readings + i as f64) * requests;
    }
    let figure = Figure {
        title: "a rate held back by something else",
        limit: &[(Duration::ZERO, 3.0)],
        runs: std::slice::from_ref(&gate),
    };
    let text = plot::svg(&figure).unwrap();
    let svg = roxmltree::Document::parse(&text).expect("well-formed XML");
    let most = (1000.0 - 1.0) * requests;
    let label = format!("{} (cut at the top; up to {most:.0}/s)", plot::RATE);
    let labels = svg
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter(|n| n.text().map(str::trim) == Some(label.as_str()));
    assert_eq!(labels.count(), 1);
    // The axis still fits the requests: the highest tick is below twice the most sent.
    let ticks: Vec<f64> = svg
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
        .filter_map(|n| n.text()?.trim().parse().ok())
        .collect();
    let highest = ticks.iter().copied().fold(0.0, f64::max);
    assert!(highest > 0.0 && highest < 2.0 * requests, "{ticks:?}");
    let rate = having(&svg, "polyline", "stroke", &colour(plot::RATE_COLOUR));
    let heights: std::collections::BTreeSet<&str> = rate[0]
        .attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| p.split_once(',').unwrap().1)
        .collect();
    assert_eq!(heights.len(), 1, "every reading drawn at the top");
}

#[tokio::test(start_paused = true)]
async fn a_picture_is_written_where_asked_and_a_bad_path_is_an_error() {
    let runs = tiny().await;
    let figure = Figure {
        title: "a tiny run",
        limit: &[(Duration::ZERO, 3.0)],
        runs: &runs,
    };
    let dir = std::env::temp_dir().join(format!("paceline-plots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.svg");
    plot::write(&figure, &path).unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(written, plot::svg(&figure).unwrap());

    let error = plot::write(&figure, &dir.join("gone").join("tiny.svg")).unwrap_err();
    let error = error
        .downcast::<std::io::Error>()
        .expect("the file system's error");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn requests_are_counted_per_second_in_bins() {
    let at = [0.2, 0.7, 1.5, 2.0, 3.9, 4.0];
    assert_eq!(
        plot::per_second(&at, SEC, 4 * SEC),
        [(0.5, 2.0), (1.5, 1.0), (2.5, 1.0), (3.5, 1.0)]
    );
    assert_eq!(
        plot::per_second(&at, 2 * SEC, 4 * SEC),
        [(1.0, 1.5), (3.0, 1.0)]
    );
}

#[tokio::test(start_paused = true)]
async fn spans_told_to_wait_merge_where_they_overlap() {
    let start = Instant::now();
    let rejected = |at_ms: u32, retry_after_ms: Option<u32>| paceline_sim::Request {
        ours: true,
        number: None,
        scope: None,
        sent: None,
        arrived: start + at_ms * MS,
        answered: None,
        sends_before_answer: None,
        outcome: paceline_sim::Outcome::Rejected {
            by: paceline_sim::Limit::Global,
            in_penalty: false,
        },
        retry_after: retry_after_ms.map(|ms| ms * MS),
    };
    let accepted = paceline_sim::Request {
        outcome: paceline_sim::Outcome::Accepted,
        retry_after: Some(60 * SEC),
        ..rejected(500, None)
    };
    let log = paceline_sim::Log::new(
        start,
        vec![
            rejected(0, Some(10_000)),
            rejected(2_000, Some(3_000)), // inside the first
            accepted,                     // no wait, whatever it says
            rejected(11_000, None),       // no Retry-After: no span
            rejected(12_000, Some(1_000)),
            rejected(13_000, Some(1_000)), // touching the one before
        ],
    );
    assert_eq!(plot::told_to_wait(&log), [(0.0, 10.0), (12.0, 14.0)]);
}

/// docs/scenarios.md shows `docs/s1.svg`: it must be what the example draws now. Redraw it
/// with `cargo run --example scenarios && cp target/scenarios/s1.svg docs/`.
#[tokio::test(start_paused = true)]
async fn the_picture_in_the_scenarios_doc_is_current() {
    let runs = s1_traced().await;
    let limit = s1_limit();
    let figure = Figure {
        title: S1_TITLE,
        limit: &limit,
        runs: &runs,
    };
    let committed = include_str!("../../docs/s1.svg");
    assert!(
        plot::svg(&figure).unwrap() == committed,
        "docs/s1.svg is stale: redraw it with \
         `cargo run --example scenarios && cp target/scenarios/s1.svg docs/`"
    );
}

/// docs/scenarios.md shows `docs/llm.svg`: it must be what the example draws now. Redraw it
/// with `cargo run --example scenarios --features http && cp target/scenarios/llm.svg docs/`.
#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn the_llm_picture_in_the_scenarios_doc_is_current() {
    let runs = crate::support::llm::picture_runs().await;
    let committed = include_str!("../../docs/llm.svg");
    assert!(
        crate::support::llm::picture(&runs).unwrap() == committed,
        "docs/llm.svg is stale: redraw it with \
         `cargo run --example scenarios --features http && cp target/scenarios/llm.svg docs/`"
    );
}

/// What docs/scenarios.md says of S1's picture, as the picture's runs give it: how soon the
/// gate's rate is cut below the limit, the band it keeps after, and the most the tasks alone
/// send, and the server accepts, in any second.
#[tokio::test(start_paused = true)]
async fn the_s1_pictures_figures_are_what_the_scenarios_doc_says() {
    let [gate, alone] = s1_traced().await;
    let limit = s1_limit()[0].1;
    let cut = gate
        .rate
        .iter()
        .position(|&(_, rate)| rate < limit)
        .unwrap();
    let after = &gate.rate[cut..];
    let low = after.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let high = after.iter().map(|r| r.1).fold(0.0, f64::max);
    let alone_sent = alone
        .log
        .max_in_window(SEC, paceline_sim::Which::OursArrived);
    let alone_accepted = alone.report.busiest_second;
    let figures = (
        format!("{:.1}", gate.rate[cut].0.as_secs_f64()),
        format!("{low:.1}"),
        format!("{high:.1}"),
        alone_sent,
        alone_accepted,
    );
    assert_eq!(
        figures,
        ("1.3".into(), "3.3".into(), "5.2".into(), 350, 7),
        "the gate cut below the limit by, the lowest and highest rate after, and the most the \
         tasks alone sent and the server accepted in any second"
    );
    shown(
        SCENARIOS_MD,
        &format!(
            "is cut below the limit within {} s; after that its rate stays between {} and {} \
             per second",
            figures.0, figures.1, figures.2
        ),
    );
    shown(
        SCENARIOS_MD,
        &format!(
            "The tasks alone send up to {alone_sent} requests in a second, of which the server \
             accepts at most {alone_accepted}"
        ),
    );
}
