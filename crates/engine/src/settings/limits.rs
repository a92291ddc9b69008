//! The limits a repository's `swarm.toml` may tighten but never loosen.
//!
//! - The run's budgets (`max_tokens`, `max_cost`) and the prices they are counted at: a
//!   budget you set (command line, `SWARM_*`, your config) stands unless the repository asks
//!   for less, a price unless it asks for more.
//! - `jobs`, `timeout`, `idle_timeout`, `max_turns`: the command line and `SWARM_*` beat the
//!   repository as always; the repository's value beats your config file only when lower.
//!
//! What the repository asks for beyond that is ignored with a warning; where you set
//! nothing, its value applies.

use std::collections::BTreeMap;
use std::fmt::Display;

use super::layer::Layer;
use super::policy::Price;

/// The limits of `repo`, taken out of it, to be applied with [`apply`] once the other
/// layers are combined.
#[derive(Default)]
pub(crate) struct RepositoryLimits {
    jobs: Option<usize>,
    timeout: Option<u64>,
    idle_timeout: Option<u64>,
    max_turns: Option<u32>,
    merge_timeout: Option<u64>,
    max_tokens: Option<u64>,
    max_cost: Option<serde_json::Number>,
    price: Option<Price>,
    prices: Option<BTreeMap<String, Price>>,
}

impl RepositoryLimits {
    pub(crate) fn take(repo: &mut Layer) -> Self {
        Self {
            jobs: repo.run.jobs.take(),
            timeout: repo.run.timeout.take(),
            idle_timeout: repo.run.idle_timeout.take(),
            max_turns: repo.run.max_turns.take(),
            merge_timeout: repo.merge.timeout.take(),
            max_tokens: repo.run.max_tokens.take(),
            max_cost: repo.run.max_cost.take(),
            price: repo.model.price.take(),
            prices: repo.model.prices.take(),
        }
    }
}

/// Which counts the command line or `SWARM_*` gave: those the repository does not touch.
pub(crate) struct Given {
    jobs: bool,
    timeout: bool,
    idle_timeout: bool,
    max_turns: bool,
}

impl Given {
    pub(crate) fn by(command_line: &Layer) -> Self {
        let run = &command_line.run;
        Self {
            jobs: run.jobs.is_some(),
            timeout: run.timeout.is_some(),
            idle_timeout: run.idle_timeout.is_some(),
            max_turns: run.max_turns.is_some(),
        }
    }
}

/// `mine` (every layer but the repository's, combined) with the repository's limits where
/// they are tighter than, or in place of, the user's.
pub(crate) fn apply(
    mine: &mut Layer,
    repo: RepositoryLimits,
    given: &Given,
    warnings: &mut Vec<String>,
) {
    let repo = RepositoryLimits {
        jobs: repo.jobs.filter(|_| !given.jobs),
        timeout: repo.timeout.filter(|_| !given.timeout),
        idle_timeout: repo.idle_timeout.filter(|_| !given.idle_timeout),
        max_turns: repo.max_turns.filter(|_| !given.max_turns),
        ..repo
    };
    let mut warn = |key: &str, asked: String, kept: String| {
        warnings.push(format!(
            "swarm.toml sets {key} = {asked}; ignored: a repository may only lower a limit you \
             set ({kept})"
        ))
    };
    let run = &mut mine.run;
    lower_only("[run] jobs", &mut run.jobs, repo.jobs, &mut warn);
    lower_only("[run] timeout", &mut run.timeout, repo.timeout, &mut warn);
    lower_only(
        "[run] idle_timeout",
        &mut run.idle_timeout,
        repo.idle_timeout,
        &mut warn,
    );
    lower_only(
        "[run] max_turns",
        &mut run.max_turns,
        repo.max_turns,
        &mut warn,
    );
    lower_only(
        "[merge] timeout",
        &mut mine.merge.timeout,
        repo.merge_timeout,
        &mut warn,
    );
    lower_only(
        "[run] max_tokens",
        &mut run.max_tokens,
        repo.max_tokens,
        &mut warn,
    );
    let as_f64 = |n: Option<serde_json::Number>| n.and_then(|n| n.as_f64());
    let mut cost = as_f64(run.max_cost.take());
    lower_only(
        "[run] max_cost",
        &mut cost,
        as_f64(repo.max_cost),
        &mut warn,
    );
    run.max_cost = cost.and_then(serde_json::Number::from_f64);
    let model = &mut mine.model;
    model.price = raise_only("[model] price", model.price.take(), repo.price, &mut warn);
    if let Some(theirs) = repo.prices {
        let ours = model.prices.get_or_insert_with(BTreeMap::new);
        for (name, price) in theirs {
            let key = format!("[model.prices] \"{name}\"");
            let kept = raise_only(&key, ours.remove(&name), Some(price), &mut warn);
            ours.extend(kept.map(|p| (name, p)));
        }
    }
}

/// `mine` becomes `theirs` when that is lower, or when `mine` is not set.
fn lower_only<T: PartialOrd + Display + Copy>(
    key: &str,
    mine: &mut Option<T>,
    theirs: Option<T>,
    warn: &mut impl FnMut(&str, String, String),
) {
    match (*mine, theirs) {
        (_, None) => {}
        (None, Some(t)) => *mine = Some(t),
        (Some(m), Some(t)) if t <= m => *mine = Some(t),
        (Some(m), Some(t)) => warn(key, t.to_string(), format!("{m}")),
    }
}

/// A price of the repository's counts when it is at least yours (or you set none).
fn raise_only(
    key: &str,
    mine: Option<Price>,
    theirs: Option<Price>,
    warn: &mut impl FnMut(&str, String, String),
) -> Option<Price> {
    match (mine, theirs) {
        (mine, None) => mine,
        (None, Some(t)) => Some(t),
        (Some(m), Some(t)) if t.at_least(&m) => Some(t),
        (Some(m), Some(t)) => {
            warn(
                key,
                format!("{{ prompt = {}, completion = {} }}", t.prompt, t.completion),
                format!("prompt {}, completion {}", m.prompt, m.completion),
            );
            Some(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(p: f64, c: f64) -> Price {
        Price {
            prompt: serde_json::Number::from_f64(p).unwrap(),
            completion: serde_json::Number::from_f64(c).unwrap(),
        }
    }

    #[test]
    fn a_repository_lowers_limits_and_raises_prices_never_the_reverse() {
        let mut mine = Layer::default();
        mine.run.max_cost = serde_json::Number::from_f64(1.0);
        mine.run.jobs = Some(8);
        mine.model.price = Some(price(3.0, 15.0));
        let mut repo = Layer::default();
        repo.run.max_cost = serde_json::Number::from_f64(100000.0);
        repo.run.jobs = Some(2);
        repo.run.max_tokens = Some(5000);
        repo.model.price = Some(price(0.0, 0.0));
        let mut warnings = Vec::new();
        let given = Given::by(&Layer::default());
        apply(
            &mut mine,
            RepositoryLimits::take(&mut repo),
            &given,
            &mut warnings,
        );
        assert_eq!(mine.run.max_cost.and_then(|n| n.as_f64()), Some(1.0));
        assert_eq!(mine.run.jobs, Some(2));
        assert_eq!(mine.run.max_tokens, Some(5000));
        assert_eq!(mine.model.price, Some(price(3.0, 15.0)));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("[run] max_cost = 100000"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("[model] price"), "{warnings:?}");
    }
}
