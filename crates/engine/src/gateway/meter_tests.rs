use std::time::Duration;

use super::*;
use crate::settings::Layer;
use crate::settings::policy::Price;

fn settings(max_cost: Option<f64>, max_tokens: Option<u64>) -> Settings {
    let mut layer = Layer::default();
    layer.run.exec = Some("true".into());
    layer.run.max_cost = max_cost.and_then(serde_json::Number::from_f64);
    layer.run.max_tokens = max_tokens;
    layer.model.prices = Some(
        [(
            "claude-".to_string(),
            Price {
                prompt: 3.into(),
                completion: 15.into(),
            },
        )]
        .into(),
    );
    Settings::from_layer(layer).unwrap()
}

fn tokens(prompt: u64, completion: u64) -> Tokens {
    Tokens { prompt, completion }
}

/// Reserves `ask` and settles it with `used` at once.
async fn spend(meter: &Arc<Meter>, model: &str, ask: Tokens, used: Tokens) -> Charge {
    let r = meter.reserve(None, model, ask).await.unwrap();
    r.settle(Some((None, used)))
}

#[tokio::test]
async fn the_cost_budget_trips_on_metered_answers() {
    let meter = Meter::new(&settings(Some(0.01), None), Spent::default(), None);
    let used = tokens(1000, 100);
    // 1000 × $3/M + 100 × $15/M = $0.0045
    let charge = spend(&meter, "claude-sonnet-4", tokens(10, 10), used).await;
    assert!((charge.cost_usd.unwrap() - 0.0045).abs() < 1e-12);
    assert_eq!(charge.basis, UsageBasis::Metered);
    assert_eq!(meter.exhausted(), None);
    spend(&meter, "claude-sonnet-4", tokens(10, 10), used).await;
    spend(&meter, "claude-sonnet-4", tokens(10, 10), used).await;
    assert_eq!(
        meter.exhausted(),
        Some("the run's cost budget is spent ($0.01 of --max-cost $0.01)")
    );
    assert_eq!(meter.spent().requests, 3);
    let refused = meter.reserve(None, "claude-sonnet-4", tokens(1, 1)).await;
    assert!(
        refused
            .err()
            .unwrap()
            .contains("cannot cover another request")
    );
}

#[tokio::test]
async fn an_unpriced_model_stops_a_run_with_a_cost_budget() {
    let meter = Meter::new(&settings(Some(5.0), None), Spent::default(), None);
    let refused = meter.reserve(None, "gpt-x", tokens(1, 1)).await;
    assert!(
        refused
            .err()
            .unwrap()
            .contains("no price for model `gpt-x`")
    );
    assert!(meter.exhausted().unwrap().contains("no price"));
    // Without a cost budget, it is only not counted.
    let meter = Meter::new(&settings(None, Some(100)), Spent::default(), None);
    let charge = spend(&meter, "gpt-x", tokens(10, 10), tokens(60, 0)).await;
    assert_eq!(charge.cost_usd, None);
    assert_eq!(meter.exhausted(), None);
    spend(&meter, "gpt-x", tokens(10, 10), tokens(40, 0)).await;
    assert!(meter.exhausted().unwrap().contains("token budget is spent"));
}

#[tokio::test]
async fn a_resumed_run_starts_from_what_it_spent() {
    let already = Spent {
        cost_usd: 2.0,
        ..Spent::default()
    };
    let short = Meter::new(&settings(Some(1.0), None), already, None);
    assert!(short.exhausted().is_some());
    let room = Meter::new(&settings(Some(5.0), None), already, None);
    assert!(room.exhausted().is_none());
}

#[tokio::test]
async fn what_would_never_fit_is_refused_and_what_does_not_fit_yet_waits() {
    let meter = Meter::new(&settings(None, Some(1000)), Spent::default(), None);
    // Larger than the whole budget: refused at once, and the run is short from then on.
    let refused = meter.reserve(None, "m", tokens(100, 1000)).await;
    let why = refused.err().unwrap();
    assert!(
        why.contains("0 of --max-tokens 1000 used; the request may use 1100"),
        "{why}"
    );
    assert_eq!(meter.exhausted(), Some(why.as_str()));
    // 600 in flight: another 600 waits until the first settles, at what it used.
    let first = meter.reserve(None, "m", tokens(100, 500)).await.unwrap();
    let waiting = {
        let meter = meter.clone();
        tokio::spawn(async move { meter.reserve(None, "m", tokens(100, 500)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "a reservation that does not fit yet went through"
    );
    first.settle(Some((None, tokens(100, 20))));
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.held(), tokens(100, 500));
    // Released: nothing spent.
    second.release();
    assert_eq!(meter.spent().total_tokens(), 120);
    assert_eq!(meter.spent().requests, 1);
}

#[tokio::test]
async fn an_answer_whose_usage_cannot_be_read_is_charged_its_reservation() {
    let meter = Meter::new(&settings(Some(1.0), None), Spent::default(), None);
    let r = meter
        .reserve(None, "claude-x", tokens(1000, 4000))
        .await
        .unwrap();
    let charge = r.settle(None);
    assert_eq!(charge.basis, UsageBasis::Reservation);
    assert_eq!(charge.tokens, tokens(1000, 4000));
    // Dropped unsettled (the agent hung up): the same.
    drop(
        meter
            .reserve(None, "claude-x", tokens(1000, 4000))
            .await
            .unwrap(),
    );
    let spent = meter.spent();
    assert_eq!(spent.tokens, tokens(2000, 8000));
    assert!((spent.cost_usd - 2.0 * (0.003 + 0.06)).abs() < 1e-12);
}

#[tokio::test]
async fn the_spend_never_passes_the_budget_by_more_than_what_was_in_flight() {
    // 16 requests at once, each reserving 150 and using up to 200: whatever order they
    // settle in, what was let through never held more than the budget, and the overshoot
    // is at most what the requests in flight used beyond their reservations.
    let meter = Meter::new(&settings(None, Some(2000)), Spent::default(), None);
    let mut handles = Vec::new();
    for i in 0..16u64 {
        let meter = meter.clone();
        handles.push(tokio::spawn(async move {
            let mut spent = 0;
            while let Ok(r) = meter.reserve(None, "m", tokens(50, 100)).await {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..5))).await;
                spent += r
                    .settle(Some((None, tokens(50, 100 + (i % 3) * 25))))
                    .tokens
                    .completion;
            }
            spent
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let total = meter.spent().total_tokens();
    assert!(total >= 2000 - 150, "stopped early at {total}");
    // At most 2000 / 150 = 13 requests in flight at once, each at most 50 over.
    assert!(total <= 2000 + 13 * 50, "{total}");
    assert!(meter.exhausted().is_some());
}
