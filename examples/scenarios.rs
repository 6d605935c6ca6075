//! The gate's scenarios against the simulated API, each beside its baseline, as a table, and
//! as a picture per scenario (SVG): requests sent and accepted per second beside the server's
//! limit, rejections marked, and the gate's rate.
//!
//! Runs in tokio's paused clock: hours of virtual time take well under a second.
//!
//! ```sh
//! cargo run --example scenarios
//! cargo run --example scenarios --features http   # and S3, read from HTTP headers, and
//!                                                  # the LLM API with another consumer
//! cargo run --example scenarios -- DIR            # the pictures in DIR
//! ```
//!
//! The pictures go to `target/scenarios/` of the workspace unless a directory is given; the
//! example prints where.

#[cfg(feature = "http")]
#[path = "../tests/support/llm.rs"]
mod llm;
#[path = "../tests/support/plot.rs"]
mod plot;
#[path = "../tests/support/scenarios.rs"]
mod scenarios;

use std::path::{Path, PathBuf};
use std::time::Duration;

use scenarios::*;

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/scenarios"));
    std::fs::create_dir_all(&dir)?;
    let mut drawn = Vec::new();

    let title = S1_TITLE;
    let runs = s1_traced().await;
    show(title, 250 * SEC, &runs);
    drawn.push(draw(&dir, "s1", title, &s1_limit(), &runs)?);

    let title = S1B_TITLE;
    let runs = s1b_traced().await;
    show(title, s1b_ideal(1000), &runs);
    drawn.push(draw(&dir, "s1b", title, &s1b_limit(), &runs)?);

    let title = S2_TITLE;
    let runs = s2_traced().await;
    show(title, 150 * SEC, &runs);
    drawn.push(draw(&dir, "s2", title, &s2_limit(), &runs)?);

    #[cfg(feature = "http")]
    {
        let title = S3_TITLE;
        print(title, 300 * SEC, &s3().await);
        let runs = s3_traced().await;
        drawn.push(draw(&dir, "s3", title, &s3_limit(), &runs)?);
    }
    #[cfg(feature = "http")]
    {
        let path = dir.join("llm.svg");
        std::fs::write(&path, llm::picture(&llm::picture_runs().await)?)?;
        drawn.push(path);
    }
    #[cfg(not(feature = "http"))]
    println!(
        "\nS3 (the announced quota, read from HTTP headers) and the LLM API's picture need \
         --features http."
    );
    println!(
        "\n'throttled' counts the server's rejections; 'in penalty' the requests that arrived\n\
         while a penalty ran. The baselines give up after 10 retries."
    );
    println!("\nPictures (paceline above, its baseline below):");
    for path in drawn {
        println!("  {}", path.display());
    }
    Ok(())
}

fn show(title: &str, ideal: Duration, runs: &[Run]) {
    let reports: Vec<Report> = runs.iter().map(|run| run.report.clone()).collect();
    print(title, ideal, &reports);
}

fn draw(
    dir: &Path,
    name: &str,
    title: &str,
    limit: &[(Duration, f64)],
    runs: &[Run],
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let path = dir.join(format!("{name}.svg"));
    let figure = plot::Figure { title, limit, runs };
    plot::write(&figure, &path)?;
    Ok(path)
}
