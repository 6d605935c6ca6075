//! The gate's scenarios against the simulated API, each beside its baseline, as a table.
//!
//! Runs in tokio's paused clock: hours of virtual time take well under a second.
//!
//! ```sh
//! cargo run --example scenarios
//! cargo run --example scenarios --features http   # and S3, read from HTTP headers
//! ```

#[path = "../tests/support/scenarios.rs"]
mod scenarios;

use scenarios::*;

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    print(
        "S1: token bucket 4/s burst 4, no Retry-After; 1000 calls from 50 tasks, start 10/s",
        250 * SEC,
        &s1().await,
    );
    print(
        "S1b: as S1, but 2/s from t = 100 s to 200 s",
        s1b_ideal(1000),
        &s1b().await,
    );
    print(
        "S2: 20/s, escalating penalty 15 s up to 15 min; 3000 calls from 60 tasks, start 25/s",
        150 * SEC,
        &s2().await,
    );
    #[cfg(feature = "http")]
    print(
        "S3: fixed window 100 per 10 s, announced on every answer; 3000 calls from 60 tasks, start 25/s",
        300 * SEC,
        &s3().await,
    );
    #[cfg(not(feature = "http"))]
    println!("\nS3 (the announced quota, read from HTTP headers) needs --features http.");
    println!(
        "\n'throttled' counts the server's rejections; 'in penalty' the requests that arrived\n\
         while a penalty ran. The baselines give up after 10 retries."
    );
}
