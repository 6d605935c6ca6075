//! The LLM scenario (`support/llm.rs`): a simulated LLM API that limits requests and tokens
//! a minute and announces both on every answer, called with a batch of prompts by a gate that
//! reads every announced budget and draws each prompt's tokens, one that paces requests at the
//! stated request limit only, and one that reads nothing, in the same run; in paused time, in
//! either provider's dialect; and with another consumer of the same key.

use paceline_sim::LlmDialect;

use crate::support::llm::*;
use crate::support::pages::{SCENARIOS_MD, shown};

async fn scenario(dialect: LlmDialect) -> [Run; 4] {
    let clients = [
        Client::EveryDimension,
        Client::HeadersOnly,
        Client::RequestsOnly,
        Client::Unpaced,
    ];
    let mut runs = Vec::new();
    for client in clients {
        let run = run(client, dialect, 0).await;
        println!(
            "{dialect:?} {client:?}: {:.1} s (ideal {:.1} s), {} refused, {} tokens",
            run.elapsed,
            ideal(run.tokens),
            run.refused,
            run.tokens
        );
        runs.push(run);
    }
    runs.try_into().unwrap()
}

#[tokio::test(start_paused = true)]
async fn llm_openai_a_gate_reading_every_dimension_is_never_refused() {
    let [every, headers, requests, unpaced] = scenario(LlmDialect::OpenAi).await;
    // The same prompts and answers (the server's seed) for all three.
    assert_eq!(every.tokens, requests.tokens);
    assert_eq!(every.tokens, unpaced.tokens);
    // docs/scenarios.md's table, exactly (the simulation repeats itself).
    let figures = |run: &Run| (run.elapsed, run.refused);
    assert_eq!(every.tokens, 137_122);
    assert_eq!(figures(&every), (352.9, 0));
    assert_eq!(figures(&headers), (352.9, 3));
    assert_eq!(figures(&requests), (353.0, 102));
    assert_eq!(figures(&unpaced), (353.0, 148));
    shown(
        SCENARIOS_MD,
        &format!(
            "The answers used {} tokens: the tokens bind, and their ideal is {:.1} s",
            crate::support::pages::grouped(every.tokens),
            ideal(every.tokens)
        ),
    );
    shown(
        SCENARIOS_MD,
        &format!(
            "never refused, at {:.3} times the ideal",
            every.elapsed / ideal(every.tokens)
        ),
    );
    // What must hold whatever the figures: never refused, within 25 % of the ideal.
    assert_eq!(every.refused, 0);
    assert!(requests.refused > 0 && unpaced.refused > 0);
    let slack = every.elapsed / ideal(every.tokens);
    assert!(slack < 1.25, "{slack:.2} of the binding dimension's ideal");
}

#[tokio::test(start_paused = true)]
async fn llm_anthropic_a_gate_reading_every_dimension_is_never_refused() {
    let [every, headers, requests, unpaced] = scenario(LlmDialect::Anthropic).await;
    let figures = |run: &Run| (run.elapsed, run.refused);
    assert_eq!(figures(&every), (352.9, 0));
    assert_eq!(figures(&headers), (352.9, 3));
    assert_eq!(figures(&requests), (353.0, 102));
    assert_eq!(figures(&unpaced), (353.0, 148));
    // docs/scenarios.md's table, each row both dialects' figures.
    let openai = scenario(LlmDialect::OpenAi).await;
    for (openai, anthropic) in openai.iter().zip([&every, &headers, &requests, &unpaced]) {
        let cell = |run: &Run| format!("{:.1} s, {} refused", run.elapsed, run.refused);
        shown(
            SCENARIOS_MD,
            &format!("| {} | {} |", cell(openai), cell(anthropic)),
        );
    }
    assert_eq!(every.refused, 0);
    assert!(requests.refused > 0 && unpaced.refused > 0);
    let slack = every.elapsed / ideal(every.tokens);
    assert!(slack < 1.25, "{slack:.2} of the binding dimension's ideal");
}

/// Another consumer of the same key spends 10, 30 or 50 % of the tokens a minute, evenly. The
/// gate told the limits alone overspends and is refused; reading the answers, it reads the
/// others' pace from what the bucket fell by beyond its own spending, and keeps to what they
/// leave.
#[tokio::test(start_paused = true)]
async fn llm_other_consumers_leave_the_gate_what_they_do_not_take() {
    let (mut figures, mut ideals, mut refusals) = (Vec::new(), Vec::new(), Vec::<Vec<u64>>::new());
    for percent in [10, 30, 50] {
        let others = TPM * percent / 100;
        for client in [
            Client::EveryDimension,
            Client::ToldOnly,
            Client::HeadersOnly,
        ] {
            let run = run(client, LlmDialect::OpenAi, others).await;
            // What the bucket holds at the start, then what the others leave, at its pace.
            let ideal = run.tokens.saturating_sub(TPM) as f64 * 60.0 / (TPM - others) as f64;
            if client == Client::EveryDimension {
                ideals.push(format!("{ideal:.1}"));
            }
            println!(
                "others {percent} %, {client:?}: {:.1} s (ideal {ideal:.1} s), {} refused",
                run.elapsed, run.refused
            );
            if client != Client::ToldOnly {
                let slack = run.elapsed / ideal;
                assert!(slack < 1.02, "{client:?}: {slack:.3} of the ideal");
            }
            if client != Client::ToldOnly {
                let ms = run
                    .refusals
                    .iter()
                    .map(|at| at.as_millis() as u64)
                    .collect();
                refusals.push(ms);
            }
            figures.push((run.elapsed, run.refused));
        }
    }
    // docs/scenarios.md's figures, exactly (the simulation repeats itself).
    assert_eq!(
        figures,
        [
            (392.0, 1),
            (392.5, 8),
            (392.0, 4),
            (504.0, 1),
            (505.5, 31),
            (504.0, 4),
            (705.4, 2),
            (708.2, 67),
            (705.4, 5),
        ]
    );
    assert_eq!(ideals, ["390.4", "502.0", "702.7"]);
    // When the server refused them, in ms: told the limits, once at 2.1 to 2.3 s (at 50 %,
    // again at 13.0 s); told no limit, three times in its first burst, then once or twice
    // more before its first reading.
    assert_eq!(
        refusals,
        [
            vec![2_070],
            vec![50, 50, 50, 3_380],
            vec![2_203],
            vec![50, 50, 50, 6_058],
            vec![2_336, 13_033],
            vec![50, 50, 50, 3_894, 6_953],
        ]
    );
    for ((percent, ideal), rows) in ["10 %", "30 %", "50 %"]
        .iter()
        .zip(&ideals)
        .zip(figures.chunks(3))
    {
        let cell = |(elapsed, refused): (f64, u64)| format!("{elapsed:.1} s, {refused} refused");
        shown(
            SCENARIOS_MD,
            &format!(
                "| {percent} | {ideal} s | {} | {} | {} |",
                cell(rows[0]),
                cell(rows[1]),
                cell(rows[2])
            ),
        );
    }
}
