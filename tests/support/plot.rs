//! A picture of what the gate did in a scenario, drawn as SVG with plotters: one panel per
//! run (paceline above its baseline), over one time axis. Shared by `examples/scenarios.rs`
//! (which writes the pictures) and `tests/gate/plots.rs` (which checks them).
#![allow(dead_code, unreachable_pub)]

use std::error::Error;
use std::time::Duration;

use paceline_sim::Log;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::scenarios::Run;

/// A picture's size in pixels.
pub const SIZE: (u32, u32) = (1000, 820);

/// The labels of the series in each panel's legend, in the order they are drawn; a panel
/// without a gate has no rate.
pub const TOLD_TO_WAIT: &str = "told to wait (Retry-After)";
pub const LIMIT: &str = "server's limit";
pub const SENT: &str = "sent";
pub const ACCEPTED: &str = "accepted";
pub const REJECTED: &str = "rejected, no room";
pub const IN_PENALTY: &str = "rejected, in a penalty";
pub const RATE: &str = "gate's rate";

/// The series' colours: a test finds each series' lines by its colour.
pub const TOLD_TO_WAIT_COLOUR: RGBColor = RGBColor(255, 214, 170);
pub const LIMIT_COLOUR: RGBColor = RGBColor(50, 50, 50);
pub const SENT_COLOUR: RGBColor = RGBColor(160, 195, 240);
pub const ACCEPTED_COLOUR: RGBColor = RGBColor(30, 140, 60);
pub const REJECTED_COLOUR: RGBColor = RGBColor(220, 40, 40);
pub const IN_PENALTY_COLOUR: RGBColor = RGBColor(130, 0, 130);
pub const RATE_COLOUR: RGBColor = RGBColor(240, 130, 0);

/// What one picture shows: a scenario's runs, one panel each, beside the server's limit.
#[derive(Debug)]
pub struct Figure<'a> {
    pub title: &'a str,
    /// The server's limit as a rate: `(from, requests per second)`, the first from zero.
    pub limit: &'a [(Duration, f64)],
    pub runs: &'a [Run],
}

impl Figure<'_> {
    /// The time shown: until the last run ended, but at most twice as long as the first run
    /// (paceline's) took, so that a baseline that runs for days does not squash it.
    pub fn shown(&self) -> Duration {
        let longest = self.runs.iter().map(|r| r.report.elapsed).max();
        let first = self.runs.first().map(|r| r.report.elapsed);
        longest
            .unwrap_or_default()
            .min(2 * first.unwrap_or_default())
    }

    /// The width of the bins that requests are counted in: whole seconds, at most 400 bins.
    pub fn bin(&self) -> Duration {
        Duration::from_secs(self.shown().as_secs().div_ceil(400).max(1))
    }
}

/// The seconds since the log's start at which `which` of our requests reached the server.
fn arrivals<'a>(log: &'a Log, which: impl Fn(&paceline_sim::Request) -> bool + 'a) -> Vec<f64> {
    log.ours()
        .filter(|r| which(r))
        .map(|r| (r.arrived - log.start()).as_secs_f64())
        .collect()
}

/// `at` (seconds) counted in bins of `bin` over `[0, end)`, as `(bin's middle, per second)`.
pub fn per_second(at: &[f64], bin: Duration, end: Duration) -> Vec<(f64, f64)> {
    let (bin, end) = (bin.as_secs_f64(), end.as_secs_f64());
    let bins = (end / bin).ceil() as usize;
    let mut counts = vec![0usize; bins];
    for &t in at {
        if let Some(count) = counts.get_mut((t / bin) as usize) {
            *count += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &n)| ((i as f64 + 0.5) * bin, n as f64 / bin))
        .collect()
}

/// The spans during which a caller had been told to wait: each Retry-After our rejections
/// carried, from the rejection's arrival, merged where they overlap; in seconds.
pub fn told_to_wait(log: &Log) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = log
        .ours()
        .filter(|r| !r.is_accepted())
        .filter_map(|r| {
            let from = (r.arrived - log.start()).as_secs_f64();
            Some((from, from + r.retry_after?.as_secs_f64()))
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (from, to) in spans {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// The limit as the corners of a step line over `[0, end]`.
fn steps(limit: &[(Duration, f64)], end: f64) -> Vec<(f64, f64)> {
    let mut corners = Vec::new();
    for (i, &(from, rate)) in limit.iter().enumerate() {
        let to = limit.get(i + 1).map_or(end, |next| next.0.as_secs_f64());
        corners.push((from.as_secs_f64().min(end), rate));
        corners.push((to.min(end), rate));
    }
    corners
}

/// The figure as an SVG document.
pub fn svg(figure: &Figure<'_>) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(figure.title, ("sans-serif", 18))?;
        let panels = root.split_evenly((figure.runs.len().max(1), 1));
        for (area, run) in panels.iter().zip(figure.runs) {
            panel(area, figure, run)?;
        }
        root.present()?;
    }
    Ok(out)
}

/// Writes the figure's SVG to `path`.
pub fn write(figure: &Figure<'_>, path: &std::path::Path) -> Result<(), Box<dyn Error>> {
    std::fs::write(path, svg(figure)?)?;
    Ok(())
}

fn caption(figure: &Figure<'_>, run: &Run) -> String {
    let r = &run.report;
    let mut caption = format!(
        "{}: {:.1} s, {} done, {} gave up, {} throttled, {} in a penalty",
        r.who,
        r.elapsed.as_secs_f64(),
        r.done,
        r.gave_up,
        r.throttled,
        r.in_penalty
    );
    if r.elapsed > figure.shown() {
        caption += &format!(
            " (ran {:.0} s; the first {:.0} s shown)",
            r.elapsed.as_secs_f64(),
            figure.shown().as_secs_f64()
        );
    }
    caption
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    figure: &Figure<'_>,
    run: &Run,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let (shown, bin) = (figure.shown(), figure.bin());
    let end = shown.as_secs_f64();
    let sent = per_second(&arrivals(&run.log, |_| true), bin, shown);
    let accepted = per_second(&arrivals(&run.log, |r| r.is_accepted()), bin, shown);
    let rejected = per_second(
        &arrivals(&run.log, |r| !r.is_accepted() && !r.in_penalty()),
        bin,
        shown,
    );
    let in_penalty = per_second(&arrivals(&run.log, |r| r.in_penalty()), bin, shown);
    let limit = steps(figure.limit, end);
    let rate: Vec<(f64, f64)> = run
        .rate
        .iter()
        .map(|&(at, rate)| (at.as_secs_f64(), rate))
        .filter(|&(at, _)| at <= end)
        .collect();
    let highest = |series: &[(f64, f64)]| series.iter().map(|p| p.1).fold(1.0, f64::max);
    let requests = highest(&sent).max(highest(&limit));
    // A rate far above what was sent (one held back by something else, such as an announced
    // quota) would flatten the requests: the chart cuts it at the top, and its label says so.
    let highest_rate = highest(&rate);
    let cut = highest_rate > 3.0 * requests;
    let top = if cut {
        requests
    } else {
        requests.max(highest_rate)
    } * 1.15;
    let rate_label = if cut {
        format!("{RATE} (cut at the top; up to {highest_rate:.0}/s)")
    } else {
        RATE.to_owned()
    };

    let x_desc = format!(
        "seconds since the start (requests counted on arrival, in {} s bins)",
        bin.as_secs()
    );
    let caption = caption(figure, run);
    let mut chart = chart(area, &caption, (end, top), (&x_desc, "per second"))?;

    let told = told_to_wait(&run.log);
    chart
        .draw_series(told.iter().map(|&(from, to)| {
            Rectangle::new(
                [(from, 0.0), (to.min(end), top)],
                TOLD_TO_WAIT_COLOUR.filled(),
            )
        }))?
        .label(TOLD_TO_WAIT)
        .legend(|(x, y)| {
            Rectangle::new([(x, y - 5), (x + 16, y + 5)], TOLD_TO_WAIT_COLOUR.filled())
        });
    let line = |colour: RGBColor, width: u32| colour.stroke_width(width);
    chart
        .draw_series(LineSeries::new(limit, line(LIMIT_COLOUR, 2)))?
        .label(LIMIT)
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], LIMIT_COLOUR.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(sent, line(SENT_COLOUR, 4)))?
        .label(SENT)
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], SENT_COLOUR.stroke_width(4)));
    chart
        .draw_series(LineSeries::new(accepted, line(ACCEPTED_COLOUR, 1)))?
        .label(ACCEPTED)
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], ACCEPTED_COLOUR.stroke_width(2)));
    chart
        .draw_series(
            rejected
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|&p| Cross::new(p, 3, REJECTED_COLOUR.stroke_width(1))),
        )?
        .label(REJECTED)
        .legend(|(x, y)| Cross::new((x + 8, y), 3, REJECTED_COLOUR.stroke_width(1)));
    chart
        .draw_series(
            in_penalty
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|&p| TriangleMarker::new(p, 4, IN_PENALTY_COLOUR.filled())),
        )?
        .label(IN_PENALTY)
        .legend(|(x, y)| TriangleMarker::new((x + 8, y), 4, IN_PENALTY_COLOUR.filled()));
    if !run.rate.is_empty() {
        chart
            .draw_series(LineSeries::new(rate, line(RATE_COLOUR, 2)))?
            .label(rate_label)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RATE_COLOUR.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// A panel's chart: its caption, both axes from zero to `end` and `top`, labelled.
fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    (end, top): (f64, f64),
    (x_desc, y_desc): (&str, &str),
) -> Result<Chart<'a, DB>, Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 14))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..end, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .x_label_formatter(&|s| format!("{s:.0}"))
        .y_label_formatter(&|r| format!("{r:.0}"))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    Ok(chart)
}

/// A panel's chart, in seconds and per second.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The legend of the series drawn on `chart`, at `position`.
fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    position: SeriesLabelPosition,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .draw()?;
    Ok(())
}

/// A panel of the LLM picture: one client's run.
#[derive(Debug)]
pub struct TokensPanel<'a> {
    pub caption: String,
    /// When the server admitted each prompt, with the tokens it used.
    pub admitted: &'a [(Duration, u64)],
    /// When the server refused a prompt.
    pub refusals: &'a [Duration],
}

/// The series of the LLM picture, and their colours.
pub const TOKENS: &str = "tokens the prompts used (counted when admitted)";
pub const TOKENS_COLOUR: RGBColor = RGBColor(30, 140, 60);
pub const REFUSED: &str = "refused (429)";
pub const OTHERS_LEAVE: &str = "what the other consumer leaves";
pub const OTHERS_LEAVE_COLOUR: RGBColor = RGBColor(240, 130, 0);

/// The LLM picture: for each panel, the tokens the prompts used per second (in bins of
/// `bin`, counted when admitted), beside the server's refill (`limit`, tokens a second) and
/// what another consumer leaves of it (`left`), each refusal marked, over the first `end`.
/// The axis stops at twice the refill: the bucket's first fill, spent in the first seconds,
/// is cut at the top.
pub fn tokens_svg(
    title: &str,
    panels: &[TokensPanel<'_>],
    (limit, left): (f64, Option<f64>),
    (end, bin): (Duration, Duration),
) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 18))?;
        let areas = root.split_evenly((panels.len().max(1), 1));
        for (area, panel) in areas.iter().zip(panels) {
            tokens_panel(area, panel, (limit, left), (end, bin))?;
        }
        root.present()?;
    }
    Ok(out)
}

fn tokens_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &TokensPanel<'_>,
    (limit, left): (f64, Option<f64>),
    (shown, bin): (Duration, Duration),
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let (end, width) = (shown.as_secs_f64(), bin.as_secs_f64());
    let mut taken = vec![0u64; (end / width).ceil() as usize];
    for &(at, tokens) in panel.admitted {
        if let Some(bin) = taken.get_mut((at.as_secs_f64() / width) as usize) {
            *bin += tokens;
        }
    }
    let taken: Vec<(f64, f64)> = (taken.iter().enumerate())
        .map(|(i, &n)| ((i as f64 + 0.5) * width, n as f64 / width))
        .collect();
    let top = limit * 2.0;
    let x_desc =
        format!("seconds since the start (tokens counted when admitted, in {width:.0} s bins)");
    let axes = (x_desc.as_str(), "tokens per second");
    let mut chart = chart(area, &panel.caption, (end, top), axes)?;
    let flat = |rate: f64| vec![(0.0, rate), (end, rate)];
    chart
        .draw_series(LineSeries::new(flat(limit), LIMIT_COLOUR.stroke_width(2)))?
        .label(LIMIT)
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], LIMIT_COLOUR.stroke_width(2)));
    if let Some(left) = left {
        chart
            .draw_series(LineSeries::new(
                flat(left),
                OTHERS_LEAVE_COLOUR.stroke_width(2),
            ))?
            .label(OTHERS_LEAVE)
            .legend(|(x, y)| {
                PathElement::new([(x, y), (x + 16, y)], OTHERS_LEAVE_COLOUR.stroke_width(2))
            });
    }
    chart
        .draw_series(LineSeries::new(taken, TOKENS_COLOUR.stroke_width(2)))?
        .label(TOKENS)
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], TOKENS_COLOUR.stroke_width(2)));
    let refused = panel.refusals.iter().map(|at| at.as_secs_f64());
    let marks = refused.filter(|&at| at <= end).map(|at| (at, top * 0.05));
    chart
        .draw_series(marks.map(|p| Cross::new(p, 4, REJECTED_COLOUR.stroke_width(1))))?
        .label(REFUSED)
        .legend(|(x, y)| Cross::new((x + 8, y), 4, REJECTED_COLOUR.stroke_width(1)));
    legend(&mut chart, SeriesLabelPosition::UpperMiddle)
}
