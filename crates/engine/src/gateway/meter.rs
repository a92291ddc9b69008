//! The run's spend, counted from what the model APIs answered (never from what an agent says
//! about itself), and the budgets (`--max-tokens`, `--max-cost`) enforced on it.
//!
//! Every metered answer (the gateway's, and the built-in worker's own requests) is
//! [`Meter::record`]ed: its tokens, priced by `[model] price` / `[model.prices]`, go to the
//! run's total and become a `model_usage` event. Once a budget is reached, [`Meter::exhausted`]
//! says why: the gateway refuses new requests, the scheduler starts no new task, and the
//! token returned by [`Meter::when_exhausted`] stops the agents still running.

use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventSink};
use crate::ids::TaskId;
use crate::report::Tokens;
use crate::settings::{ModelSettings, Settings};

/// What has been spent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spent {
    pub tokens: Tokens,
    pub cost_usd: f64,
    /// Metered answers.
    pub requests: u32,
}

impl Spent {
    pub(crate) fn add(&mut self, other: &Spent) {
        self.tokens.prompt = self.tokens.prompt.saturating_add(other.tokens.prompt);
        self.tokens.completion = self
            .tokens
            .completion
            .saturating_add(other.tokens.completion);
        self.cost_usd += other.cost_usd;
        self.requests = self.requests.saturating_add(other.requests);
    }

    pub(crate) fn total_tokens(&self) -> u64 {
        self.tokens.prompt.saturating_add(self.tokens.completion)
    }
}

pub(crate) struct Meter {
    model: ModelSettings,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
    spent: Mutex<Spent>,
    exhausted: CancellationToken,
    reason: OnceLock<String>,
    sink: Option<Arc<EventSink>>,
}

impl Meter {
    /// The meter of a run whose earlier attempts spent `already` (a resumed run).
    pub(crate) fn new(
        settings: &Settings,
        already: Spent,
        sink: Option<Arc<EventSink>>,
    ) -> Arc<Self> {
        let meter = Arc::new(Self {
            model: settings.model.clone(),
            max_tokens: settings.max_tokens,
            max_cost: settings.max_cost.as_ref().and_then(|c| c.as_f64()),
            spent: Mutex::new(already),
            exhausted: CancellationToken::new(),
            reason: OnceLock::new(),
            sink,
        });
        meter.check(&already);
        meter
    }

    /// Records one answer of `model` that used `tokens`, for `task`; returns what it cost
    /// (`None`: no price for that model).
    pub(crate) fn record(&self, task: Option<&TaskId>, model: &str, tokens: Tokens) -> Option<f64> {
        let cost = self.model.price_of(model).map(|p| p.of(&tokens));
        let total = {
            let mut spent = self.spent.lock().unwrap_or_else(|e| e.into_inner());
            spent.add(&Spent {
                tokens,
                cost_usd: cost.unwrap_or(0.0),
                requests: 1,
            });
            *spent
        };
        if let Some(sink) = &self.sink {
            sink.emit(Event::ModelUsage {
                task: task.cloned(),
                model: model.to_string(),
                prompt: tokens.prompt,
                completion: tokens.completion,
                cost_usd: cost,
            });
        }
        if cost.is_none() && self.max_cost.is_some() {
            self.exhaust(format!(
                "the run's cost cannot be counted: no price for model `{model}` (set [model] \
                 price or [model.prices] in your config)"
            ));
        }
        self.check(&total);
        cost
    }

    /// Everything spent so far.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> Spent {
        *self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the run may spend no more, once it may not.
    pub(crate) fn exhausted(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Cancelled once a budget is reached.
    pub(crate) fn when_exhausted(&self) -> &CancellationToken {
        &self.exhausted
    }

    fn check(&self, spent: &Spent) {
        let used = spent.total_tokens();
        if let Some(budget) = self.max_tokens
            && used >= budget
        {
            self.exhaust(format!(
                "the run's token budget is spent ({used} of --max-tokens {budget} used)"
            ));
        }
        if let Some(cap) = self.max_cost
            && spent.cost_usd >= cap
        {
            self.exhaust(format!(
                "the run's cost budget is spent (${:.2} of --max-cost ${cap:.2})",
                spent.cost_usd
            ));
        }
    }

    fn exhaust(&self, reason: String) {
        if self.reason.set(reason).is_ok() {
            self.exhausted.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn the_cost_budget_trips_on_metered_answers() {
        let meter = Meter::new(&settings(Some(0.01), None), Spent::default(), None);
        let tokens = Tokens {
            prompt: 1000,
            completion: 100,
        };
        // 1000 × $3/M + 100 × $15/M = $0.0045
        let cost = meter.record(None, "claude-sonnet-4", tokens).unwrap();
        assert!((cost - 0.0045).abs() < 1e-12);
        assert_eq!(meter.exhausted(), None);
        meter.record(None, "claude-sonnet-4", tokens);
        meter.record(None, "claude-sonnet-4", tokens);
        assert!(meter.when_exhausted().is_cancelled());
        assert_eq!(
            meter.exhausted(),
            Some("the run's cost budget is spent ($0.01 of --max-cost $0.01)")
        );
        assert_eq!(meter.spent().requests, 3);
    }

    #[test]
    fn an_unpriced_model_stops_a_run_with_a_cost_budget() {
        let meter = Meter::new(&settings(Some(5.0), None), Spent::default(), None);
        assert_eq!(meter.record(None, "gpt-x", Tokens::default()), None);
        assert!(
            meter
                .exhausted()
                .unwrap()
                .contains("no price for model `gpt-x`")
        );
        // Without a cost budget, it is only not counted.
        let meter = Meter::new(&settings(None, Some(100)), Spent::default(), None);
        meter.record(
            None,
            "gpt-x",
            Tokens {
                prompt: 60,
                completion: 0,
            },
        );
        assert_eq!(meter.exhausted(), None);
        meter.record(
            None,
            "gpt-x",
            Tokens {
                prompt: 40,
                completion: 0,
            },
        );
        assert!(meter.exhausted().unwrap().contains("token budget"));
    }

    #[test]
    fn a_resumed_run_starts_from_what_it_spent() {
        let already = Spent {
            cost_usd: 2.0,
            ..Spent::default()
        };
        assert!(
            Meter::new(&settings(Some(1.0), None), already, None)
                .exhausted()
                .is_some()
        );
        assert!(
            Meter::new(&settings(Some(5.0), None), already, None)
                .exhausted()
                .is_none()
        );
    }
}
