//! Which worker each candidate runs (`--agent claude,codex`, `--model a,b`): candidate K gets
//! the K-th of the list, in turn. A list needs a candidate for each of its workers
//! (`--tries`/`--best-of` at least its length), else some would never run.

use super::agents::AgentSettings;
use super::error::{CandidatesProblem, SettingsError};
use super::layer::Layer;
use super::policy::Candidates;
use crate::ids::CandidateNo;

/// The workers candidates take in turn: the agents of `--agent A,B` (each with its model of
/// `--model M,N`), or the built-in worker's models of `--model M,N`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    pub agents: Vec<AgentSettings>,
    pub models: Vec<String>,
}

/// `s` split at commas, each part trimmed, empty ones left out.
fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

impl Rotation {
    /// The rotation `layer` names, its agents resolved by `resolve(name, model)`.
    pub(super) fn of(
        layer: &Layer,
        resolve: impl Fn(&str, Option<String>) -> Result<AgentSettings, SettingsError>,
    ) -> Result<Self, SettingsError> {
        let Some(names) = &layer.run.agent else {
            let models = layer.model.name.as_deref().map(list).unwrap_or_default();
            return Ok(Self {
                agents: Vec::new(),
                models,
            });
        };
        let names = list(names);
        let models: Vec<Option<String>> = match (&layer.run.agent_model, names.len()) {
            (None, n) => vec![None; n],
            (Some(model), 1) => vec![Some(model.clone())],
            (Some(models), n) => {
                let models = list(models);
                if models.len() != n {
                    return Err(SettingsError::Candidates(CandidatesProblem::Models {
                        agents: n,
                        models: models.len(),
                    }));
                }
                models.into_iter().map(Some).collect()
            }
        };
        let agents = names
            .iter()
            .zip(models)
            .map(|(name, model)| resolve(name, model))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            agents,
            models: Vec::new(),
        })
    }

    /// Workers in the list.
    pub fn len(&self) -> usize {
        self.agents.len().max(self.models.len())
    }

    /// A list of several needs a candidate for each.
    pub(super) fn check(&self, candidates: Candidates) -> Result<(), SettingsError> {
        let n = self.len();
        match n > 1 && (candidates.count() as usize) < n {
            true => Err(SettingsError::Candidates(CandidatesProblem::Unused(n))),
            false => Ok(()),
        }
    }

    /// The agent candidate `k` runs (`None`: the task's own worker, the first).
    pub fn agent(&self, k: Option<CandidateNo>) -> Option<&AgentSettings> {
        self.agents.get(self.index(k, self.agents.len()))
    }

    /// The built-in worker's model of candidate `k`, when `--model` is a list.
    pub fn model(&self, k: Option<CandidateNo>) -> Option<&str> {
        self.models
            .get(self.index(k, self.models.len()))
            .map(String::as_str)
    }

    fn index(&self, k: Option<CandidateNo>, len: usize) -> usize {
        match k {
            Some(k) if len > 0 => (k.get() as usize - 1) % len,
            _ => 0,
        }
    }

    /// What candidate `k` runs, in words, when the candidates differ (`claude`, `codex
    /// (gpt-5)`, `gpt-4.1`).
    pub fn label(&self, k: Option<CandidateNo>) -> Option<String> {
        if self.len() < 2 {
            return None;
        }
        match self.agent(k) {
            Some(agent) => Some(match &agent.model {
                Some(model) => format!("{} ({model})", agent.name),
                None => agent.name.clone(),
            }),
            None => self.model(k).map(String::from),
        }
    }
}
