//! The run's spend, counted from what the model APIs answered (never from what an agent says
//! about itself), and the budgets (`--max-tokens`, `--max-cost`) enforced on it the way a
//! card payment is: authorised before, settled after.
//!
//! - **Reserve.** Before a model request leaves (the gateway's, the built-in worker's), it
//!   [`Meter::reserve`]s what it may spend: its input, estimated from its size, and the most
//!   output it asks for, priced by `[model] price` / `[model.prices]`. A reservation that
//!   would not fit in the budget even with nothing else in flight is refused, and the run
//!   is short from then on ([`Meter::exhausted`]: the scheduler starts no new task). One that
//!   does not fit *yet* waits for requests in flight to settle.
//! - **Settle.** When the answer ends, its reservation is settled with the usage the answer
//!   metered ([`Reservation::settle`]); an answer whose usage cannot be trusted (cut off,
//!   without usage, too large to read) is charged the whole reservation. Each settlement is a
//!   `model_usage` event.
//!
//! So spend plus what is reserved never exceeds a budget when a request is let through, and
//! the run can end over it only by what its requests in flight used beyond their
//! reservations (docs/AGENTS.md states the bound).

use std::sync::{Arc, Mutex, OnceLock};

use crate::events::{Event, EventSink, UsageBasis};
use crate::ids::TaskId;
use crate::report::Tokens;
use crate::settings::{ModelSettings, Settings};

/// The output a request reserves when it names no cap and `[model] max_output_tokens` is
/// not set (docs/AGENTS.md).
pub(crate) const DEFAULT_OUTPUT_RESERVATION: u64 = 16_384;

/// The input tokens of a request `bytes` long, as reserved: a token for every 4 bytes of the
/// request's body (JSON, tools and all), rounded up.
pub(crate) fn estimated_input(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

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

    fn sub(&mut self, other: &Spent) {
        self.tokens.prompt = self.tokens.prompt.saturating_sub(other.tokens.prompt);
        self.tokens.completion = self
            .tokens
            .completion
            .saturating_sub(other.tokens.completion);
        self.requests = self.requests.saturating_sub(other.requests);
        // Sums of floats drift: nothing in flight is exactly nothing.
        self.cost_usd = match self.requests {
            0 => 0.0,
            _ => (self.cost_usd - other.cost_usd).max(0.0),
        };
    }

    pub(crate) fn total_tokens(&self) -> u64 {
        self.tokens.prompt.saturating_add(self.tokens.completion)
    }
}

/// What the run has spent, and what its requests in flight may still spend.
#[derive(Debug, Default)]
struct Book {
    spent: Spent,
    reserved: Spent,
}

pub(crate) struct Meter {
    model: ModelSettings,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
    book: Mutex<Book>,
    /// Woken at each settlement, for the reservations that wait for room.
    settled: tokio::sync::Notify,
    reason: OnceLock<String>,
    sink: Option<Arc<EventSink>>,
}

/// A request's place in the budget, from before it is sent until its answer ends. Dropped
/// without [`Reservation::settle`] or [`Reservation::release`], it is charged whole.
pub(crate) struct Reservation {
    meter: Arc<Meter>,
    task: Option<TaskId>,
    /// The model asked for.
    model: String,
    held: Spent,
    done: bool,
}

/// What one answer was charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Charge {
    pub tokens: Tokens,
    /// `None`: no price for the model.
    pub cost_usd: Option<f64>,
    pub basis: UsageBasis,
}

/// Does a reservation fit?
enum Fit {
    Now,
    /// Once requests in flight have settled.
    Later,
    /// Not even with nothing in flight: why.
    Never(String),
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
            book: Mutex::new(Book {
                spent: already,
                reserved: Spent::default(),
            }),
            settled: tokio::sync::Notify::new(),
            reason: OnceLock::new(),
            sink,
        });
        meter.check(&already);
        meter
    }

    /// Reserves what a request for `model` may spend (`ask`: its estimated input, its most
    /// output), waiting while requests in flight hold the room it needs; `Err` says why it
    /// can never fit.
    pub(crate) async fn reserve(
        self: &Arc<Self>,
        task: Option<&TaskId>,
        model: &str,
        ask: Tokens,
    ) -> Result<Reservation, String> {
        let cost = match self.model.price_of(model) {
            Some(price) => price.of(&ask),
            None if self.max_cost.is_some() => {
                let why = no_price(model);
                self.exhaust(why.clone());
                return Err(why);
            }
            None => 0.0,
        };
        let held = Spent {
            tokens: ask,
            cost_usd: cost,
            requests: 1,
        };
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
                match self.fits(&book, &held) {
                    Fit::Now => {
                        book.reserved.add(&held);
                        return Ok(Reservation {
                            meter: self.clone(),
                            task: task.cloned(),
                            model: model.to_string(),
                            held,
                            done: false,
                        });
                    }
                    Fit::Never(why) => {
                        drop(book);
                        self.exhaust(why.clone());
                        return Err(why);
                    }
                    Fit::Later => {}
                }
            }
            settled.await;
        }
    }

    fn fits(&self, book: &Book, held: &Spent) -> Fit {
        let ask = held.total_tokens();
        if let Some(budget) = self.max_tokens {
            let spent = book.spent.total_tokens();
            if spent.saturating_add(ask) > budget {
                return Fit::Never(format!(
                    "the run's token budget cannot cover another request ({spent} of \
                     --max-tokens {budget} used; the request may use {ask}: its input and the \
                     most output it asks for)"
                ));
            }
            if spent
                .saturating_add(book.reserved.total_tokens())
                .saturating_add(ask)
                > budget
            {
                return Fit::Later;
            }
        }
        if let Some(cap) = self.max_cost {
            let spent = book.spent.cost_usd;
            if spent + held.cost_usd > cap {
                return Fit::Never(format!(
                    "the run's cost budget cannot cover another request (${spent:.2} of \
                     --max-cost ${cap:.2} spent; the request may cost ${:.2})",
                    held.cost_usd
                ));
            }
            if spent + book.reserved.cost_usd + held.cost_usd > cap {
                return Fit::Later;
            }
        }
        Fit::Now
    }

    /// The output a request that names no cap reserves: `[model] max_output_tokens`, else
    /// [`DEFAULT_OUTPUT_RESERVATION`].
    pub(crate) fn output_cap(&self) -> u64 {
        self.model
            .max_output_tokens
            .map_or(DEFAULT_OUTPUT_RESERVATION, u64::from)
    }

    /// Why the run may spend no more, once it may not.
    pub(crate) fn exhausted(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Everything spent so far.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> Spent {
        self.book.lock().unwrap_or_else(|e| e.into_inner()).spent
    }

    /// Ends `r`: `Some` what its answer metered (the model that answered, if it said, and
    /// its tokens), `None` for the whole reservation.
    fn settle(&self, r: &mut Reservation, metered: Option<(Option<String>, Tokens)>) -> Charge {
        r.done = true;
        let (model, tokens, basis) = match metered {
            Some((answered, tokens)) => (
                answered.unwrap_or_else(|| r.model.clone()),
                tokens,
                UsageBasis::Metered,
            ),
            None => (r.model.clone(), r.held.tokens, UsageBasis::Reservation),
        };
        // The answer may name its model more precisely than the request did.
        let price = self
            .model
            .price_of(&model)
            .or_else(|| self.model.price_of(&r.model));
        let cost = price.map(|p| p.of(&tokens));
        let total = {
            let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
            book.reserved.sub(&r.held);
            book.spent.add(&Spent {
                tokens,
                cost_usd: cost.unwrap_or(0.0),
                requests: 1,
            });
            book.spent
        };
        if let Some(sink) = &self.sink {
            sink.emit(Event::ModelUsage {
                task: r.task.clone(),
                model: model.clone(),
                prompt: tokens.prompt,
                completion: tokens.completion,
                cost_usd: cost,
                basis,
            });
        }
        if cost.is_none() && self.max_cost.is_some() {
            self.exhaust(no_price(&model));
        }
        self.check(&total);
        self.settled.notify_waiters();
        Charge {
            tokens,
            cost_usd: cost,
            basis,
        }
    }

    /// Ends `r` with nothing spent (an error answer, which the APIs do not bill).
    fn release(&self, r: &mut Reservation) {
        r.done = true;
        self.book
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserved
            .sub(&r.held);
        self.settled.notify_waiters();
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
        let _ = self.reason.set(reason);
    }
}

fn no_price(model: &str) -> String {
    format!(
        "the run's cost cannot be counted: no price for model `{model}` (set [model] price or \
         [model.prices] in your config)"
    )
}

impl Reservation {
    /// Settles with what the answer metered (`Some`: the model that answered, if it said,
    /// and its tokens), or charges the whole reservation (`None`: its usage cannot be
    /// trusted).
    pub(crate) fn settle(mut self, metered: Option<(Option<String>, Tokens)>) -> Charge {
        let meter = self.meter.clone();
        meter.settle(&mut self, metered)
    }

    /// Gives the room back with nothing spent: the request failed with an error the API
    /// does not bill.
    pub(crate) fn release(mut self) {
        let meter = self.meter.clone();
        meter.release(&mut self);
    }

    /// What it holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> Tokens {
        self.held.tokens
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let meter = self.meter.clone();
            meter.settle(self, None);
        }
    }
}

#[cfg(test)]
#[path = "meter_tests.rs"]
mod tests;
