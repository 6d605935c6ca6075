//! The pages that show the tests' figures (README.md, docs/scenarios.md): a test that asserts
//! a figure also asserts that the page shows it as the test computes it, so that the page
//! cannot drift from the assertion.

/// A page, by its name and its text.
pub type Page = (&'static str, &'static str);

pub const README: Page = ("README.md", include_str!("../../README.md"));
pub const SCENARIOS_MD: Page = ("docs/scenarios.md", include_str!("../../docs/scenarios.md"));

/// Asserts that `page` shows `figure`, its line breaks and runs of spaces read as one space.
#[track_caller]
pub fn shown((name, text): Page, figure: &str) {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(figure),
        "{name} does not show `{figure}`, as the test computes it: update the page"
    );
}

/// `n` with its thousands apart, as the pages write them: 6,790.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
