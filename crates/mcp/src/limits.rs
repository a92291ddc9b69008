//! What a tool call may ask for. Its arguments come from a model, so they are held to the
//! rule of a repository's `swarm.toml`: they may narrow what the server allows, never widen
//! it. The sandbox, the network, the budgets' ceilings and the agents that may run are the
//! server's (`swarm mcp`'s flags, the user's config); a call asking for more is refused with
//! a message the model can read, before anything runs.

use std::path::{Component, Path};

use crate::params::Work;

/// What the server allows, from `swarm mcp`'s command line.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// `--sandbox`, passed to every run (`None`: the user's config, else confined).
    pub sandbox: Option<String>,
    /// `--network` for every run's workers.
    pub network: bool,
    /// `--allow-domain` for every run's workers.
    pub allow_domains: Vec<String>,
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
        if let (Some(asked), Some(most)) = (work.jobs, self.max_jobs)
            && asked > most
        {
            return Err(format!(
                "jobs: at most {most} (the server's limit), not {asked}"
            ));
        }
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

    /// The server's own flags, for every run it starts.
    fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(mode) = &self.sandbox {
            flags.push(format!("--sandbox={mode}"));
        }
        if self.network {
            flags.push("--network".into());
        }
        for domain in &self.allow_domains {
            flags.push(format!("--allow-domain={domain}"));
        }
        flags
    }

    /// `swarm refactor`'s (or `swarm plan`'s) flags and positional arguments for `work`,
    /// checked. A limit is a default as well as a cap: what the call leaves out is the
    /// server's (the budgets), or what the run would get (`default_jobs`, the repository's and
    /// the user's settings) held to the server's cap.
    pub(crate) fn command_line(
        &self,
        work: &Work,
        default_jobs: impl FnOnce() -> Result<usize, String>,
    ) -> Result<(Vec<String>, Vec<String>), String> {
        self.check(work)?;
        let jobs = match (work.jobs, self.max_jobs) {
            (None, Some(most)) => Some(default_jobs()?.min(most)),
            (asked, _) => asked,
        };
        let mut flags = self.flags();
        let mut value = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                flags.push(format!("--{name}={value}"));
            }
        };
        value("grep", work.grep.clone());
        value("exec", work.exec.clone());
        value("agent", work.agent.clone());
        value("model", work.model.clone());
        value("jobs", jobs.map(|n| n.to_string()));
        value("batch", work.batch.map(|n| n.to_string()));
        value("per-process", work.per_process.clone());
        value("verify", work.verify.clone());
        value("verify-merged", work.verify_merged.clone());
        value("into", work.into.clone());
        value("scope", work.scope.clone());
        value("on-conflict", work.on_conflict.clone());
        value(
            "ok-exit-codes",
            work.ok_exit_codes.as_ref().map(|codes| {
                let codes: Vec<String> = codes.iter().map(i32::to_string).collect();
                codes.join(",")
            }),
        );
        value("timeout", work.timeout.map(|n| n.to_string()));
        value(
            "max-cost",
            work.max_cost.or(self.max_cost).map(|n| n.to_string()),
        );
        value(
            "max-tokens",
            work.max_tokens.or(self.max_tokens).map(|n| n.to_string()),
        );
        if work.atomic == Some(true) {
            flags.push("--atomic".into());
        }
        let mut positional = vec![work.instruction.clone()];
        positional.extend(work.pathspecs.iter().cloned());
        // No pathspec is every tracked file (the tool's documented default), which swarm
        // wants said with `.`.
        if work.pathspecs.is_empty() {
            positional.push(".".into());
        }
        Ok((flags, positional))
    }
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
        let (flags, positional) = limits.command_line(&work(&|_| {}), || Ok(16)).unwrap();
        assert!(flags.contains(&"--max-cost=2".to_string()), "{flags:?}");
        assert!(flags.contains(&"--jobs=4".to_string()), "{flags:?}");
        assert_eq!(positional, ["x", "."]);
        let (flags, _) = limits.command_line(&work(&|_| {}), || Ok(2)).unwrap();
        assert!(flags.contains(&"--jobs=2".to_string()), "{flags:?}");
        let asked = work(&|w| w.jobs = Some(3));
        let (flags, _) = limits.command_line(&asked, || unreachable!()).unwrap();
        assert!(flags.contains(&"--jobs=3".to_string()), "{flags:?}");
    }
}
