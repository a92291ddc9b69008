//! What a tool call may ask for. Its arguments come from a model: they become a settings
//! layer of their own, which the engine holds to the rule of a plan file under the server's
//! own settings (the one place that decides what may weaken the sandbox); here they are
//! checked against the server's caps (jobs, budgets, the agents that may run, pathspecs
//! inside the repository). A call asking for more is refused with a message the model can
//! read, before anything runs.

use std::path::{Component, Path};
use std::str::FromStr;

use swarm_engine::app::reconcile::Overrides;
use swarm_engine::app::settings::Layer;

use crate::params::Work;

/// What the server allows, from `swarm mcp`'s command line.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// The server's own settings for every run (`--sandbox`, `--network`, `--allow-domain`):
    /// the command line's layer of each run it plans and starts.
    pub server: Layer,
    /// The most workers at a time a call may ask for.
    pub max_jobs: Option<usize>,
    /// The spending cap of each run, in US dollars: a call may ask for less.
    pub max_cost: Option<f64>,
    /// The token budget of each run: a call may ask for less.
    pub max_tokens: Option<u64>,
    /// The coding agents a call may name (`--allow-agent`); none by default.
    pub agents: Vec<String>,
}

impl Limits {
    /// `Err` says, for the model, what `work` asks for beyond the server's limits.
    pub(crate) fn check(&self, work: &Work) -> Result<(), String> {
        for spec in &work.pathspecs {
            outside(spec)?;
        }
        self.check_jobs(work.jobs)?;
        if let (Some(asked), Some(most)) = (work.max_cost, self.max_cost)
            && asked > most
        {
            return Err(format!(
                "max_cost: at most {most} USD (the server's), not {asked}"
            ));
        }
        if let (Some(asked), Some(most)) = (work.max_tokens, self.max_tokens)
            && asked > most
        {
            return Err(format!(
                "max_tokens: at most {most} (the server's), not {asked}"
            ));
        }
        if let Some(agent) = &work.agent
            && !self.agents.contains(agent)
        {
            return Err(format!(
                "agent {agent}: this server runs {}; the user allows agents with `swarm mcp \
                 --allow-agent NAME`",
                match self.agents.as_slice() {
                    [] => "no coding agent".to_string(),
                    some => format!("only {}", some.join(", ")),
                }
            ));
        }
        Ok(())
    }

    /// `Err` says, for the model, that `jobs` is more than the server allows.
    pub(crate) fn check_jobs(&self, jobs: Option<usize>) -> Result<(), String> {
        match (jobs, self.max_jobs) {
            (Some(asked), Some(most)) if asked > most => Err(format!(
                "jobs: at most {most} (the server's limit), not {asked}"
            )),
            _ => Ok(()),
        }
    }

    /// The settings `work` asks for, checked against the server's limits: a layer the
    /// engine holds to the rule of a plan file under [`Limits::server`] (it may not weaken
    /// the sandbox, define an agent or send a key off this machine). A limit is a default as
    /// well as a cap: what the call leaves out is the server's (the budgets), or what the run
    /// would get (`default_jobs`, the repository's and the user's settings) held to the
    /// server's cap.
    pub(crate) fn call_layer(
        &self,
        work: &Work,
        default_jobs: impl FnOnce() -> Result<usize, String>,
    ) -> Result<Layer, String> {
        self.check(work)?;
        let mut layer = Layer::default();
        let run = &mut layer.run;
        run.jobs = match (work.jobs, self.max_jobs) {
            (None, Some(most)) => Some(default_jobs()?.min(most)),
            (asked, _) => asked,
        };
        run.exec = work.exec.clone();
        layer.set_worker(work.agent.clone(), work.model.clone());
        let run = &mut layer.run;
        run.batch = work.batch;
        run.per_process = keyword("per_process", &work.per_process)?;
        run.verify = work.verify.clone();
        run.verify_merged = work.verify_merged.clone();
        run.scope = keyword("scope", &work.scope)?;
        run.on_conflict = keyword("on_conflict", &work.on_conflict)?;
        layer.merge.with = keyword("merge_with", &work.merge_with)?;
        let run = &mut layer.run;
        run.ok_exit_codes = work.ok_exit_codes.clone();
        run.timeout = work.timeout;
        run.tries = work.tries;
        run.best_of = work.best_of;
        run.max_cost = work
            .max_cost
            .or(self.max_cost)
            .map(|usd| {
                serde_json::Number::from_f64(usd)
                    .ok_or_else(|| format!("max_cost: {usd} is not a number of dollars"))
            })
            .transpose()?;
        run.max_tokens = work.max_tokens.or(self.max_tokens);
        run.atomic = work.atomic.filter(|atomic| *atomic);
        Ok(layer)
    }
}

/// What a `resume` call changes of the run's settings (`jobs`, `scope`, `ok_exit_codes`), as
/// `swarm resume` would; `Err` names what is wrong with it.
pub(crate) fn overrides(what: &crate::params::Continue) -> Result<Overrides, String> {
    if let Some(codes) = &what.ok_exit_codes {
        swarm_engine::app::settings::check_ok_exit_codes(codes).map_err(|e| e.to_string())?;
    }
    Ok(Overrides {
        jobs: what.jobs,
        scope: keyword("scope", &what.scope)?,
        ok_exit_codes: what.ok_exit_codes.clone(),
        ..Default::default()
    })
}

/// A keyword argument (`scope`, `on_conflict`, `per_process`) as the setting it names.
fn keyword<T: FromStr<Err = String>>(
    name: &str,
    value: &Option<String>,
) -> Result<Option<T>, String> {
    value
        .as_deref()
        .map(|v| v.parse().map_err(|e| format!("{name}: {e}")))
        .transpose()
}

/// `Err` for a pathspec that names something outside the repository (absolute, or with a
/// `..` component): tool arguments stay in the repository the server serves.
fn outside(spec: &str) -> Result<(), String> {
    let path = Path::new(spec);
    let escapes = path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::RootDir));
    match escapes {
        true => Err(format!(
            "pathspec {spec:?}: paths are relative to the repository and stay inside it"
        )),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_may_narrow_but_not_widen() {
        let limits = Limits {
            max_jobs: Some(4),
            max_cost: Some(2.0),
            ..Limits::default()
        };
        let work = |f: &dyn Fn(&mut Work)| {
            let mut w = Work {
                instruction: "x".into(),
                ..Work::default()
            };
            f(&mut w);
            w
        };
        assert!(limits.check(&work(&|w| w.jobs = Some(2))).is_ok());
        assert!(limits.check(&work(&|w| w.jobs = Some(8))).is_err());
        assert!(limits.check(&work(&|w| w.max_cost = Some(5.0))).is_err());
        assert!(
            limits
                .check(&work(&|w| w.agent = Some("claude".into())))
                .is_err()
        );
        for spec in ["/etc/passwd", "../x", "src/../../x"] {
            assert!(
                limits
                    .check(&work(&|w| w.pathspecs = vec![spec.into()]))
                    .is_err()
            );
        }
        // The server's limits apply when the call names none: its budget, and its cap on the
        // jobs a run would get.
        let layer = limits.call_layer(&work(&|_| {}), || Ok(16)).unwrap();
        assert_eq!(layer.run.max_cost, serde_json::Number::from_f64(2.0));
        assert_eq!(layer.run.jobs, Some(4));
        let layer = limits.call_layer(&work(&|_| {}), || Ok(2)).unwrap();
        assert_eq!(layer.run.jobs, Some(2));
        let asked = work(&|w| w.jobs = Some(3));
        let layer = limits.call_layer(&asked, || unreachable!()).unwrap();
        assert_eq!(layer.run.jobs, Some(3));
        // Keywords are the settings' own, refused with what they may be.
        let bad = work(&|w| w.scope = Some("everything".into()));
        let why = limits.call_layer(&bad, || Ok(1)).unwrap_err();
        assert!(
            why.starts_with("scope: unknown scope 'everything'"),
            "{why}"
        );
        let merge = work(&|w| w.merge_with = Some("mergiraf".into()));
        let layer = limits.call_layer(&merge, || Ok(1)).unwrap();
        assert_eq!(
            layer.merge.with,
            Some(swarm_engine::app::settings::MergeWith::Mergiraf)
        );
        let bad = work(&|w| w.merge_with = Some("meld".into()));
        let why = limits.call_layer(&bad, || Ok(1)).unwrap_err();
        assert!(
            why.starts_with("merge_with: unknown merge tool 'meld'"),
            "{why}"
        );
    }
}
